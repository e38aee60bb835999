"""Non-neural baselines on the same splits the fine-tuned models are scored on, with the same metrics.

- `majority`: the answer that needs no input. Classification: the most frequent train label (ties: smallest id);
  regression: the train mean (its correlations are undefined, so only `mse` is reported); tagging: the most
  frequent train tag (O) on every word; multiple-choice: the most frequent correct option position; SQuAD: no
  answer for every question.
- `tfidf_logreg`: scikit-learn TfidfVectorizer (word unigrams + bigrams, sublinear tf) + LogisticRegression
  (lbfgs, C picked on dev from {0.1, 1, 10}). Pairs: text and text_b vectorised separately, side by side.
  Regression: Ridge regression (alpha picked on dev from {0.1, 1, 10}) instead of logistic regression, and
  reported under the same key. Multiple choice: a binary classifier of "is this the right option" over
  tfidf(question + option) next to tfidf(option), the option with the highest probability chosen. Not for
  tagging and SQuAD (no sequence labelling / span model here): `tfidf_logreg` returns None for them.

    result = tfidf_logreg(data)          # BaselineResult or None
    result.test_metrics["accuracy"]
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .scoring import TaskSpec, gold, score
from .tasks.base import TaskData

logger = logging.getLogger(__name__)

C_GRID = (0.1, 1.0, 10.0)


@dataclass
class BaselineResult:
    name: str
    test_metrics: dict[str, float]
    dev_metrics: dict[str, float]
    test_predictions: list
    details: dict = field(default_factory=dict)


def _constant_predictions(spec: TaskSpec, data: TaskData, examples: Sequence) -> tuple[list, list | None, dict]:
    t = spec.task_type
    if t == "regression":
        mean = float(np.mean([e.target for e in data.train]))
        return [mean] * len(examples), None, {"value": mean}
    if t == "tagging":
        counts = Counter(tag for e in data.train for tag in e.tags)
        tag = min(counts, key=lambda k: (-counts[k], k))
        return [[tag] * len(e.words) for e in examples], None, {"label": tag, "label_name": data.label_names[tag]}
    if t == "squad":
        return [""] * len(examples), [1.0] * len(examples), {"answer": ""}
    counts = Counter(e.label for e in data.train)
    label = min(counts, key=lambda k: (-counts[k], k))
    details = {"label": label}
    if t != "multiple-choice":
        details["label_name"] = data.label_names[label]
    return [label] * len(examples), None, details


def majority(data: TaskData, spec: TaskSpec) -> BaselineResult:
    test, na_test, details = _constant_predictions(spec, data, data.test)
    dev, na_dev, _ = _constant_predictions(spec, data, data.dev)
    dev_metrics = score(spec, data.dev, dev, na_dev)
    test_metrics = score(spec, data.test, test, na_test, dev_metrics.get("na_threshold"))
    return BaselineResult("majority", test_metrics, dev_metrics, test, details)


def _vectorizer():
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True)


def _design(vectorizers, columns: list[list[str]], fit: bool):
    from scipy.sparse import hstack

    blocks = [v.fit_transform(c) if fit else v.transform(c) for v, c in zip(vectorizers, columns)]
    return hstack(blocks).tocsr()


def tfidf_logreg(data: TaskData, spec: TaskSpec) -> BaselineResult | None:
    """See the module docstring; None for tagging and SQuAD."""
    import sklearn.linear_model  # noqa: F401  (loads scipy's BLAS before the limit, which only covers loaded ones)
    from threadpoolctl import threadpool_limits

    # One BLAS thread: these sparse problems gain nothing from more, and on a busy 2-core machine OpenBLAS's
    # spinning threads made a 200-example fit take 13.6 s instead of 0.07 s (measured).
    with threadpool_limits(limits=1):
        return _tfidf_logreg(data, spec)


def _tfidf_logreg(data: TaskData, spec: TaskSpec) -> BaselineResult | None:
    t = spec.task_type
    if t in ("tagging", "squad"):
        return None
    from sklearn.linear_model import LogisticRegression, Ridge

    if t == "multiple-choice":
        return _choice_baseline(data, spec)
    has_b = any(e.text_b is not None for e in data.train)

    def columns(examples):
        cols = [[e.text for e in examples]]
        if has_b:
            cols.append([e.text_b or "" for e in examples])
        return cols

    vectorizers = [_vectorizer() for _ in range(2 if has_b else 1)]
    x_train = _design(vectorizers, columns(data.train), fit=True)
    x_dev, x_test = (_design(vectorizers, columns(s), fit=False) for s in (data.dev, data.test))
    y_train = gold(spec, data.train)
    if t != "regression" and len(set(y_train)) < 2:
        return None  # one class in train: nothing to fit (the majority baseline covers it)
    best = None
    for c in C_GRID:
        model = Ridge(alpha=c) if t == "regression" else LogisticRegression(C=c, max_iter=2000)
        model.fit(x_train, y_train)
        dev_pred = model.predict(x_dev).tolist()
        dev_metrics = score(spec, data.dev, dev_pred)
        key = dev_metrics.get(spec.primary_metric, -np.inf)
        if best is None or key > best[0]:
            best = (key, c, model, dev_metrics)
    _, c, model, dev_metrics = best
    test_pred = model.predict(x_test).tolist()
    if t != "regression":
        test_pred = [int(p) for p in test_pred]
    details = {"model": "Ridge" if t == "regression" else "LogisticRegression",
               ("alpha" if t == "regression" else "C"): c, "features": int(x_train.shape[1])}
    return BaselineResult("tfidf_logreg", score(spec, data.test, test_pred), dev_metrics, test_pred, details)


def _choice_baseline(data: TaskData, spec: TaskSpec) -> BaselineResult:
    from sklearn.linear_model import LogisticRegression

    def rows(examples):
        qo = [f"{e.question} {o}" for e in examples for o in e.options]
        opt = [o for e in examples for o in e.options]
        return [qo, opt]

    vectorizers = [_vectorizer(), _vectorizer()]
    x_train = _design(vectorizers, rows(data.train), fit=True)
    y_train = [int(k == e.label) for e in data.train for k in range(len(e.options))]

    def choose(model, examples):
        x = _design(vectorizers, rows(examples), fit=False)
        probs = model.predict_proba(x)[:, 1]
        out, start = [], 0
        for e in examples:
            out.append(int(np.argmax(probs[start: start + len(e.options)])))
            start += len(e.options)
        return out

    best = None
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000).fit(x_train, y_train)
        dev_metrics = score(spec, data.dev, choose(model, data.dev))
        if best is None or dev_metrics["accuracy"] > best[0]:
            best = (dev_metrics["accuracy"], c, model, dev_metrics)
    _, c, model, dev_metrics = best
    test_pred = choose(model, data.test)
    return BaselineResult("tfidf_logreg", score(spec, data.test, test_pred), dev_metrics, test_pred,
                          {"model": "LogisticRegression (option scorer)", "C": c, "features": int(x_train.shape[1])})
