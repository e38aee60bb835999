"""Held-out rows joined into longer rows, so a held-out objective can be scored at a length other than the one the
shards were cut at (`evaluate.objective.max_seq_len`; evaluation/heldout.py): a long-context evaluation of a
model trained on short rows, e.g. ModernBERT's tiny twin trained at 128 tokens and scored at 256 or 1,024.

    batches = LongRowBatches(ShardSet.open(shard_dir, "heldout"), max_seq_len=1024, batch_size=8, seed=0)
    batch = batches.batch(0)   # collate()'s tensors, rows of up to 1,024 tokens

How the rows are built: the split's `[CLS] text [SEP]` rows (packed formats only: full-sentences, doc-sentences,
single-segment) are grouped by document (the row's doc_id) in their stored order and packed greedily: each long
row is `[CLS]`, the texts of consecutive rows, `[SEP]`, with a [SEP] between texts of two documents (as
full-sentences marks a document's end). Every held-out row is used once. The shards keep a document's rows in
hashed order, not in text order (preprocessing/hashing.py row_keys), so the pieces of a long row come from the
same documents but not necessarily in their order: the score measures the model at that length (positions past
the trained ones, the local windows and global attention over the whole row), not what a longer coherent context
adds to it.

Masks are drawn at read time (RoBERTa's dynamic masking, with the manifest's masking settings and seed) for each
long row, seeded by (seed, long row index); the cap on predictions per row grows with the length (the manifest's
max_predictions_per_seq x max_seq_len / the shards' max_seq_len), so the masked fraction stays the recipe's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from bertfactory.errors import ConfigError, ContractError
from preprocessing.shards import Instance, ShardSet
from training.data import collate, dynamic_masker, masked_at_read_time, row_seeds

# instance formats whose rows are `[CLS] text [SEP]` of running text (preprocessing/segments.py)
JOINABLE_FORMATS = ("full-sentences", "doc-sentences", "single-segment")
FIELD = "evaluate.objective.max_seq_len"


class LongRowBatches:
    """Batches of joined rows with PretrainBatches' reading interface (`batch(step)`, `steps_per_epoch`,
    `batch_size`, `shards`), read in an order drawn from `seed`."""

    def __init__(self, shards: ShardSet, max_seq_len: int, batch_size: int, seed: int):
        manifest = shards.manifest
        fmt = manifest.instance_format
        source = f"{shards.directory}/manifest.json"
        if fmt.get("name") not in JOINABLE_FORMATS:
            raise ConfigError(f"{FIELD}={max_seq_len}: joining held-out rows into longer ones needs running-text "
                              f"shards ({', '.join(JOINABLE_FORMATS)}); {source} holds {fmt.get('name')!r} rows. Leave "
                              f"{FIELD} null to score the rows as they are")
        if len(fmt.get("languages") or ()) > 1:
            raise ConfigError(f"{FIELD}: {source} holds rows of several languages (XLM); joined rows would mix them")
        shard_len = int(fmt["max_seq_len"])
        if max_seq_len < shard_len:
            raise ConfigError(f"{FIELD}={max_seq_len} is shorter than the rows of {source} "
                              f"(instance_format.max_seq_len {shard_len}); set it to at least {shard_len}")
        specials = manifest.tokenizer.special_ids
        self.cls_id, self.sep_id = specials["cls"], specials["sep"]
        self.shards = shards
        self.max_seq_len = max_seq_len
        self.seed = seed
        self.pad_id = specials["pad"]
        self.groups = self._pack(shards, source)
        if not self.groups:
            raise ContractError(f"{source}: split '{shards.split}' has no rows to join")
        self.rows = len(self.groups)
        self.batch_size = min(batch_size, self.rows)
        self.steps_per_epoch = self.rows // self.batch_size
        masker = dynamic_masker(shards)
        cap = math.ceil(masker.cfg.max_predictions_per_seq * max_seq_len / shard_len)
        self.masker = dataclasses.replace(masker, cfg=masker.cfg.model_copy(update={"max_predictions_per_seq": cap}))
        self.max_predictions = cap
        self._order = np.random.default_rng([seed, 0]).permutation(self.rows)

    def _pack(self, shards: ShardSet, source: str) -> list[list[int]]:
        """The split's row indexes, grouped into long rows (see the module docstring)."""
        docs = np.array([shards.instance(i).doc_id for i in range(len(shards))], dtype=np.uint64)
        lengths = shards.lengths()
        order = np.lexsort((np.arange(len(shards)), docs))  # by document, then in stored order
        groups: list[list[int]] = []
        current: list[int] = []
        used = 2  # [CLS] ... [SEP]
        for index in order.tolist():
            text = int(lengths[index]) - 2
            if text < 1:
                raise ContractError(f"{source}: row {index} of split '{shards.split}' holds no text between "
                                    "[CLS] and [SEP]")
            cost = text + (1 if current and docs[current[-1]] != docs[index] else 0)
            if current and used + cost > self.max_seq_len:
                groups.append(current)
                current, used, cost = [], 2, text
            current.append(index)
            used += cost
        if current:
            groups.append(current)
        return groups

    def joined(self, long_row: int) -> Instance:
        """Long row `long_row` unmasked: [CLS], its rows' texts ([SEP] between documents), [SEP]."""
        pieces, previous_doc = [np.array([self.cls_id], dtype=np.int64)], None
        for index in self.groups[long_row]:
            inst = self.shards.instance(index)
            ids = np.asarray(inst.input_ids, dtype=np.int64)
            if ids[0] != self.cls_id or ids[-1] != self.sep_id:
                raise ContractError(f"{self.shards.directory}: row {index} of split '{self.shards.split}' is not "
                                    "[CLS] text [SEP]")
            if previous_doc is not None and inst.doc_id != previous_doc:
                pieces.append(np.array([self.sep_id], dtype=np.int64))
            pieces.append(ids[1:-1])
            previous_doc = inst.doc_id
        pieces.append(np.array([self.sep_id], dtype=np.int64))
        ids = np.concatenate(pieces)
        empty = np.zeros(0, dtype=np.int64)
        first = self.shards.instance(self.groups[long_row][0])
        return Instance(input_ids=ids, len_a=len(ids), nsp_label=0, mask_positions=empty, mask_tokens=empty,
                        doc_id=first.doc_id)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        start = (step % self.steps_per_epoch) * self.batch_size
        rows = self._order[start:start + self.batch_size]
        instances = [masked_at_read_time(self.masker, self.joined(int(r)), 0, int(r), self.shards.span_bounds)
                     for r in rows]
        batch = collate(instances, self.pad_id, self.max_predictions)
        batch["row_seeds"] = row_seeds(self.seed, 0, rows)
        return batch
