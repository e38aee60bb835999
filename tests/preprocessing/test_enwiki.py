"""The preprocessing stage on the real Wikipedia sample (206 pages: 106 articles + 100 redirects) with a tiny
config: exact, deterministic counts and shards that the training stage can open."""

import pytest

from bertfactory.samples import sample_path
from preprocessing.config import CorpusConfig, PreprocessConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import ShardSet


@pytest.mark.slow
def test_enwiki_sample_end_to_end(tmp_path):
    sample_path("enwiki")  # a clear SampleMissingError if the sample was not fetched
    corpus = CorpusConfig(inputs=["sample:enwiki"])
    cfg = PreprocessConfig.model_validate({
        "heldout_fraction": 0.05,
        "tokenizer": {"vocab_size": 8000},
        "instances": {"max_seq_len": 128, "dupe_factor": 1},
        "masking": {"variants": 4},
        "shards": {"train_shards": 2, "heldout_shards": 1},
    })
    manifest = run_preprocess(corpus, cfg, tmp_path / "run")
    counts = manifest["counts"]
    assert counts["docs_read"] == 206
    assert counts["docs_dropped"]["redirect"] + counts["docs_dropped"]["namespace"] == 100
    assert counts["quarantined"] == {}
    assert counts["docs_kept"] == 206 - sum(counts["docs_dropped"].values())
    assert 90 <= counts["docs_kept"] <= 106 and counts["docs"]["heldout"] >= 2
    assert counts["sentences"] > 10000
    assert manifest["tokenizer"]["vocab_size"] == 8000
    train = ShardSet.open(tmp_path / "run/shards", "train", tokenizer_sha256=manifest["tokenizer"]["sha256"])
    heldout = ShardSet.open(tmp_path / "run/shards", "heldout")
    assert len(train) == counts["instances"]["train"] > 3000 and len(heldout) == counts["instances"]["heldout"] > 0
    lengths = train.lengths()
    assert lengths.max() <= 128 and (lengths == 128).mean() > 0.5  # mostly full-length, some short (short_seq_prob)
    nsp = counts["nsp_random"]["train"] / counts["instances"]["train"]
    assert 0.4 < nsp < 0.6
