"""Every member of the family learns from real text: a few hundred CPU steps on shards the real pipeline builds from
the Wikipedia sample (nsp-pairs with token masks, and sop-pairs with n-gram masks for ALBERT) lower the training
loss clearly, through the one pretraining stage. The synthetic-corpus tests of each member check the mechanics;
this checks that the real data path feeds every objective."""

import json

import pytest

from preprocessing.config import CorpusConfig, PreprocessConfig
from preprocessing.pipeline import run_preprocess
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

SMALL = dict(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=64)
# objective -> (instance format, masking policy, model overrides)
MEMBERS = {
    "mlm_nsp": ("nsp-pairs", "token", {}),
    "mlm": ("nsp-pairs", "token", {"type_vocab_size": 1}),
    "mlm_sop": ("sop-pairs", "ngram", {"embedding_size": 32, "share_layers": "all"}),
    "mlm_sbo": ("nsp-pairs", "token", {}),
    "electra": ("nsp-pairs", "token", {"embedding_size": 32, "electra": {"generator_size": 0.5, "disc_weight": 10}}),
    "plm": ("nsp-pairs", "token", {"max_position_embeddings": 512}),
    "txl_clm": ("nsp-pairs", "token", {"max_position_embeddings": 512, "transformer_xl": {"mem_len": 32}}),
    "clm": ("nsp-pairs", "token", {"num_languages": 1}),
    "xlm_mlm": ("nsp-pairs", "token", {"num_languages": 1}),
}


def _shards(root, fmt, policy):
    run = root / f"{fmt}-{policy}"
    cfg = PreprocessConfig.model_validate({
        "heldout_fraction": 0.05, "tokenizer": {"vocab_size": 2000},
        "instances": {"format": fmt, "max_seq_len": 64, "dupe_factor": 1},
        "masking": {"policy": policy, "variants": 1, "max_predictions_per_seq": 10},
        "shards": {"train_shards": 1, "heldout_shards": 1},
    })
    run_preprocess(CorpusConfig(inputs=["sample:enwiki"]), cfg, run)
    return run


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    return {key: _shards(root, *key) for key in {(fmt, policy) for fmt, policy, _ in MEMBERS.values()}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
@pytest.mark.parametrize("objective", list(MEMBERS))
def test_every_member_learns_from_the_wikipedia_sample(real_runs, tmp_path, objective):
    import shutil

    fmt, policy, overrides = MEMBERS[objective]
    run = tmp_path / "run"
    shutil.copytree(real_runs[(fmt, policy)], run, ignore=shutil.ignore_patterns("pretrain"))
    model_cfg = ModelConfig(**{**SMALL, **overrides})
    cfg = PretrainConfig(objective=objective, batch_size=16, max_steps=200, learning_rate=2e-3, warmup_steps=20,
                         log_every=25, save_every=1000, seed=7)
    summary = pretrain(model_cfg, cfg, run)
    lines = [json.loads(x) for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    first, last = lines[0]["loss"], lines[-1]["loss"]
    assert summary["status"] == "trained" and len(lines) == 8
    # measured (200 steps, batch 16, 2,000-token vocabulary): every member's loss drops 0.8-2.5 nats, most of it
    # in the first 100 steps (a 2-layer model on ~100 articles then learns slowly — see the README's budget table)
    assert first - last > 0.6, (objective, [round(x["loss"], 3) for x in lines])
