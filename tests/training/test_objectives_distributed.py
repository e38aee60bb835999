"""Every pretraining objective under data parallelism, launched as torchrun does (gloo processes on the CPU):
2 processes x B train exactly like 1 process x 2B (losses within rel 1e-5 step by step, the same final weights),
a DDP run stopped at its checkpoint and resumed continues the uninterrupted curve, and FSDP 2 x B trains like them.

What makes it hold for every member (training/trainer.py `_sync_trainable`, training/models/registry.py): a
model is built with only the heads its objective trains, the parameters the objective leaves without a gradient
(the pooler without a sentence loss, the idle half of two-stage ELECTRA) are frozen and outside the DDP wrapper,
objectives reach the model only through its forward, and an objective's own random draws (ELECTRA's
replacements, XLNet's orders) are seeded per sample (training/data.py row_seeds), not per rank.

Fixed-length rows and no dropout: every rank's slice then holds the same number of predictions, so the ranks'
mean losses, averaged by DDP, are the one process's mean (training/distributed.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from preprocessing.shards import read_manifest, write_manifest
from bertfactory.config import validate
from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

from .conftest import make_run
from .ranks import launch_ranks

pytestmark = pytest.mark.slow  # several 2-rank runs per objective

BASE = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
            hidden_dropout=0.0, attention_dropout=0.0)
CFG = PretrainConfig(batch_size=16, max_steps=6, warmup_steps=2, learning_rate=2e-3, log_every=1, save_every=3,
                     seed=11, num_threads=1, device="cpu")

# objective -> (model section, instance format of the shards)
CASES = {
    "mlm_nsp": ({}, "nsp-pairs"),
    "mlm": ({"type_vocab_size": 1}, "nsp-pairs"),
    "mlm_sop": ({"embedding_size": 16, "share_layers": "all"}, "sop-pairs"),
    "mlm_sbo": ({"spanbert": {"max_span_tokens": 8, "position_size": 8}}, "nsp-pairs"),
    "electra": ({"electra": {"generator_size": 0.5}}, "nsp-pairs"),
    "electra_two_stage": ({"electra": {"two_stage": True, "generator_size": 1.0, "generator_steps": 2}}, "nsp-pairs"),
    "plm": ({"xlnet": {"predict_fraction": 4}}, "nsp-pairs"),
    "txl_clm": ({"transformer_xl": {"mem_len": 8, "train_segments": 2}}, "nsp-pairs"),
    "xlm_mlm": ({"num_languages": 2, "xlm": {"language_id": 1}}, "nsp-pairs"),
    "clm": ({"num_languages": 2, "xlm": {"language_id": 1}}, "nsp-pairs"),
    "tlm": ({"num_languages": 2}, "tlm-pairs"),
    # ModernBERT: layer 0 global, layer 1 in a sliding window of 8 (the 32-token rows span it)
    "modernbert_mlm": ({"num_layers": 2, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
                        "modernbert": {"global_attn_every_n_layers": 2, "local_attention": 8}}, "nsp-pairs"),
    # progressive stacking (BERT): the model doubles after step 2; the trainer wraps the deeper model anew
    "mlm_nsp_stacking": ({"num_layers": 1}, "nsp-pairs"),
}


def _objective(case: str) -> str:
    return {"electra_two_stage": "electra", "mlm_nsp_stacking": "mlm_nsp"}.get(case, case)


def _run(root: Path, name: str, instance_format: str, case: str = "") -> Path:
    # Transformer-XL predicts no token across the A|B junction of a NotNext row, so such rows hold one prediction
    # less and the ranks' counts would differ (the usual data-parallel weighting, training/distributed.py): its
    # rows all continue (as its real clm shards do)
    run = make_run(root / name, min_seq_len=32, max_seq_len=32, not_next_prob=0.0 if case == "txl_clm" else 0.5)
    manifest = read_manifest(run / "shards")
    fmt = {**manifest.instance_format, "name": instance_format}
    if instance_format == "tlm-pairs":
        fmt["languages"] = ["en", "fr"]
    write_manifest(run / "shards", manifest.model_copy(update={"instance_format": fmt}))
    return run


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _same_curve(got: list[dict], want: list[dict]) -> None:
    assert [m["step"] for m in got] == [m["step"] for m in want] == list(range(1, CFG.max_steps + 1))
    losses = [k for k in want[0] if k == "loss" or k.endswith("_loss")]
    assert losses and set(losses) <= set(got[0]), (losses, got[0])
    for a, b in zip(want, got):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]  # the same samples, the same schedule
        for key in losses:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a["step"], a[key], b[key])


def _same_weights(a: Path, b: Path) -> None:
    first = load_file(str(a / "pretrain/final/model.safetensors"))
    second = load_file(str(b / "pretrain/final/model.safetensors"))
    assert first.keys() == second.keys()
    for key in first:
        assert torch.allclose(first[key], second[key], rtol=1e-4, atol=1e-5), key


@pytest.mark.parametrize("case", sorted(CASES))
def test_objective_trains_alike_on_two_processes_resumes_and_shards(case, tmp_path):
    model_section, instance_format = CASES[case]
    model = ModelConfig(**{**BASE, **model_section})
    cfg = CFG.model_copy(update={"objective": _objective(case)})
    if case == "mlm_nsp_stacking":
        cfg = validate(PretrainConfig, {**cfg.model_dump(), "stacking": {"stages": [2]}}, "pretrain")

    single = _run(tmp_path, "single", instance_format, case)
    pretrain(model, cfg, single)
    one = _metrics(single)
    # it trains (the comparison is not between two idle runs); two-stage ELECTRA's loss changes meaning at its
    # switch after step 2 (generator MLM, then disc_weight x RTD), so its discriminator stage is compared
    if case == "electra_two_stage":
        assert "disc_loss" not in one[1] and one[-1]["disc_loss"] < one[2]["disc_loss"], one
    else:
        assert one[-1]["loss"] < one[0]["loss"], one

    # DDP: stopped after the step-3 checkpoint, then resumed (as a rerun of the same torchrun command is)
    ddp = _run(tmp_path, "ddp", instance_format, case)
    launch_ranks(model, cfg, ddp, stop_after=3)
    summaries = launch_ranks(model, cfg, ddp)
    assert [s["world_size"] for s in summaries] == [2, 2] and summaries[0]["resumed_from_step"] == 3
    _same_curve(_metrics(ddp), one)
    _same_weights(ddp, single)

    if case == "mlm_nsp_stacking":  # a stacked model would need sharding anew: refused when the recipe loads
        with pytest.raises(ConfigError, match="fsdp is not implemented with .*stacking"):
            validate(PretrainConfig, {**cfg.model_dump(), "parallelism": "fsdp"}, "pretrain")
        return
    if case == "electra_two_stage":  # refused before anything is built (training/pretrain.py says why)
        with pytest.raises(ConfigError, match="two_stage is not supported with pretrain.parallelism fsdp"):
            pretrain(model, cfg.model_copy(update={"parallelism": "fsdp"}), _run(tmp_path, "fsdp", instance_format))
        return
    fsdp = _run(tmp_path, "fsdp", instance_format, case)
    launch_ranks(model, cfg.model_copy(update={"parallelism": "fsdp"}), fsdp)
    _same_curve(_metrics(fsdp), one)
    _same_weights(fsdp, single)


def test_a_model_holds_only_the_heads_its_objective_trains(tmp_path):
    """RoBERTa's checkpoint has no NSP head; BERT's and ALBERT's have one; the pooler is kept for fine-tuning."""
    for objective, has_head in (("mlm", False), ("mlm_nsp", True)):
        run = _run(tmp_path, objective, "nsp-pairs")
        pretrain(ModelConfig(**BASE), CFG.model_copy(update={"objective": objective, "max_steps": 2}), run)
        names = load_file(str(run / "pretrain/final/model.safetensors")).keys()
        assert any(n.startswith("nsp_head.") for n in names) == has_head, objective
        assert any(n.startswith("bert.pooler.") for n in names)
        config = json.loads((run / "pretrain/final/config.json").read_text())
        assert config["model"]["sentence_head"] is has_head
