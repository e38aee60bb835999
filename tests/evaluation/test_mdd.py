"""evaluation.mdd: the minimal detectable differences are the smallest with the asked power, checked against the
binomial tails directly and, for McNemar, against the project's own test (evaluation.metrics.mcnemar) by simulation."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from evaluation.mdd import binomial_mdd, mcnemar_mdd, task_mdd
from evaluation.metrics import mcnemar


def _rejects_at(n: int, p0: float) -> int:
    """Smallest k whose upper tail under p0 is <= 0.025, by plain enumeration."""
    return next(k for k in range(n + 1) if binom.sf(k - 1, n, p0) <= 0.025)


@pytest.mark.parametrize("n, p0", [(400, 0.5), (500, 0.245), (200, 0.8), (1000, 0.1)])
def test_binomial_mdd_is_the_smallest_gain_with_80_percent_power(n, p0):
    mdd = binomial_mdd(n, p0)
    k = _rejects_at(n, p0)
    assert binom.sf(k - 1, n, p0 + mdd) >= 0.8 - 1e-9
    assert binom.sf(k - 1, n, p0 + mdd - 1e-3) < 0.8
    # the normal approximation (z_.975 sqrt(p0 q0) + z_.8 sqrt(p1 q1)) / sqrt(n) lands within a point of it
    p1 = p0 + mdd
    approx = (1.959964 * math.sqrt(p0 * (1 - p0)) + 0.841621 * math.sqrt(p1 * (1 - p1))) / math.sqrt(n)
    assert abs(mdd - approx) < 0.01


def test_binomial_mdd_shrinks_like_one_over_root_n():
    small, large = binomial_mdd(100, 0.5), binomial_mdd(1600, 0.5)
    assert large < small
    assert 3.0 < small / large < 5.0  # 16x the examples: about a quarter of the difference


def test_binomial_mdd_none_when_nothing_is_detectable():
    assert binomial_mdd(4, 0.5) is None  # even 4/4 right has p = 0.0625 against a coin
    assert binomial_mdd(5, 0.9) is None


def test_mcnemar_mdd_detected_by_the_projects_mcnemar_with_the_asked_power():
    n, d = 300, 0.3
    mdd = mcnemar_mdd(n, d)
    m = round(n * d)
    rng = np.random.default_rng(0)

    def rejection_rate(delta: float) -> float:
        q = (1 + delta / (m / n)) / 2  # share of the discordant examples model A wins
        hits = 0
        for _ in range(1500):
            a_wins = rng.binomial(m, q)
            # m discordant examples (a_wins right only for A, the rest only for B), the others right for both
            y = [1] * n
            pred_a = [1] * a_wins + [0] * (m - a_wins) + [1] * (n - m)
            pred_b = [0] * a_wins + [1] * (m - a_wins) + [1] * (n - m)
            hits += mcnemar(y, pred_a, pred_b)["p_value"] < 0.05
        return hits / 1500

    assert rejection_rate(mdd) >= 0.77  # 0.8 up to the simulation's noise (sd ~0.01)
    assert rejection_rate(mdd * 0.7) < 0.7


def test_mcnemar_mdd_edge_cases():
    assert mcnemar_mdd(400, 0.0) is None  # models that agree everywhere: nothing to test
    assert mcnemar_mdd(50, 0.1) is None  # 5 discordant examples: the smallest p-value is 0.0625
    assert mcnemar_mdd(400, 0.1) < mcnemar_mdd(400, 0.4)  # more disagreement, more noise in the difference


@pytest.mark.parametrize("call, match", [
    (lambda: binomial_mdd(0, 0.5), "at least one example"),
    (lambda: binomial_mdd(100, 1.0), r"\[0, 1\)"),
    (lambda: mcnemar_mdd(100, 1.5), r"\[0, 1\]"),
    (lambda: binomial_mdd(100, 0.5, alpha=0.0), "alpha and power"),
])
def test_bad_arguments_say_what_is_wrong(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_task_mdd_holds_both_and_the_settings():
    out = task_mdd(500, majority_accuracy=0.245, discordant_fraction=0.2)
    assert out["test_examples"] == 500 and out["alpha"] == 0.05 and out["power"] == 0.8
    assert out["vs_majority"] == binomial_mdd(500, 0.245)
    assert out["paired"] == mcnemar_mdd(500, 0.2)
    assert set(task_mdd(500)) == {"test_examples", "alpha", "power"}


# ------------------------------------------------------------------ results.json and the `bertfactory run` summary


def _results_example() -> dict:
    """test_results.py's valid results document (loaded by path: tests/ is not a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("results_example", Path(__file__).with_name("test_results.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.example()


def test_detectable_differences_of_a_task():
    from types import SimpleNamespace

    from evaluation.run import detectable_differences
    from evaluation.scoring import TaskSpec

    examples = [SimpleNamespace(label=label) for label in [0] * 300 + [1] * 100]
    task = SimpleNamespace(spec=TaskSpec("classification", ("a", "b"), False, "accuracy"),
                           test=SimpleNamespace(examples=examples))
    # no majority baseline: the commonest test label's share (0.75); no random-init run: nothing paired
    assert detectable_differences(task, {}) == task_mdd(400, 0.75)
    out = {"majority": {"accuracy": 0.7}, "comparison": {"pretrained_only_correct": 70, "random_init_only_correct": 50}}
    assert detectable_differences(task, out) == task_mdd(400, 0.7, 0.3)


def test_results_keep_the_mdd_and_the_summary_prints_it(tmp_path):
    from evaluation.results import read_results, write_results
    from flows.summary import summary_rows

    doc = _results_example()
    # 10 examples: 10/10 right still tells a model from a coin; 2 discordant ones tell two models apart never
    doc["tasks"]["movie_sentiment"]["mdd"] = task_mdd(10, 0.5, 0.2)
    doc["tasks"]["movie_valence"].pop("majority")
    doc["tasks"]["trec"] = {**doc["tasks"]["movie_sentiment"], "mdd": task_mdd(500, 0.245)}
    write_results(tmp_path / "eval" / "results.json", doc)
    assert read_results(tmp_path / "eval")["tasks"]["trec"]["mdd"]["vs_majority"] == binomial_mdd(500, 0.245)
    rows = {label: value for _, label, value in summary_rows(tmp_path)}
    assert rows["movie_sentiment detectable accuracy diff. (n 10, α .05, power .8)"] == \
        f"vs majority {binomial_mdd(10, 0.5) * 100:.1f} points, paired none at this size (discordant 20%)"
    assert rows["trec detectable accuracy diff. (n 500, α .05, power .8)"] == \
        f"vs majority {binomial_mdd(500, 0.245) * 100:.1f} points"


def test_results_refuse_a_bad_mdd(tmp_path):
    from bertfactory.errors import ContractError
    from evaluation.results import write_results

    doc = _results_example()
    doc["tasks"]["movie_sentiment"]["mdd"] = {**task_mdd(400, 0.5), "power": 1.5}
    with pytest.raises((ContractError, ValueError), match="power"):
        write_results(tmp_path / "results.json", doc)
