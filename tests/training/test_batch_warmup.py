"""ModernBERT's batch-size warmup (pretrain.batch_size_ramp, training/batch_ramp.py) on the modern member itself:
each step of the ramp trains exactly the ramped number of sequences (tokens counted in metrics.jsonl, fixed-length
rows), the same seed gives the same loss curve, a run resumed inside the ramp under grad_accumulation continues the
uninterrupted curve, and 2 gloo processes with the ramp train like 1 process (each rank its half of every ramped
batch), stopped and resumed inside the ramp. The loader-level checks (sizes by hand, rows once per epoch, ranks
together = one process) are tests/training/test_batch_ramp.py's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from training.batch_ramp import BatchRampConfig, ramp_sizes
from training.config import ModelConfig
from training.models.modernbert.model import ModernBertSettings
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig

from .ranks import launch_ranks

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROW = 32  # every synthetic row is 32 tokens long, so a step's tokens are its sequences x 32
MODERN = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48, max_position_embeddings=32,
                     type_vocab_size=1, hidden_dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5,
                     modernbert=ModernBertSettings(global_attn_every_n_layers=2, local_attention=8))
RAMP = BatchRampConfig(start_batch_size=4, steps=6)
CFG = PretrainConfig(objective="modernbert_mlm", batch_size=16, batch_size_ramp=RAMP, max_steps=9, warmup_steps=2,
                     learning_rate=2e-3, schedule="wsd", wsd_decay_fraction=0.3, log_every=1, save_every=3, seed=11,
                     num_threads=1, device="cpu")


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _trajectory(run: Path) -> list[dict]:
    """Everything but the wall-clock rates."""
    return [{k: v for k, v in m.items() if k not in ("tokens_per_s", "mfu")} for m in _metrics(run)]


def _per_step_sequences(run: Path) -> list[int]:
    tokens = np.diff([0] + [m["tokens"] for m in _metrics(run)])
    assert all(t % ROW == 0 for t in tokens), tokens
    return (tokens // ROW).tolist()


def _fixed_length_run(run_factory, name: str) -> Path:
    return run_factory(name, min_seq_len=ROW, max_seq_len=ROW)


def test_the_ramp_sizes_modernbert_base_trains():
    """The full recipe's warmup (768 -> 4,608 over 10,000 steps, 8 processes x 24 micro-batches = multiples of
    192): 768 at step 0, linear and never shrinking, every size splittable over ranks and micro-batches."""
    sizes = ramp_sizes(768, 4608, 10_000, 8 * 24)
    assert sizes[0] == 768 and sizes[-1] == 4608 - 192  # step 10,000 trains the full 4,608
    assert np.all(np.diff(sizes) >= 0) and np.all(sizes % 192 == 0)
    # a size is the linear value rounded down to the multiple: within one multiple below the line
    line = 768 + (4608 - 768) * np.arange(10_000) / 10_000
    assert np.all((line - sizes >= 0) & (line - sizes < 192))


def test_modernbert_ramp_trains_the_ramped_sizes_deterministically_and_resumes(run_factory):
    cfg = CFG.model_copy(update={"grad_accumulation": 2, "unpad": True})
    whole, again, resumed = (_fixed_length_run(run_factory, n) for n in ("whole", "again", "resumed"))
    pretrain(MODERN, cfg, whole)
    # step i < 6 trains 4 + 12 i / 6 sequences rounded down to a multiple of 2 (grad_accumulation): 4, 6, ..., 14
    assert _per_step_sequences(whole) == [4, 6, 8, 10, 12, 14, 16, 16, 16]
    first = _metrics(whole)
    assert first[-1]["mlm_loss"] < first[0]["mlm_loss"], first  # it trained

    pretrain(MODERN, cfg, again)  # the same seed: the same curve, value for value
    assert _trajectory(again) == _trajectory(whole)

    pretrain(MODERN, cfg, resumed, stop_after=4)  # checkpoint at step 3 (batch 10 next), stopped at 4
    pretrain(MODERN, cfg, resumed)
    assert _trajectory(resumed) == _trajectory(whole)


@pytest.mark.slow  # 4 two-process runs
def test_two_gloo_processes_with_the_ramp_train_like_one_and_resume_inside_it(run_factory):
    single, ddp = _fixed_length_run(run_factory, "single"), _fixed_length_run(run_factory, "ddp")
    pretrain(MODERN, CFG, single)
    # every ramped size is a multiple of the world size: each rank trains half of it
    assert _per_step_sequences(single) == [4, 6, 8, 10, 12, 14, 16, 16, 16]

    launch_ranks(MODERN, CFG, ddp, stop_after=4)  # stopped after the step-3 checkpoint, inside the ramp
    summaries = launch_ranks(MODERN, CFG, ddp)
    assert [s["world_size"] for s in summaries] == [2, 2] and summaries[0]["resumed_from_step"] == 3
    one, two = _metrics(single), _metrics(ddp)
    assert [m["step"] for m in two] == list(range(1, CFG.max_steps + 1))
    for a, b in zip(one, two):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]  # the same samples, the same schedule
        for key in ("loss", "mlm_loss"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)
    final_one = load_file(str(single / "pretrain/final/model.safetensors"))
    final_two = load_file(str(ddp / "pretrain/final/model.safetensors"))
    assert final_one.keys() == final_two.keys()
    assert all(torch.allclose(final_one[k], final_two[k], rtol=1e-4, atol=1e-5) for k in final_one)
