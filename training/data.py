"""Pretraining batches from the shard set: `collate` (instances -> padded tensors with the masks applied) and
`PretrainBatches`, a loader that can produce the batch of ANY global step without replaying the data.

Step s of training reads epoch e = s // steps_per_epoch, batch b = s % steps_per_epoch of that epoch: rows
permutation(seed, e)[b*B : (b+1)*B] with mask variant e % K (K = the manifest's mask variants). The permutation
is numpy's `default_rng([seed, e])`, so the order depends only on (seed, epoch), never on how many steps ran
before; an incomplete last batch of an epoch is dropped so that every step has the same batch size.

Data parallelism: `batch_size` is the GLOBAL batch. With `world_size` processes, rank r collates only its slice
rows[r*B/W : (r+1)*B/W] of the global batch of the step, so W processes together read exactly the rows one process
reads with the whole batch, each row once per epoch, whatever W is (W must divide the batch size).

    batches = PretrainBatches.open(run_dir / "shards", tokenizer_sha256, batch_size=32, seed=1234)
    batch = batches.batch(step)      # dict of tensors, see collate()
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from bertfactory.errors import ConfigError, ContractError
from preprocessing.hashing import mix64
from preprocessing.shards import Instance, ShardSet

from .models.bert.model import IGNORE_INDEX  # re-exported: evaluation imports it from here


def collate(instances: Sequence[Instance], pad_id: int, max_predictions: int,
            width: int | None = None) -> dict[str, torch.Tensor]:
    """Pad a list of instances to the longest in the list and apply their masks.

    Returns int64 tensors: input_ids [B, T] (mask_tokens written at mask_positions, pad_id after the end),
    token_type_ids [B, T] (0 for the first len_a positions, 1 for the rest of the real tokens, 0 on padding),
    attention_mask [B, T] (1 real / 0 pad), masked_positions [B, max_predictions] (0-padded), masked_labels
    [B, max_predictions] (the original ids at the positions, -100 on padding), nsp_labels [B]; when every
    instance carries its masked spans (shard column mask_spans, policy span) also span_left / span_right
    [B, max_predictions]: the positions just before and just after the span of each slot (0 on padding)."""
    if not instances:
        raise ValueError("collate needs at least one instance")
    batch = len(instances)
    longest = max(len(inst.input_ids) for inst in instances)
    if width is not None and width < longest:
        raise ValueError(f"collate width {width} is shorter than the longest instance ({longest} tokens)")
    width = width or longest
    input_ids = np.full((batch, width), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((batch, width), dtype=np.int64)
    attention_mask = np.zeros((batch, width), dtype=np.int64)
    masked_positions = np.zeros((batch, max_predictions), dtype=np.int64)
    masked_labels = np.full((batch, max_predictions), IGNORE_INDEX, dtype=np.int64)
    nsp_labels = np.zeros(batch, dtype=np.int64)
    for i, inst in enumerate(instances):
        ids = np.asarray(inst.input_ids, dtype=np.int64)  # a copy: the shard buffers are read-only
        length = len(ids)
        positions = np.asarray(inst.mask_positions, dtype=np.int64)
        n = len(positions)
        if n > max_predictions:
            raise ContractError(f"instance of document {inst.doc_id} has {n} masked positions, more than "
                                f"max_predictions={max_predictions}")
        if n and (positions.min() < 0 or positions.max() >= length):
            raise ContractError(f"instance of document {inst.doc_id}: mask position outside its {length} tokens")
        if not 0 < inst.len_a <= length:
            raise ContractError(f"instance of document {inst.doc_id}: len_a={inst.len_a} with {length} tokens")
        masked_positions[i, :n] = positions
        masked_labels[i, :n] = ids[positions]
        ids[positions] = np.asarray(inst.mask_tokens, dtype=np.int64)
        input_ids[i, :length] = ids
        token_type_ids[i, inst.len_a:length] = 1
        attention_mask[i, :length] = 1
        nsp_labels[i] = inst.nsp_label
    return {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "masked_positions": torch.from_numpy(masked_positions),
        "masked_labels": torch.from_numpy(masked_labels),
        "nsp_labels": torch.from_numpy(nsp_labels),
        # SpanBERT's SBO reads the stored span bounds; absent for shards without them
        **(span_bounds(instances, masked_positions) if all(i.mask_spans is not None for i in instances) else {}),
    }


def span_bounds(instances: Sequence[Instance], masked_positions: np.ndarray) -> dict[str, torch.Tensor]:
    """span_left / span_right [B, P] from each instance's stored span lengths (mask_spans): span j covers the next
    mask_spans[j] slots, so its slots get (first position - 1, last position + 1)."""
    left = np.zeros_like(masked_positions)
    right = np.zeros_like(masked_positions)
    for i, inst in enumerate(instances):
        lengths = np.asarray(inst.mask_spans, dtype=np.int64)
        n = len(inst.mask_positions)
        if lengths.sum() != n or (len(lengths) and lengths.min() < 1):
            raise ContractError(f"instance of document {inst.doc_id}: mask_spans {lengths.tolist()} do not cover its "
                                f"{n} masked positions")
        ends = np.cumsum(lengths)
        left[i, :n] = np.repeat(masked_positions[i, ends - lengths] - 1, lengths)
        right[i, :n] = np.repeat(masked_positions[i, ends - 1] + 1, lengths)
    return {"span_left": torch.from_numpy(left), "span_right": torch.from_numpy(right)}


def language_inputs(instances: Sequence[Instance], width: int, language_map: np.ndarray | None = None) -> torch.Tensor:
    """language_ids [B, T]: every token its segment's language (lang_a over the first len_a tokens, lang_b after:
    ids into the manifest's instance_format.languages, or `language_map[id]` when given: the model's rows, XLM's
    model.xlm.languages), 0 on padding. A monolingual row has lang_a == lang_b: its language at every token."""
    languages = np.zeros((len(instances), width), dtype=np.int64)
    for i, inst in enumerate(instances):
        lang_a, lang_b = (inst.lang_a, inst.lang_b) if language_map is None else \
            (language_map[inst.lang_a], language_map[inst.lang_b])
        languages[i, :inst.len_a] = lang_a
        languages[i, inst.len_a:len(inst.input_ids)] = lang_b
    return torch.from_numpy(languages)


def translation_inputs(instances: Sequence[Instance], width: int,
                       language_map: np.ndarray | None = None) -> dict[str, torch.Tensor]:
    """position_ids and language_ids [B, T] of tlm-pairs rows (XLM TLM): positions 0.. over [CLS] source [SEP],
    restarting at 1 for the target (t_j at the position of s_j), every token its side's language (language_inputs),
    0 on padding."""
    positions = np.zeros((len(instances), width), dtype=np.int64)
    for i, inst in enumerate(instances):
        length, len_a = len(inst.input_ids), inst.len_a
        positions[i, :len_a] = np.arange(len_a)
        positions[i, len_a:length] = np.arange(1, length - len_a + 1)
    return {"position_ids": torch.from_numpy(positions),
            "language_ids": language_inputs(instances, width, language_map)}


def row_seeds(seed: int, epoch: int, rows: np.ndarray) -> torch.Tensor:
    """A 63-bit seed per row of a batch, from (seed, epoch, row index): what an objective's own random draws
    (ELECTRA's replacements, XLNet's factorisation orders) are seeded with, so that they depend on the sample and
    the epoch, never on which rank trains it or where in the batch it sits (W processes x B train as 1 x W*B)."""
    with np.errstate(over="ignore"):
        base = mix64(np.asarray([seed ^ (epoch << 32)], dtype=np.uint64))
        keys = mix64(base ^ mix64(np.asarray(rows, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)))
    return torch.from_numpy((keys >> np.uint64(1)).astype(np.int64))


def dynamic_masker(shards: ShardSet):
    """The masking core set up as the shards' manifest says (policy, probabilities, seed) for their tokenizer:
    what preprocessing would have used to store masks."""
    from tokenizers import Tokenizer

    from preprocessing.config import MaskingConfig
    from preprocessing.masking import Masker

    manifest = shards.manifest
    cfg = MaskingConfig(**{k: v for k, v in manifest.masking.items() if k in MaskingConfig.model_fields})
    path = (shards.directory / manifest.tokenizer.path).resolve()
    return Masker.from_tokenizer(cfg, manifest.seed, Tokenizer.from_file(str(path)), str(path))


def masked_at_read_time(masker, inst: Instance, epoch: int, row: int, spans: bool = False) -> Instance:
    """Dynamic masking (RoBERTa): row `row` of the split masked for `epoch`, deterministically in (seed, epoch,
    row) - the same masks whichever rank, worker or resume reads it, different ones every epoch. `spans`: also
    the masked spans' lengths (mask_spans, as span shards store them)."""
    import dataclasses

    from preprocessing.masking import mask_at_read_time, spans_at_read_time

    if spans:
        positions, tokens, lengths = spans_at_read_time(masker, inst.input_ids.tolist(), epoch, row)
        return dataclasses.replace(inst, mask_positions=np.asarray(positions, np.int64),
                                   mask_tokens=np.asarray(tokens, np.int64), mask_spans=np.asarray(lengths, np.int64))
    positions, tokens = mask_at_read_time(masker, inst.input_ids.tolist(), epoch, row)
    return dataclasses.replace(inst, mask_positions=np.asarray(positions, np.int64), mask_tokens=np.asarray(tokens, np.int64))


@dataclass(frozen=True)
class Position:
    """Where global step `step` reads: `epoch`, the batch index within it, and the mask variant."""

    step: int
    epoch: int
    batch_in_epoch: int
    variant: int


class PretrainBatches:
    """Deterministic, resumable batches over one split (see the module docstring for the order)."""

    def __init__(self, shards: ShardSet, batch_size: int, seed: int, pad_id: int, max_predictions: int | None = None,
                 rank: int = 0, world_size: int = 1, length_buckets: Sequence[int] | None = None,
                 bucket_window: int = 64):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1 (got {batch_size})")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"rank {rank} is not in [0, world_size={world_size})")
        if batch_size % world_size:
            lower, higher = batch_size - batch_size % world_size, batch_size + world_size - batch_size % world_size
            raise ConfigError(
                f"pretrain.batch_size={batch_size} (the global batch) is not divisible by the world size {world_size} "
                f"(torchrun processes): every process must take an equal slice. Set pretrain.batch_size to a multiple "
                f"of {world_size} (e.g. {lower or higher} or {higher}), or launch a number of processes that divides "
                f"{batch_size}"
            )
        if len(shards) < batch_size:
            raise ConfigError(
                f"the '{shards.split}' split of {shards.directory} has {len(shards)} instances, fewer than one batch "
                f"(pretrain.batch_size={batch_size}); lower the batch size or preprocess more text"
            )
        self.shards = shards
        self.batch_size = batch_size
        self.seed = seed
        self.pad_id = pad_id
        self.rank = rank
        self.world_size = world_size
        self.local_batch_size = batch_size // world_size
        self.max_predictions = max_predictions if max_predictions is not None else shards.max_predictions()
        self.rows = len(shards)
        self.steps_per_epoch = self.rows // batch_size
        self.variants = shards.k
        self._perm_epoch: int | None = None
        self._perm: np.ndarray | None = None
        self.length_buckets = list(length_buckets) if length_buckets else None
        self.bucket_window = bucket_window
        self._window_key: tuple[int, int] | None = None
        self._window: tuple[np.ndarray, np.ndarray] | None = None
        self.dynamic_masker = dynamic_masker(shards) if shards.k == 0 else None
        # per-token language ids (XLM): tlm-pairs rows always; rows of a multilingual shard set (schema v2, two or
        # more instance_format.languages) too, each row its own language. `language_map` (manifest id -> model
        # row) is set by training/xlm_data.py from model.xlm.languages; None = the manifest's ids as they are
        fmt = shards.manifest.instance_format
        self.translation = fmt.get("name") == "tlm-pairs"
        self.row_languages = self.translation or len(fmt.get("languages") or ()) > 1
        self.language_map: np.ndarray | None = None
        if self.length_buckets:
            lengths = shards.lengths()
            if self.length_buckets != sorted(set(self.length_buckets)) or self.length_buckets[0] < 1:
                raise ConfigError(f"pretrain.length_buckets {self.length_buckets} must be distinct positive lengths "
                                  "in ascending order")
            if lengths.max() > self.length_buckets[-1]:
                raise ConfigError(f"the '{shards.split}' split of {shards.directory} has instances of {int(lengths.max())} "
                                  f"tokens, longer than the largest of pretrain.length_buckets {self.length_buckets}; "
                                  f"add a bucket of at least {int(lengths.max())} (the shards' instance_format.max_seq_len)")
            self._bucket_of_row = np.searchsorted(np.asarray(self.length_buckets), lengths)

    @classmethod
    def open(cls, shard_dir: Path, tokenizer_sha256: str, batch_size: int, seed: int, split: str = "train",
             verify: bool = True, rank: int = 0, world_size: int = 1, length_buckets: Sequence[int] | None = None,
             bucket_window: int = 64) -> "PretrainBatches":
        """Open `split` of the shard set, refusing shards built with another tokenizer (ContractError).
        `rank` / `world_size`: this process's slice of every global batch (see the module docstring)."""
        shards = ShardSet.open(shard_dir, split, tokenizer_sha256=tokenizer_sha256, verify=verify)
        pad_id = shards.manifest.tokenizer.special_ids.get("pad")
        if pad_id is None:
            raise ContractError(f"{shard_dir}/manifest.json: tokenizer.special_ids has no 'pad'")
        return cls(shards, batch_size, seed, pad_id, rank=rank, world_size=world_size, length_buckets=length_buckets,
                   bucket_window=bucket_window)

    def position(self, step: int) -> Position:
        if step < 0:
            raise ValueError(f"step must be >= 0 (got {step})")
        epoch, batch_in_epoch = divmod(step, self.steps_per_epoch)
        return Position(step, epoch, batch_in_epoch, epoch % self.variants if self.variants else 0)

    def permutation(self, epoch: int) -> np.ndarray:
        if self._perm_epoch != epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.rows)
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def rows_of(self, step: int) -> np.ndarray:
        pos = self.position(step)
        if self.length_buckets:
            return self._bucketed_rows(pos)
        start = pos.batch_in_epoch * self.batch_size
        return self.permutation(pos.epoch)[start : start + self.batch_size]

    def _bucketed_rows(self, pos: Position) -> np.ndarray:
        """Length bucketing (static shapes on TPU with little padding): the epoch's permutation is cut into windows
        of `bucket_window` batches; a window's rows are sorted by length bucket (stably, so ties keep the random
        order) and cut into batches, which are then taken in an order drawn from (seed, epoch, window). Every row
        is still read once per epoch, the order depends only on (seed, epoch), and step s's batch is found
        without replaying the steps before it."""
        window = pos.batch_in_epoch // self.bucket_window
        first = window * self.bucket_window
        if self._window_key != (pos.epoch, window):
            n = min(self.bucket_window, self.steps_per_epoch - first)
            rows = self.permutation(pos.epoch)[first * self.batch_size : (first + n) * self.batch_size]
            ordered = rows[np.argsort(self._bucket_of_row[rows], kind="stable")]
            order = np.random.default_rng([self.seed, pos.epoch, window, 1]).permutation(n)
            self._window_key, self._window = (pos.epoch, window), (ordered, order)
        ordered, order = self._window
        k = int(order[pos.batch_in_epoch - first])
        return ordered[k * self.batch_size : (k + 1) * self.batch_size]

    def width_of(self, step: int) -> int | None:
        """The padded width of step `step`'s batch: the smallest length bucket that holds its longest row (the same
        on every rank), or None (pad to the longest row) without buckets."""
        if not self.length_buckets:
            return None
        return self.length_buckets[int(self._bucket_of_row[self.rows_of(step)].max())]

    def local_rows_of(self, step: int) -> np.ndarray:
        """This rank's slice of the global batch `rows_of(step)`."""
        start = self.rank * self.local_batch_size
        return self.rows_of(step)[start : start + self.local_batch_size]

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """This rank's part of the batch of global step `step` (the whole batch when world_size is 1)."""
        pos = self.position(step)
        rows = self.local_rows_of(step)
        instances = [self.shards.instance(int(r), pos.variant) for r in rows]
        if self.dynamic_masker is not None:
            instances = [masked_at_read_time(self.dynamic_masker, inst, pos.epoch, int(r), self.shards.span_bounds)
                         for inst, r in zip(instances, rows)]
        batch = collate(instances, self.pad_id, self.max_predictions, self.width_of(step))
        batch["row_seeds"] = row_seeds(self.seed, pos.epoch, rows)
        if self.translation:
            batch.update(translation_inputs(instances, batch["input_ids"].shape[1], self.language_map))
        elif self.row_languages:
            batch["language_ids"] = language_inputs(instances, batch["input_ids"].shape[1], self.language_map)
        return batch

    def iter_from(self, step: int) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            yield self.batch(step)
            step += 1
