"""Layer maps of DistilBERT, BERT-PKD and TinyBERT; out-of-range maps are refused."""

import pytest

from bertfactory.errors import ConfigError
from distillation.layer_map import check_map, every_other, pkd_map, tinybert_map


def test_every_other():
    assert every_other(12) == [1, 3, 5, 7, 9, 11]
    assert every_other(4) == [1, 3]
    with pytest.raises(ConfigError):
        every_other(1)


def test_pkd_skip_and_last_as_in_the_paper():
    # BERT-PKD, 12 -> 6: Skip {2,4,6,8,10}, Last {7,8,9,10,11}
    assert list(pkd_map(12, 6, "skip").values()) == [2, 4, 6, 8, 10]
    assert list(pkd_map(12, 6, "last").values()) == [7, 8, 9, 10, 11]
    assert pkd_map(12, 3, "skip") == {1: 4, 2: 8}
    with pytest.raises(ConfigError, match="divisible"):
        pkd_map(12, 5, "skip")
    with pytest.raises(ConfigError):
        pkd_map(4, 6, "last")


def test_tinybert_g():
    assert tinybert_map(12, 4, "uniform") == {0: 0, 1: 3, 2: 6, 3: 9, 4: 12}
    assert tinybert_map(12, 4, "top") == {0: 0, 1: 9, 2: 10, 3: 11, 4: 12}
    assert tinybert_map(12, 4, "bottom") == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}
    assert tinybert_map(6, 4, "uniform") == {0: 0, 1: 2, 2: 3, 3: 5, 4: 6}  # 1.5, 3, 4.5, 6 rounded half up
    with pytest.raises(ConfigError, match="one of"):
        tinybert_map(12, 4, "middle")


def test_out_of_range_map_refused():
    with pytest.raises(ConfigError, match="teacher 7 out of range"):
        check_map({1: 7}, n_teacher=6, n_student=2)
    with pytest.raises(ConfigError, match="student 3"):
        check_map({3: 1}, n_teacher=6, n_student=2)
