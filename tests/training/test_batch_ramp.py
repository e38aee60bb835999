"""pretrain.batch_size_ramp (training/batch_ramp.py): the ramped sizes (hand-computed), the data position as a
pure function of the step (a fresh loader reads the same batch; every row once per epoch, across straddling
batches; ranks together read what one process reads), and a ramped run resumed from a checkpoint reproduces the
uninterrupted run's metrics exactly."""

import json

import numpy as np
import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from training.batch_ramp import BatchRampConfig, RampedBatches, ramp_sizes
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.pretrain import pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def test_ramp_sizes_by_hand():
    # start 4 -> 16 over 4 steps: 4 + 12 * i / 4 = 4, 7, 10, 13 -> multiples of 4: 4, 4, 8, 12 (then 16)
    assert ramp_sizes(4, 16, 4, 4).tolist() == [4, 4, 8, 12]
    # never below one multiple (world size x grad_accumulation)
    assert ramp_sizes(1, 16, 2, 8).tolist() == [8, 8]
    with pytest.raises(ConfigError, match="not a multiple of world size x grad_accumulation \\(3\\)"):
        ramp_sizes(4, 16, 4, 3)
    with pytest.raises(ValueError, match="start_batch_size \\(32\\) must be <= batch_size \\(16\\)"):
        PretrainConfig(batch_size=16, max_steps=10, warmup_steps=1,
                       batch_size_ramp=BatchRampConfig(start_batch_size=32, steps=4))


def _open(run, rank=0, world_size=1):
    base = PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 16, seed=3,
                                rank=rank, world_size=world_size)
    return RampedBatches.from_config(base, BatchRampConfig(start_batch_size=4, steps=6), grad_accumulation=1)


def test_every_row_once_per_epoch_and_ranks_together_read_one_process(shared_tiny_run):
    one = _open(shared_tiny_run)
    rows_per_epoch = one.rows  # 256 rows: the ramp's 4..14 batches and then 16s straddle the epoch boundary
    stream, step = [], 0
    while len(stream) < 2 * rows_per_epoch:
        assert len(one.rows_of(step)) == one.size_of(step)
        stream.extend(one.rows_of(step).tolist())
        step += 1
    assert sorted(stream[:rows_per_epoch]) == list(range(rows_per_epoch))  # epoch 0: each row once
    assert sorted(stream[rows_per_epoch:2 * rows_per_epoch]) == list(range(rows_per_epoch))  # epoch 1 too
    assert [one.size_of(s) for s in range(8)] == [4, 6, 8, 10, 12, 14, 16, 16]
    # a straddling batch: rows of epoch 0 with variant 0, then rows of epoch 1 with variant 1
    straddle = next(s for s in range(step) if one.offset_of(s) < rows_per_epoch < one.offset_of(s + 1))
    _, variants = one._rows_and_variants(straddle)
    assert set(variants.tolist()) == {0, 1}

    two = [_open(shared_tiny_run, rank, 2) for rank in (0, 1)]
    fresh = _open(shared_tiny_run)
    for s in (0, 3, straddle, straddle + 5):
        assert np.array_equal(np.concatenate([r.local_rows_of(s) for r in two]), one.rows_of(s))
        a, b = one.batch(s), fresh.batch(s)  # pure function of the step: another loader, same batch
        assert all(torch.equal(a[k], b[k]) for k in a)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_a_ramped_run_resumes_exactly(run_factory):
    cfg = PretrainConfig(batch_size=16, max_steps=12, warmup_steps=2, learning_rate=2e-3, log_every=1,
                         save_every=5, seed=5, batch_size_ramp=BatchRampConfig(start_batch_size=4, steps=8))
    whole, resumed = run_factory("whole"), run_factory("resumed")
    pretrain(TINY, cfg, whole)
    pretrain(TINY, cfg, resumed, stop_after=7)  # checkpoint at step 5, killed (stopped) at 7
    pretrain(TINY, cfg, resumed)  # resumes from step 5 inside the ramp
    def trajectory(run):  # everything but the wall-clock rates
        return [{k: v for k, v in m.items() if k not in ("tokens_per_s", "mfu")} for m in _metrics(run)]

    assert len(trajectory(whole)) == 12
    assert trajectory(whole) == trajectory(resumed)
    # the ramp is visible in the tokens: the first step trains 4 sequences, the last 16
    tokens = [m["tokens"] for m in _metrics(whole)]
    per_step = np.diff([0] + tokens)
    assert per_step[0] < per_step[-1] / 2, per_step
    assert "batch_size_ramp" not in PretrainConfig.RESUME_NEUTRAL
