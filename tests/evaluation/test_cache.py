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


def test_the_same_file_read_with_other_columns_or_labels_is_encoded_again(tmp_path):
    """Was: the key held the file's sha256 and the example ids only, so a second `evaluate --task-file t.tsv` with
    another --label-column (or --text-column, or --label-names in another order) read the first call's encodings:
    the `topic` task trained and scored on the `sentiment` label ids, without a word."""
    from evaluation.run import _features
    from evaluation.tasks.registry import load_task_file
    from tests.evaluation.conftest import movie_sentences, write_wordpiece_tokenizer

    rows = [f"r{i}\tfilm {i} is {'good' if i % 2 else 'bad'} on {'war' if i % 3 else 'love'}\t"
            f"{'pos' if i % 2 else 'neg'}\t{'war' if i % 3 else 'love'}\t{'calm' if i % 5 else 'loud'} night {i}"
            for i in range(100)]
    (tmp_path / "t.tsv").write_text("id\ttext\tsentiment\ttopic\tother\n" + "\n".join(rows) + "\n")
    encoder = TextEncoder.from_file(write_wordpiece_tokenizer(tmp_path / "tok.json", movie_sentences(300), 300))
    cfg, cache = FinetuneConfig(max_seq_len=24), tmp_path / "cache"
    for settings in ({"label_column": "sentiment"}, {"label_column": "topic"},
                     {"label_column": "sentiment", "label_names": ["pos", "neg"]},
                     {"label_column": "sentiment", "text_column": "other"}):
        data = load_task_file(tmp_path / "t.tsv", "classification", name="t", **settings)
        cached = _features("t", data, encoder, cfg, cache, True)
        fresh = {s: build_features("classification", getattr(data, s), encoder, cfg) for s in ("train", "dev", "test")}
        assert all(features_equal(cached[s], fresh[s]) for s in ("train", "dev", "test")), settings
