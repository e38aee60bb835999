"""The ModernBERT member on XLA's CPU backend (PJRT_DEVICE=CPU) through the static-shape path: the sliding-window
attention of the local layers is a [B, 1, T, T] mask over the static width (varlen.sliding_window_band, the padded
path's own mask; no varlen kernel on XLA), the rotary angles follow the static columns. A tiny ModernBERT
(global, local, global: window 4 on each side of 12..32-token rows, so the band binds) pretrains with masked LM
(objective modernbert_mlm), its loss falls, XLA compiles in the first slice only - the later slices, resumed from
checkpoints, over batches of other real lengths, compile nothing - and the CPU takes the same steps.

Runs in the torch-xla environment only (see conftest.py): `make test-xla`, or this file alone:
    PYTHONPATH=. PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest -q tests/training/xla/test_xla_modernbert.py"""

import json

import pytest

from training.config import ModelConfig
from training.models.modernbert.model import ModernBertSettings
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig
from training.tracking import TrackingConfig

# dropout off: XLA's and the CPU's random streams differ; without them the two devices compute the same steps
TINY_MODERN = ModelConfig(hidden_size=32, num_layers=3, num_heads=2, intermediate_size=48, max_position_embeddings=32,
                          type_vocab_size=1, hidden_dropout=0.0, attention_dropout=0.0,
                          modernbert=ModernBertSettings(local_attention=8, global_attn_every_n_layers=2))
XLA = PretrainConfig(device="xla", objective="modernbert_mlm", static_shapes=True, batch_size=16, max_steps=30,
                     warmup_steps=2, learning_rate=1e-2, log_every=3, save_every=10, seed=3, bf16=False,
                     # metrics.jsonl only: .venv-xla (scripts/xla_env.sh) has no tensorboard package
                     tracking=TrackingConfig(tensorboard=False))


def _losses(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_tiny_modernbert_on_xla_learns_with_local_attention_as_a_mask_and_stops_compiling(run_factory):
    from training.xla import compile_count

    run = run_factory("xla", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    compiles = []
    for stop in (10, 20, 30):  # three slices of 10 steps, each resumed from the last one's checkpoint
        summary = pretrain(TINY_MODERN, XLA, run, stop_after=stop)
        compiles.append(compile_count())
    assert summary["status"] == "trained" and summary["device"].startswith("xla")
    records = _losses(run)
    assert [r["step"] for r in records] == list(range(3, 31, 3))
    assert records[-1]["loss"] < records[0]["loss"] - 0.3, [r["loss"] for r in records]
    assert all(r["skipped_steps"] == 0 for r in records)
    assert compiles[0] > 0 and compiles[1] == compiles[2], compiles
    print("modernbert xla compile counts after steps 10/20/30:", compiles)

    cpu_run = run_factory("cpu", max_seq_len=32, min_seq_len=12, train_rows=128, heldout_rows=8)
    pretrain(TINY_MODERN, XLA.model_copy(update={"device": "cpu"}), cpu_run)
    assert [r["loss"] for r in _losses(cpu_run)] == pytest.approx([r["loss"] for r in records], abs=2e-3)
