"""Non-neural baselines: majority answers per task type, TF-IDF + logistic regression (Ridge for regression) on
the real movie-review sentences, scored with the same metrics and deterministic."""

import pytest

from evaluation.baselines import majority, tfidf_logreg
from evaluation.finetune import limit_examples, task_spec
from evaluation.config import FinetuneConfig
from evaluation.tasks.movie_sentiment import load_movie_sentiment
from tests.evaluation.test_finetune import rule_task


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory):
    from tests.evaluation.conftest import write_task_slice

    path = write_task_slice(tmp_path_factory.mktemp("slice") / "reviews.txt", 2500)
    return load_movie_sentiment(path)


def test_majority_per_task_type():
    cls = rule_task("classification")
    result = majority(cls, task_spec(cls))
    train_counts = [sum(e.label == k for e in cls.train) for k in (0, 1)]
    label = int(train_counts[1] > train_counts[0])
    assert result.details == {"label": label, "label_name": cls.label_names[label]}
    assert result.test_metrics["accuracy"] == pytest.approx(sum(e.label == label for e in cls.test) / len(cls.test))
    assert result.test_metrics["mcc"] == 0.0

    reg = rule_task("regression")
    result = majority(reg, task_spec(reg))
    mean = sum(e.target for e in reg.train) / len(reg.train)
    assert result.details["value"] == pytest.approx(mean)
    assert "pearson" not in result.test_metrics  # undefined for a constant prediction
    assert result.test_metrics["mse"] == pytest.approx(sum((e.target - mean) ** 2 for e in reg.test) / len(reg.test))

    tag = rule_task("tagging")
    result = majority(tag, task_spec(tag))
    assert result.details["label_name"] == "O" and result.test_metrics["entity_f1"] == 0.0

    squad = rule_task("squad")
    result = majority(squad, task_spec(squad))
    no_answer = sum(e.is_impossible for e in squad.test) / len(squad.test)
    assert result.test_metrics["NoAns_exact"] == 100.0 and result.test_metrics["exact"] >= 100 * no_answer - 1e-9


def test_tfidf_logreg_beats_majority_on_real_sentiment_and_is_deterministic(sentiment):
    data = limit_examples(sentiment, FinetuneConfig(max_train_examples=1500))
    spec = task_spec(data)
    result = tfidf_logreg(data, spec)
    assert result.details["model"] == "LogisticRegression" and result.details["C"] in (0.1, 1.0, 10.0)
    assert result.test_metrics["accuracy"] > majority(data, spec).test_metrics["accuracy"] + 0.1
    assert set(result.test_metrics) == {"accuracy", "f1", "macro_f1", "mcc"}
    assert tfidf_logreg(data, spec).test_predictions == result.test_predictions


def test_tfidf_regression_is_ridge_and_tagging_has_none():
    reg = rule_task("regression")
    result = tfidf_logreg(reg, task_spec(reg))
    assert result.details["model"] == "Ridge" and result.test_metrics["pearson"] > 0.5  # counts of "the" are lexical
    pair = rule_task("pair-classification")
    result = tfidf_logreg(pair, task_spec(pair))
    assert result.test_metrics["accuracy"] > 0.7  # the rule is in text_b (majority: ~0.5), vectorised on its own
    mc = rule_task("multiple-choice", 900)
    assert tfidf_logreg(mc, task_spec(mc)).test_metrics["accuracy"] > 0.6
    for kind in ("tagging", "squad"):
        data = rule_task(kind)
        assert tfidf_logreg(data, task_spec(data)) is None
