"""Metrics against hand-worked examples (scikit-learn is not a dependency, so the expected values are computed
by hand in the comments)."""

import math

import pytest

from evaluation.metrics import accuracy, binary_f1, binary_precision_recall_f1, majority_label


def test_accuracy_hand_worked():
    # 4 of 6 equal
    assert accuracy([1, 0, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]) == pytest.approx(4 / 6)
    assert accuracy([0], [0]) == 1.0
    assert accuracy([0, 1], [1, 0]) == 0.0


def test_binary_precision_recall_f1_hand_worked():
    y_true = [1, 1, 1, 0, 0, 1, 0, 0]
    y_pred = [1, 0, 1, 1, 0, 1, 0, 1]
    # tp = 3 (positions 0, 2, 5), fp = 2 (3, 7), fn = 1 (1): precision 3/5, recall 3/4, F1 = 2*.6*.75/1.35 = 2/3
    p, r, f1 = binary_precision_recall_f1(y_true, y_pred)
    assert (p, r) == (pytest.approx(0.6), pytest.approx(0.75))
    assert f1 == pytest.approx(2 / 3)
    # the negative class as positive: tp = 2 (4, 6), fp = 1 (1), fn = 2 (3, 7): p 2/3, r 1/2, F1 = 4/7
    assert binary_f1(y_true, y_pred, positive=0) == pytest.approx(4 / 7)


def test_f1_is_zero_when_the_positive_class_is_never_predicted():
    assert binary_precision_recall_f1([1, 0, 1], [0, 0, 0]) == (0.0, 0.0, 0.0)


def test_length_mismatch_and_empty_are_errors():
    with pytest.raises(ValueError, match="3 labels but y_pred has 2"):
        accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        binary_f1([], [])


def test_majority_label_and_ties():
    assert majority_label([0, 1, 1, 0, 1]) == 1
    assert majority_label([1, 0, 1, 0]) == 0  # a tie goes to the smallest label, whatever the order
    assert majority_label([0, 1, 0, 1]) == 0
    with pytest.raises(ValueError):
        majority_label([])


def test_wilson_interval_known_values_and_bounds():
    from evaluation.metrics import wilson_interval

    lo, hi = wilson_interval(81, 263)  # Newcombe (1998) example 1: 0.2553 - 0.3662... for 81/263
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_mcnemar_counts_discordant_pairs_and_exact_p():
    from evaluation.metrics import mcnemar

    y = [1] * 12
    a = [1] * 10 + [0, 0]          # right on 0..9
    b = [0, 0] + [1] * 8 + [1, 1]  # right on 2..11
    out = mcnemar(y, a, b)
    assert out["a_only"] == 2 and out["b_only"] == 2 and out["p_value"] == 1.0
    # 9 vs 1 discordant: two-sided exact binomial p = 2 * (1 + 10) / 1024
    y = [1] * 10
    out = mcnemar(y, [1] * 9 + [0], [0] * 9 + [1])
    assert (out["a_only"], out["b_only"]) == (9, 1)
    assert out["p_value"] == pytest.approx(22 / 1024)
    assert mcnemar([1, 0], [1, 0], [1, 0])["p_value"] == 1.0


def test_mcnemar_large_samples_use_the_chi_square_approximation():
    from evaluation.metrics import mcnemar

    n_a, n_b = 1300, 1200  # 2,500 discordant pairs
    y = [1] * (n_a + n_b)
    out = mcnemar(y, [1] * n_a + [0] * n_b, [0] * n_a + [1] * n_b)
    statistic = (abs(n_a - n_b) - 1) ** 2 / (n_a + n_b)
    assert out["p_value"] == pytest.approx(math.erfc(math.sqrt(statistic / 2)))
    assert 0.04 < out["p_value"] < 0.06


def test_mcnemar_large_samples_with_equal_discordant_counts_give_p_one():
    from evaluation.metrics import mcnemar

    n = 1500  # 3,000 discordant pairs, split evenly: no evidence either way, as the exact test says
    out = mcnemar([1] * 2 * n, [1] * n + [0] * n, [0] * n + [1] * n)
    assert (out["a_only"], out["b_only"]) == (n, n) and out["p_value"] == 1.0
