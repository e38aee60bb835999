"""The metrics of each task type, computed with evaluation.metrics (the official definitions), primary first.

| task type                  | metrics (primary first)                                                         |
|----------------------------|---------------------------------------------------------------------------------|
| classification, pair-class.| accuracy, f1 (positive class = label 1; two labels only), macro_f1, mcc          |
| regression                 | pearson, spearman, mse (correlations are absent for a constant prediction or one example) |
| tagging                    | entity_f1, entity_precision, entity_recall (seqeval default / conlleval)         |
| squad v1.1                 | f1, exact_match (percent, official normalisation, max over gold answers)        |
| squad v2.0                 | f1, exact at the dev-tuned no-answer threshold; best_f1, best_exact (the threshold tuned on the scored split itself), HasAns_/NoAns_ splits, na_threshold |
| multiple-choice            | accuracy                                                                        |

Every primary metric is "higher is better". `score(...)` returns only finite values.

    metrics = score(task, split_examples, predictions)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .metrics import (accuracy, binary_f1, entity_f1, macro_f1, matthews_corrcoef, multiple_choice_accuracy,
                      pearson, spearman, squad_v1, squad_v2)

PRIMARY = {"classification": "accuracy", "pair-classification": "accuracy", "regression": "pearson",
           "tagging": "entity_f1", "squad": "f1", "multiple-choice": "accuracy"}

METRICS: dict[str, tuple[str, ...]] = {
    "classification": ("accuracy", "f1", "macro_f1", "mcc"),
    "pair-classification": ("accuracy", "f1", "macro_f1", "mcc"),
    "regression": ("pearson", "spearman", "mse"),
    "tagging": ("entity_f1", "entity_precision", "entity_recall"),
    "squad": ("f1", "exact_match", "exact", "best_f1", "best_exact", "HasAns_exact", "HasAns_f1", "NoAns_exact",
              "NoAns_f1", "na_threshold"),
    "multiple-choice": ("accuracy",),
}


@dataclass(frozen=True)
class TaskSpec:
    """What scoring needs to know about a task besides its examples."""

    task_type: str
    label_names: tuple[str, ...] = ()
    squad_v2: bool = False
    primary: str = ""

    @property
    def primary_metric(self) -> str:
        return self.primary or PRIMARY[self.task_type]


def gold(task: TaskSpec, examples: Sequence) -> list:
    """The targets predictions are compared with: label / value / tag ids / option id per example."""
    t = task.task_type
    if t == "regression":
        return [e.target for e in examples]
    if t == "tagging":
        return [list(e.tags) for e in examples]
    if t == "squad":
        return [[a.text for a in e.answers] if not e.is_impossible else [] for e in examples]
    return [e.label for e in examples]


def score(task: TaskSpec, examples: Sequence, predictions, na_probs: Sequence[float] | None = None,
          na_threshold: float | None = None) -> dict[str, float]:
    """Metrics of `predictions` (one per example, as decoded by evaluation.heads) on `examples`.

    SQuAD v2: `na_probs` are the no-answer probabilities; with `na_threshold` (tuned on dev) exact/f1 abstain
    above it, without it (scoring dev) the threshold maximising F1 here is used and returned as na_threshold."""
    t = task.task_type
    y = gold(task, examples)
    if t in ("classification", "pair-classification"):
        out = {"accuracy": accuracy(y, predictions), "macro_f1": macro_f1(y, predictions),
               "mcc": matthews_corrcoef(y, predictions)}
        if len(task.label_names) == 2:
            out["f1"] = binary_f1(y, predictions)
    elif t == "regression":  # correlations of one pair are undefined (max_eval_examples=1): absent, as for a constant
        defined = len(y) >= 2
        out = {"pearson": pearson(y, predictions) if defined else None,
               "spearman": spearman(y, predictions) if defined else None, "mse": mean_squared_error(y, predictions)}
    elif t == "tagging":
        names = task.label_names
        ents = entity_f1([[names[i] for i in s] for s in y], [[names[i] for i in s] for s in predictions])
        out = {"entity_f1": ents["f1"], "entity_precision": ents["precision"], "entity_recall": ents["recall"]}
    elif t == "squad":
        out = _score_squad(task, examples, y, predictions, na_probs, na_threshold)
    elif t == "multiple-choice":
        out = {"accuracy": multiple_choice_accuracy(y, predictions)}
    else:
        raise ValueError(f"unknown task type {t!r}")
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _score_squad(task: TaskSpec, examples, golds, texts, na_probs, na_threshold) -> dict:
    ids = [e.id for e in examples]
    predictions = dict(zip(ids, texts))
    gold_map = dict(zip(ids, golds))
    if not task.squad_v2:
        out = squad_v1(predictions, gold_map)
        return {"f1": out["f1"], "exact_match": out["exact_match"]}
    if na_probs is None:
        raise ValueError("SQuAD v2 scoring needs the no-answer probabilities")
    probs = dict(zip(ids, na_probs))
    tuned = squad_v2(predictions, gold_map, probs)
    threshold = tuned["best_f1_thresh"] if na_threshold is None else na_threshold
    out = squad_v2(predictions, gold_map, probs, na_prob_thresh=threshold)
    keep = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1")
    result = {k: out[k] for k in keep if k in out}
    result.update(best_exact=tuned["best_exact"], best_f1=tuned["best_f1"], na_threshold=threshold)
    return result


def mean_squared_error(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    if len(y_true) != len(y_pred) or not y_true:
        raise ValueError(f"mean squared error of {len(y_true)} targets and {len(y_pred)} predictions")
    return float(np.mean((np.asarray(y_true, dtype=np.float64) - np.asarray(y_pred, dtype=np.float64)) ** 2))


def confusion_matrix(y_true: Sequence[int], y_pred: Sequence[int], num_labels: int) -> list[list[int]]:
    """Rows: gold label, columns: predicted label."""
    matrix = np.zeros((num_labels, num_labels), dtype=np.int64)
    for t, p in zip(y_true, y_pred):
        matrix[int(t), int(p)] += 1
    return matrix.tolist()
