"""Classification metrics on plain integer label sequences: accuracy, binary precision/recall/F1, majority class.

    from evaluation.metrics import accuracy, binary_f1
    accuracy([1, 0, 1], [1, 1, 1])    # 0.666...
    binary_f1([1, 0, 1], [1, 1, 1])   # F1 of the positive class (label 1)
"""

from __future__ import annotations

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
