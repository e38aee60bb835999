"""Classification metrics on plain integer label sequences: accuracy, binary precision/recall/F1, majority class,
and the statistics that say whether a difference in accuracy means anything (Wilson interval, McNemar's test).

    from evaluation.metrics import accuracy, binary_f1
    accuracy([1, 0, 1], [1, 1, 1])    # 0.666...
    binary_f1([1, 0, 1], [1, 1, 1])   # F1 of the positive class (label 1)
    mcnemar([1, 0, 1], [1, 1, 1], [0, 0, 1])   # paired comparison of two classifiers on the same examples
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence


def _check(y_true: Sequence[int], y_pred: Sequence[int]) -> None:
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} labels but y_pred has {len(y_pred)}")
    if len(y_true) == 0:
        raise ValueError("cannot score an empty set of predictions")


def accuracy(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    _check(y_true, y_pred)
    return sum(int(t) == int(p) for t, p in zip(y_true, y_pred)) / len(y_true)


def binary_precision_recall_f1(y_true: Sequence[int], y_pred: Sequence[int], positive: int = 1) -> tuple[float, float, float]:
    """Precision, recall and F1 of class `positive`. A ratio with a zero denominator is 0.0 (as scikit-learn's
    zero_division=0), so a classifier that never predicts the positive class has F1 0."""
    _check(y_true, y_pred)
    tp = sum(int(t) == positive and int(p) == positive for t, p in zip(y_true, y_pred))
    fp = sum(int(t) != positive and int(p) == positive for t, p in zip(y_true, y_pred))
    fn = sum(int(t) == positive and int(p) != positive for t, p in zip(y_true, y_pred))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def binary_f1(y_true: Sequence[int], y_pred: Sequence[int], positive: int = 1) -> float:
    return binary_precision_recall_f1(y_true, y_pred, positive)[2]


def majority_label(labels: Sequence[int]) -> int:
    """The most frequent label; ties go to the smallest label so the choice never depends on order."""
    if len(labels) == 0:
        raise ValueError("no labels to take the majority of")
    counts = Counter(int(x) for x in labels)
    best = max(counts.values())
    return min(label for label, n in counts.items() if n == best)


def wilson_interval(correct: int, total: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95 % for the default z): unlike the normal approximation it
    stays inside [0, 1] and behaves near 0 and 1 (Wilson 1927; Brown, Cai & DasGupta 2001)."""
    if total <= 0:
        raise ValueError("an interval needs at least one trial")
    if not 0 <= correct <= total:
        raise ValueError(f"correct={correct} must lie in [0, {total}]")
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


# Above this many discordant pairs the exact binomial sum is replaced by the continuity-corrected chi-square
# statistic, which agrees with it to well under 1e-3 there and costs nothing.
_MCNEMAR_EXACT_LIMIT = 2000


def mcnemar(y_true: Sequence[int], pred_a: Sequence[int], pred_b: Sequence[int]) -> dict:
    """McNemar's test of two classifiers scored on the same examples. Only the examples exactly one of them gets
    right carry information: `a_only` and `b_only` count them; `p_value` is the two-sided exact binomial test of
    a_only vs b_only at 1/2 (mid-sized samples) or its chi-square approximation (large ones)."""
    _check(y_true, pred_a)
    _check(y_true, pred_b)
    a_only = sum(int(p) == int(t) and int(q) != int(t) for t, p, q in zip(y_true, pred_a, pred_b))
    b_only = sum(int(q) == int(t) and int(p) != int(t) for t, p, q in zip(y_true, pred_a, pred_b))
    n = a_only + b_only
    if n == 0:
        p_value = 1.0
    elif n <= _MCNEMAR_EXACT_LIMIT:
        tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1))
        p_value = min(1.0, 2 * tail / 2**n)
    else:
        statistic = max(0, abs(a_only - b_only) - 1) ** 2 / n  # equal counts: p = 1, as the exact test
        p_value = math.erfc(math.sqrt(statistic / 2))
    return {"a_only": a_only, "b_only": b_only, "p_value": p_value}
