"""Batch-size ramp (`pretrain.batch_size_ramp`): the global batch grows linearly from `start_batch_size` to
`pretrain.batch_size` over the first `steps` optimiser steps (as GPT-3 and LAMB-style large-batch recipes do),
then stays at batch_size.

    ramp: {start_batch_size: 32, steps: 1000}     # under pretrain:

Step i < steps trains B(i) = start + (batch_size - start) * i / steps sequences, rounded down to a multiple of
world size x grad_accumulation (so every process and every micro-batch gets an equal slice; never below one such
multiple). The data position stays a pure function of the step: step s reads the samples
[offset(s), offset(s) + B(s)) of the endless stream permutation(seed, 0) ++ permutation(seed, 1) ++ ... (each
epoch a permutation of ALL rows, numpy's default_rng([seed, epoch]) as in training/data.py), with offset(s) the
sum of the sizes before s (a cumulative sum computed once; O(1) per step after it). A batch may straddle an
epoch boundary; each row carries the mask variant of its own epoch. So a resumed run reads exactly the batches of
the uninterrupted one, and every row is read once per epoch whatever the world size.
"""

from __future__ import annotations

import numpy as np
import torch

from bertfactory.errors import ConfigError

from .batch_ramp_config import BatchRampConfig
from .data import Position, PretrainBatches, collate, masked_at_read_time


def ramp_sizes(start: int, final: int, steps: int, multiple: int) -> np.ndarray:
    """B(0..steps-1): linear from `start` to `final` (exclusive: step `steps` trains `final`), each rounded down to
    a multiple of `multiple` and at least `multiple`."""
    if final % multiple:
        raise ConfigError(f"pretrain.batch_size={final} is not a multiple of world size x grad_accumulation "
                          f"({multiple}); make it one")
    if start > final:
        raise ConfigError(f"pretrain.batch_size_ramp.start_batch_size={start} is larger than pretrain.batch_size="
                          f"{final}; a ramp grows the batch")
    linear = start + (final - start) * np.arange(steps, dtype=np.int64) // steps
    return np.maximum(linear // multiple * multiple, multiple)


class RampedBatches(PretrainBatches):
    """PretrainBatches whose global batch of step s has `size_of(s)` sequences (see the module docstring)."""

    def __init__(self, base: PretrainBatches, sizes: np.ndarray):
        super().__init__(base.shards, base.batch_size, base.seed, base.pad_id, base.max_predictions, base.rank,
                         base.world_size)
        if len(sizes) and int(sizes.max()) > self.rows:
            raise ConfigError(f"a ramped batch of {int(sizes.max())} sequences is larger than the split "
                              f"({self.rows} instances)")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    @classmethod
    def from_config(cls, base: PretrainBatches, ramp: BatchRampConfig, grad_accumulation: int) -> "RampedBatches":
        multiple = base.world_size * grad_accumulation
        return cls(base, ramp_sizes(ramp.start_batch_size, base.batch_size, ramp.steps, multiple))

    def size_of(self, step: int) -> int:
        return int(self.sizes[step]) if step < len(self.sizes) else self.batch_size

    def offset_of(self, step: int) -> int:
        """Samples read by the steps before `step`."""
        ramp = len(self.sizes)
        return int(self.offsets[step]) if step <= ramp else int(self.offsets[-1]) + (step - ramp) * self.batch_size

    def position(self, step: int) -> Position:
        if step < 0:
            raise ValueError(f"step must be >= 0 (got {step})")
        epoch, within = divmod(self.offset_of(step), self.rows)
        return Position(step, epoch, within // self.size_of(step), epoch % self.variants if self.variants else 0)

    def _rows_and_variants(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        samples = self.offset_of(step) + np.arange(self.size_of(step), dtype=np.int64)
        epochs, within = np.divmod(samples, self.rows)
        rows = np.empty_like(samples)
        for epoch in np.unique(epochs):  # at most two: a batch is never larger than an epoch
            here = epochs == epoch
            rows[here] = self.permutation(int(epoch))[within[here]]
        return rows, epochs  # a row's mask variant is its epoch % K (dynamic masking: the epoch itself)

    def rows_of(self, step: int) -> np.ndarray:
        return self._rows_and_variants(step)[0]

    def local_rows_of(self, step: int) -> np.ndarray:
        return self._local(step)[0]

    def _local(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        rows, variants = self._rows_and_variants(step)
        share = len(rows) // self.world_size
        start = self.rank * share
        return rows[start:start + share], variants[start:start + share]

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows, epochs = self._local(step)
        if self.dynamic_masker is not None:
            instances = [masked_at_read_time(self.dynamic_masker, self.shards.instance(int(r), 0), int(e), int(r))
                         for r, e in zip(rows, epochs)]
        else:
            instances = [self.shards.instance(int(r), int(e) % self.variants) for r, e in zip(rows, epochs)]
        return collate(instances, self.pad_id, self.max_predictions)
