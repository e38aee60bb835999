"""Metrics against hand-worked examples (scikit-learn is not a dependency, so the expected values are computed
by hand in the comments)."""

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
