"""Classification metrics on plain integer label sequences: accuracy, binary precision/recall/F1, majority class,
and the statistics that say whether a difference in accuracy means anything (Wilson interval, McNemar's test).

    from evaluation.metrics import accuracy, binary_f1
    accuracy([1, 0, 1], [1, 1, 1])    # 0.666...
    binary_f1([1, 0, 1], [1, 1, 1])   # F1 of the positive class (label 1)
    mcnemar([1, 0, 1], [1, 1, 1], [0, 0, 1])   # paired comparison of two classifiers on the same examples

The benchmark metrics, each defined exactly as the official script or reference implementation defines it:

    macro_f1, matthews_corrcoef          # scikit-learn f1_score(average="macro", zero_division=0), matthews_corrcoef
    pearson, spearman                    # scipy.stats.pearsonr / spearmanr (average ranks for ties)
    squad_v1(predictions, golds)         # the official SQuAD v1.1 evaluate script: {"exact_match", "f1"} in %
    squad_v2(predictions, golds, na_probs)   # the official SQuAD v2.0 script, incl. HasAns/NoAns and best thresholds
    entity_f1(true_tags, pred_tags)      # seqeval's default (conlleval) entity-level micro P/R/F1 over BIO tags
    multiple_choice_accuracy             # plain accuracy over the chosen option indices
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Mapping, Sequence


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


# --------------------------------------------------------------------------------------------- classification


def multiple_choice_accuracy(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    """Accuracy of multiple-choice answers (SWAG, RACE, ...): the index of the gold option vs the index of the
    chosen one. It is exactly `accuracy`, reused; the separate name only says what is being scored."""
    return accuracy(y_true, y_pred)


def macro_f1(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    """The unweighted mean over classes of each class's F1, as scikit-learn's f1_score(average="macro",
    zero_division=0): the classes are those that occur in y_true or y_pred, and a class's F1 is
    2 tp / (2 tp + fp + fn) (0 when it is never predicted or never right)."""
    _check(y_true, y_pred)
    pairs = [(int(t), int(p)) for t, p in zip(y_true, y_pred)]
    labels = sorted({t for t, _ in pairs} | {p for _, p in pairs})
    total = 0.0
    for label in labels:
        tp = sum(t == label and p == label for t, p in pairs)
        fp = sum(t != label and p == label for t, p in pairs)
        fn = sum(t == label and p != label for t, p in pairs)
        total += 2 * tp / (2 * tp + fp + fn)  # the label occurs somewhere, so the denominator is positive
    return total / len(labels)


def matthews_corrcoef(y_true: Sequence[int], y_pred: Sequence[int]) -> float:
    """Matthews correlation coefficient in its multi-class form (Gorodkin 2004), as scikit-learn's
    matthews_corrcoef: with n samples, c correct, t_k / p_k the true / predicted count of class k,

        MCC = (c n - sum_k t_k p_k) / sqrt((n^2 - sum_k p_k^2) (n^2 - sum_k t_k^2))

    which is the familiar (tp tn - fp fn) / sqrt(...) for two classes. 0.0 when the denominator is 0 (all
    labels or all predictions one class), as scikit-learn."""
    _check(y_true, y_pred)
    pairs = [(int(t), int(p)) for t, p in zip(y_true, y_pred)]
    n = len(pairs)
    correct = sum(t == p for t, p in pairs)
    t_count = Counter(t for t, _ in pairs)
    p_count = Counter(p for _, p in pairs)
    cov_tp = correct * n - sum(t_count[k] * p_count[k] for k in t_count)
    cov_pp = n * n - sum(v * v for v in p_count.values())
    cov_tt = n * n - sum(v * v for v in t_count.values())
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return cov_tp / (math.sqrt(cov_tt) * math.sqrt(cov_pp))


# --------------------------------------------------------------------------------------------- correlation


def _check_xy(x: Sequence[float], y: Sequence[float]) -> tuple[list[float], list[float]]:
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values but y has {len(y)}")
    if len(x) < 2:
        raise ValueError(f"a correlation needs at least 2 pairs, got {len(x)}")
    return [float(v) for v in x], [float(v) for v in y]


def _pearson(x: list[float], y: list[float]) -> float:
    if all(v == x[0] for v in x) or all(v == y[0] for v in y):
        return math.nan  # undefined for a constant input; scipy also returns nan (with a warning)
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    dx = [v - mx for v in x]
    dy = [v - my for v in y]
    num = math.fsum(a * b for a, b in zip(dx, dy))
    den = math.sqrt(math.fsum(a * a for a in dx)) * math.sqrt(math.fsum(b * b for b in dy))
    return max(-1.0, min(1.0, num / den))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r, as scipy.stats.pearsonr(x, y).statistic (STS-B, the GLUE scripts): nan when x or y is
    constant (the coefficient is undefined there; scipy returns nan as well); ValueError for fewer than 2 pairs."""
    return _pearson(*_check_xy(x, y))


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks with ties given the mean of the ranks they span, as scipy.stats.rankdata(method="average"):
    [10, 20, 20, 30] -> [1, 2.5, 2.5, 4]."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        rank = (start + end) / 2 + 1  # mean of the 1-based positions start+1 .. end+1
        for k in range(start, end + 1):
            ranks[order[k]] = rank
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho, as scipy.stats.spearmanr(x, y).statistic: Pearson's r of the average ranks (ties share
    the mean of their ranks); nan when x or y is constant, as scipy."""
    xs, ys = _check_xy(x, y)
    return _pearson(average_ranks(xs), average_ranks(ys))


# --------------------------------------------------------------------------------------------- SQuAD

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


# the official SQuAD evaluate script's name for it (American spelling kept so it can be found next to the script)
def normalize_answer(text: str) -> str:
    """The official SQuAD (v1.1 and v2.0) normalisation, in its order: lowercase, drop every ASCII punctuation
    character, replace the words a / an / the by a space, and collapse runs of whitespace to single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_token_f1(prediction: str, gold: str) -> float:
    """SQuAD v1.1 token F1: the overlap is the multiset intersection of the normalised tokens; 0.0 when there
    is no overlap (including when either side normalises to nothing, as the v1.1 script)."""
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def _overlap_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """F1 of the multiset intersection of two token lists; 0.0 without overlap."""
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _squad_v2_token_f1(prediction: str, gold: str) -> float:
    """SQuAD v2.0 token F1: as v1.1, except that when either side has no tokens the score is 1 if both have
    none (a correct abstention) and 0 otherwise."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    return _overlap_f1(pred_tokens, gold_tokens)


def squad_v1(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict:
    """Corpus-level SQuAD v1.1 as the official evaluate-v1.1.py: for every question in `golds`, the maximum over
    its gold answers of exact match and of token F1, averaged and given in percent. As the official script, a
    question without a prediction scores 0 (and counts), and predictions for unknown ids are ignored."""
    if not golds:
        raise ValueError("no gold questions to score")
    em = f1 = 0.0
    for qid, answers in golds.items():
        if isinstance(answers, str):
            raise ValueError(f"gold answers of {qid!r} must be a list of strings, not a string")
        if not answers:
            raise ValueError(f"question {qid!r} has no gold answer (SQuAD v1.1 questions all have one)")
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        em += max(squad_exact_match(prediction, gold) for gold in answers)
        f1 += max(squad_token_f1(prediction, gold) for gold in answers)
    return {"exact_match": 100.0 * em / len(golds), "f1": 100.0 * f1 / len(golds)}


def _best_threshold(predictions, scores, na_probs, has_answer) -> tuple[float, float]:
    """The official v2 find_best_thresh: start from abstaining everywhere (every no-answer question right), then
    walk the questions by increasing no-answer probability, answering each; the threshold is the probability at
    which the running score was highest (first reached)."""
    score = best = sum(not has for has in has_answer.values())
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):  # stable: ties keep the order of na_probs
        if qid not in scores:
            continue
        if has_answer[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        score += diff
        if score > best:
            best, best_thresh = score, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def squad_v2(
    predictions: Mapping[str, str],
    golds: Mapping[str, Sequence[str]],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict:
    """Corpus-level SQuAD v2.0 as the official evaluate-v2.0.py. An empty prediction string means "no answer".
    A question with no gold answers is a no-answer (NoAns) question; gold answers that normalise to nothing are
    dropped before scoring, and a question left with none is scored against the single gold "" (exact and F1 are
    1 for a prediction that normalises to nothing, 0 otherwise).

    Returns percentages `exact`, `f1` and `total`; `HasAns_exact`, `HasAns_f1`, `HasAns_total` only when there
    are answerable questions and the `NoAns_` ones only when there are unanswerable ones (as the official
    script). With `na_probs` (question id -> probability of no answer), a prediction whose probability exceeds
    `na_prob_thresh` counts as an abstention, and `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`
    are added as the official find_best_thresh computes them (from the raw, unthresholded scores).

    Every gold question needs a prediction (the official script crashes otherwise; here: ValueError), and with
    na_probs a probability; extra prediction ids are ignored."""
    if not golds:
        raise ValueError("no gold questions to score")
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} gold questions have no prediction, e.g. {missing[0]!r}")
    if na_probs is not None:
        missing = [qid for qid in golds if qid not in na_probs]
        if missing:
            raise ValueError(f"{len(missing)} gold questions have no no-answer probability, e.g. {missing[0]!r}")
    has_answer: dict[str, bool] = {}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qid, answers in golds.items():
        if isinstance(answers, str):
            raise ValueError(f"gold answers of {qid!r} must be a list of strings, not a string")
        has_answer[qid] = len(answers) > 0  # as the official script: the raw list, before normalisation
        real = [a for a in answers if normalize_answer(a)] or [""]
        prediction = predictions[qid]
        exact_raw[qid] = max(squad_exact_match(prediction, gold) for gold in real)
        f1_raw[qid] = max(_squad_v2_token_f1(prediction, gold) for gold in real)

    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in golds}
    exact, f1 = dict(exact_raw), dict(f1_raw)
    for qid in golds:
        if probs[qid] > na_prob_thresh:  # abstain: right exactly when the question has no answer
            exact[qid] = f1[qid] = float(not has_answer[qid])

    def summary(qids: list[str], prefix: str) -> dict:
        return {
            f"{prefix}exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            f"{prefix}f1": 100.0 * sum(f1[q] for q in qids) / len(qids),
            f"{prefix}total": len(qids),
        }

    out = summary(list(golds), "")
    has_ids = [q for q in golds if has_answer[q]]
    no_ids = [q for q in golds if not has_answer[q]]
    if has_ids:
        out.update(summary(has_ids, "HasAns_"))
    if no_ids:
        out.update(summary(no_ids, "NoAns_"))
    if na_probs is not None:
        sub = {qid: float(na_probs[qid]) for qid in na_probs if qid in golds}
        out["best_exact"], out["best_exact_thresh"] = _best_threshold(predictions, exact_raw, sub, has_answer)
        out["best_f1"], out["best_f1_thresh"] = _best_threshold(predictions, f1_raw, sub, has_answer)
    return out


# --------------------------------------------------------------------------------------------- entities (NER)


def bio_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities of one BIO-tagged sentence as (type, start, end) with `end` inclusive, the way seqeval's
    default (conlleval) mode reads them: B-X starts an entity; I-X continues one of type X and otherwise (after
    O, or after an entity of another type) starts a new one; O ends it. Tags other than O, B-*, I-* are errors."""
    entities: list[tuple[str, int, int]] = []
    current: list = []  # [type, start] of the open entity, or empty
    for i, tag in enumerate(list(tags) + ["O"]):
        if tag == "O":
            prefix, kind = "O", None
        elif len(tag) > 2 and tag[:2] in ("B-", "I-"):
            prefix, kind = tag[0], tag[2:]
        else:
            raise ValueError(f"tag {tag!r} at position {i} is not O, B-TYPE or I-TYPE")
        continues = prefix == "I" and current and current[0] == kind
        if current and not continues:
            entities.append((current[0], current[1], i - 1))
            current = []
        if prefix in ("B", "I") and not continues:
            current = [kind, i]
    return entities


def entity_f1(true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro precision, recall and F1 over sentences of BIO tags, as seqeval's classification
    defaults (mode=None, i.e. conlleval): an entity counts as right only when its type, start and end all match
    a gold entity. Ratios with a zero denominator are 0.0. Returns precision, recall, f1 and the counts."""
    if isinstance(true_tags, str) or isinstance(pred_tags, str):
        raise ValueError("tags must be a list of sentences, each a list of tags")
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"true_tags has {len(true_tags)} sentences but pred_tags has {len(pred_tags)}")
    if len(true_tags) == 0:
        raise ValueError("cannot score an empty set of sentences")
    gold: set = set()
    pred: set = set()
    for s, (t, p) in enumerate(zip(true_tags, pred_tags)):
        if isinstance(t, str) or isinstance(p, str):
            raise ValueError("tags must be a list of sentences, each a list of tags (got a string)")
        if len(t) != len(p):
            raise ValueError(f"sentence {s} has {len(t)} true tags but {len(p)} predicted tags")
        gold.update((s, *e) for e in bio_entities(t))
        pred.update((s, *e) for e in bio_entities(p))
    correct = len(gold & pred)
    precision = correct / len(pred) if pred else 0.0
    recall = correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "n_correct": correct, "n_pred": len(pred), "n_true": len(gold)}
