"""The task-encoding cache: read back equal without re-encoding, rebuilt when data or settings change, refused
(naming both sha256s) for a checkpoint whose tokenizer differs from the one the cache was built with."""

import pytest

from bertfactory.errors import ContractError
from evaluation.cache import cache_key, features_equal, load_or_build
from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder
from evaluation.inputs import build_features
from tests.evaluation.test_finetune import rule_task


@pytest.mark.parametrize("task_type", ["tagging", "squad", "multiple-choice", "pair-classification", "regression"])
def test_round_trip_and_staleness(task_type, eval_run, tmp_path):
    text_encoder = TextEncoder.from_file(eval_run / "pretrain" / "final" / "tokenizer.json")
    data = rule_task(task_type, 120 if task_type != "multiple-choice" else 400)
    cfg = FinetuneConfig(max_seq_len=24, doc_stride=8)
    builds = []

    def build():
        builds.append(1)
        return {s: build_features(task_type, getattr(data, s), text_encoder, cfg) for s in ("train", "dev", "test")}

    key = cache_key(data.name, "abc", {"train": [e.id for e in data.train]}, {"max_seq_len": 24})
    first = load_or_build(tmp_path, data.name, text_encoder.sha256, key, build)
    second = load_or_build(tmp_path, data.name, text_encoder.sha256, key, build)
    assert len(builds) == 1
    assert all(features_equal(first[s], second[s]) for s in ("train", "dev", "test"))
    load_or_build(tmp_path, data.name, text_encoder.sha256, key + "x", build)  # other data/settings: rebuilt
    assert len(builds) == 2
    other = "f" * 64
    with pytest.raises(ContractError) as err:
        load_or_build(tmp_path, data.name, other, key, build)
    assert text_encoder.sha256 in str(err.value) and other in str(err.value) and str(tmp_path / data.name) in str(err.value)
