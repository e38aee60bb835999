"""The stream loader (`pretrain.stream_batches: true`): batches of `clm` shards laid out as B parallel text streams,
so that row r of batch s+1 continues row r of batch s, as the data iterators of Transformer-XL (Dai et al. 2019,
LMOrderedIterator) and XLNet (Yang et al. 2019, `batchify`) do. A recurrent objective (txl_clm, plm with mem_len
> 0) then carries its memory from batch to batch (training/models/core/stream_memory.py).

Epoch e: the documents of the split, each as its `clm` segments in order (segment_index 0, 1, ...), are
concatenated in an order drawn from (seed, e) into one stream of all N rows; the stream is cut into B equal
contiguous parts (L = N // B rows each, the last N - B*L rows are left out of the epoch) and slot r of step
e*L + k reads row k of part r. So slot r reads a document's segments in order on consecutive steps, then the next
document's; a document cut by a part boundary goes on at the start of the next part, whose slot begins there with
an empty memory (as in the paper's iterator, where every stream but the first starts mid-text).

Every batch carries, besides collate()'s tensors (padded to the shards' max_seq_len, so every step and every
process has the same shapes):
  stream_slots      [b] this process's slot numbers of the rows (0..B/W-1): where the model keeps their memory;
  stream_continues  [b] 1 where the row is the next segment of the document the slot's previous row came from
                    (carry the memory), 0 where the slot's stream starts a document or restarts (reset it);
  stream_next       [b] the first token of the document's next segment (the target of the row's last token), or
                    -100 after a document's last segment;
  row_seeds         [b] per-row seeds (training/data.py), e.g. XLNet's factorisation orders.

Like PretrainBatches, step s's batch is computed from (seed, s) alone (no replay), so a run resumes at any step;
the carried memory itself is training state that checkpoints save (training/trainer.py). Data parallelism: rank
r of W owns slots [r*B/W, (r+1)*B/W) of every step, so W processes x B/W slots read exactly what one process
with B slots reads, and each keeps the memory of its own slots.

    batches = StreamBatches.open(run_dir / "shards", tokenizer_sha256, batch_size=8, seed=1234)
    batch = batches.batch(step)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertfactory.errors import ConfigError, ContractError
from preprocessing.shards import ShardSet

from .data import IGNORE_INDEX, PretrainBatches
from .stream_config import STREAM_OBJECTIVES

STREAM_FORMAT = "clm"


class StreamBatches(PretrainBatches):
    """PretrainBatches whose epoch order is B document-continuous streams (see the module docstring)."""

    carries_memory = True  # the trainer saves the model's per-slot memory with the training state

    def __init__(self, shards: ShardSet, batch_size: int, seed: int, pad_id: int, max_predictions: int | None = None,
                 rank: int = 0, world_size: int = 1):
        fmt = shards.manifest.instance_format.get("name")
        if fmt != STREAM_FORMAT:
            raise ContractError(
                f"{shards.directory}/manifest.json: pretrain.stream_batches needs shards of instance format "
                f"{STREAM_FORMAT!r} (each document's consecutive segments, field segment_index), but these were built "
                f"as {fmt!r} (instance_format.name); rebuild them with preprocess.instances.format: {STREAM_FORMAT}")
        super().__init__(shards, batch_size, seed, pad_id, max_predictions, rank, world_size)
        doc = np.concatenate([s.doc_id for s in shards._shards]).astype(np.uint64)
        seg = np.concatenate([s.segment_index if s.segment_index is not None else np.zeros(s.rows, np.uint32)
                              for s in shards._shards]).astype(np.int64)
        order = np.lexsort((seg, doc))  # rows by (document, segment)
        starts = np.flatnonzero(np.r_[True, doc[order][1:] != doc[order][:-1]])
        lengths = np.diff(np.r_[starts, len(order)])
        expected = np.arange(len(order)) - np.repeat(starts, lengths)  # 0, 1, ... within every document
        if not np.array_equal(seg[order], expected):
            bad = int(np.flatnonzero(seg[order] != expected)[0])
            raise ContractError(f"{shards.directory}: document {int(doc[order][bad])} of split '{shards.split}' does not "
                                f"hold segments 0, 1, ... (segment_index {int(seg[order][bad])} at place "
                                f"{int(expected[bad])}); the stream loader needs every segment of a document")
        self._doc_of_row, self._seg_of_row = doc, seg
        self._doc_rows = np.split(order, starts[1:])  # per document, its rows in segment order
        self._next_row = np.full(len(order), -1, np.int64)  # the row of the document's next segment
        same_doc = doc[order][1:] == doc[order][:-1]
        self._next_row[order[:-1][same_doc]] = order[1:][same_doc]
        width = shards.manifest.instance_format.get("max_seq_len")
        self.width = int(width) if isinstance(width, int) else int(shards.lengths().max())

    @classmethod
    def open(cls, shard_dir: Path, tokenizer_sha256: str, batch_size: int, seed: int, split: str = "train",
             verify: bool = True, rank: int = 0, world_size: int = 1, **unsupported) -> "StreamBatches":
        if unsupported.get("length_buckets"):
            raise ConfigError("pretrain.stream_batches and pretrain.length_buckets cannot be combined: buckets "
                              "reorder rows, streams must keep each slot's documents in order")
        shards = ShardSet.open(shard_dir, split, tokenizer_sha256=tokenizer_sha256, verify=verify)
        pad_id = shards.manifest.tokenizer.special_ids.get("pad")
        if pad_id is None:
            raise ContractError(f"{shard_dir}/manifest.json: tokenizer.special_ids has no 'pad'")
        return cls(shards, batch_size, seed, pad_id, rank=rank, world_size=world_size)

    def permutation(self, epoch: int) -> np.ndarray:
        """The epoch's stream: every row, documents in an order drawn from (seed, epoch), each document's segments
        in order (cached per epoch like PretrainBatches' permutation)."""
        if self._perm_epoch != epoch:
            docs = np.random.default_rng([self.seed, epoch]).permutation(len(self._doc_rows))
            self._perm = np.concatenate([self._doc_rows[d] for d in docs])
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def rows_of(self, step: int) -> np.ndarray:
        """Slot r of the step reads row `batch_in_epoch` of the epoch stream's r-th part."""
        pos = self.position(step)
        return self.permutation(pos.epoch)[np.arange(self.batch_size) * self.steps_per_epoch + pos.batch_in_epoch]

    def width_of(self, step: int) -> int:
        return self.width

    def continues(self, step: int) -> np.ndarray:
        """[B] bool: slot r's row of `step` is the next segment of the document its row of step - 1 came from."""
        current = self.rows_of(step)
        if step == 0:
            return np.zeros(len(current), dtype=bool)
        previous = self.rows_of(step - 1)
        return (self._doc_of_row[current] == self._doc_of_row[previous]) & (
            self._seg_of_row[current] == self._seg_of_row[previous] + 1)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """This rank's slots of global step `step`: collate()'s tensors plus the stream fields (module docstring)."""
        batch = super().batch(step)
        start = self.rank * self.local_batch_size
        local = slice(start, start + self.local_batch_size)
        rows = self.rows_of(step)[local]
        following = self._next_row[rows]
        next_token = [int(self.shards.instance(int(r)).input_ids[0]) if r >= 0 else IGNORE_INDEX for r in following]
        batch["stream_slots"] = torch.arange(self.local_batch_size, dtype=torch.int64)
        batch["stream_continues"] = torch.from_numpy(self.continues(step)[local].astype(np.int64))
        batch["stream_next"] = torch.tensor(next_token, dtype=torch.int64)
        return batch


def evaluation_batches(model: torch.nn.Module, objective: str, shard_dir: Path, tokenizer_sha256: str, batch_size: int,
                       seed: int, split: str) -> PretrainBatches:
    """The batches a held-out evaluation of `objective` reads (evaluation/heldout.py): for a recurrent objective
    with a memory (mem_len > 0) on `clm` shards, the split's documents as `batch_size` streams with the memory
    carried from segment to segment as in training (the model's memory starts empty); else PretrainBatches."""
    shards = ShardSet.open(shard_dir, split, tokenizer_sha256=tokenizer_sha256, verify=False)
    streams = (objective in STREAM_OBJECTIVES and getattr(model.config, "mem_len", 0) > 0
               and shards.manifest.instance_format.get("name") == STREAM_FORMAT)
    if not streams:
        return PretrainBatches.open(shard_dir, tokenizer_sha256, batch_size, seed, split=split, verify=False)
    model.stream_memory = None  # nothing carried over from training or from another evaluation
    pad_id = shards.manifest.tokenizer.special_ids.get("pad")
    if pad_id is None:
        raise ContractError(f"{shard_dir}/manifest.json: tokenizer.special_ids has no 'pad'")
    return StreamBatches(shards, batch_size, seed, pad_id)
