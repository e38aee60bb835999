"""Translation LM batches (XLM, Lample & Conneau 2019, section 3.3) from aligned sentence pairs, masked by the one
masking core (preprocessing.masking.Masker) and padded by the one collate (training.data.collate).

A pair (source s_1..s_n in language Ls, target t_1..t_m in language Lt) becomes one row:

    input_ids       [CLS] s_1 ... s_n [SEP] t_1 ... t_m [SEP]
    position_ids      0    1  ...  n   n+1   1  ...  m   m+1     positions restart at the target
    language_ids     Ls   Ls  ...  Ls  Ls   Lt  ...  Lt  Lt
    token_type_ids    0    0  ...  0    0    1  ...  1    1

XLM writes `</s> source </s> </s> target </s>` and restarts the positions at the target's opening `</s>`, so that
t_j and s_j both sit at position j; here the pair uses BERT's layout with one [SEP] between the sentences, which
belongs to the source, and t_j is again at position j. The masker draws its units over the whole row (special
tokens never), so both sentences are masked and a masked word can be recovered from its translation. Masks of
pair `pair_id` in variant v are seeded like the shards' (seed_of(masker seed, pair_id, 0, v)): the same pair
gets the same masks whichever batch it lands in.

    builder = TlmBatchBuilder(masker, cls_id=2, sep_id=3, pad_id=0, max_seq_len=128)
    batch = builder.batch(pairs, pair_ids=range(len(pairs)), variant=0)
    out = training.objectives.xlm.tlm(model, batch)

There is no shard schema for parallel pairs yet (schema v2 of the corpora issue); until then the caller brings
the pairs (tokenised with the run's tokenizer).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from bertfactory.errors import ContractError
from preprocessing.hashing import seed_of
from preprocessing.masking import Masker
from preprocessing.shards import Instance

from .data import collate


@dataclass(frozen=True)
class SentencePair:
    """Token ids of a sentence and of its translation (no special tokens), each with its language id."""

    source: Sequence[int]
    source_language: int
    target: Sequence[int]
    target_language: int


@dataclass(frozen=True)
class TlmRow:
    """One pair laid out as a row (see the module docstring); len_a = n + 2 tokens of [CLS] source [SEP]."""

    input_ids: list[int]
    position_ids: list[int]
    language_ids: list[int]
    len_a: int


class TlmBatchBuilder:
    def __init__(self, masker: Masker, cls_id: int, sep_id: int, pad_id: int, max_seq_len: int):
        self.masker = masker
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.pad_id = pad_id
        self.max_seq_len = max_seq_len

    def layout(self, pair: SentencePair, pair_id: int = 0) -> TlmRow:
        n, m = len(pair.source), len(pair.target)
        if n < 1 or m < 1:
            raise ContractError(f"sentence pair {pair_id}: source and target need at least one token each "
                                f"(got {n} and {m})")
        if n + m + 3 > self.max_seq_len:
            raise ContractError(f"sentence pair {pair_id}: {n} + {m} tokens + [CLS] and two [SEP] exceed "
                                f"max_seq_len={self.max_seq_len}; filter or split such pairs before batching")
        special = self.masker.special_ids
        if any(t in special for t in pair.source) or any(t in special for t in pair.target):
            raise ContractError(f"sentence pair {pair_id}: the sentences must not contain special tokens "
                                f"(ids {sorted(special)}); the builder adds [CLS] and [SEP] itself")
        input_ids = [self.cls_id, *pair.source, self.sep_id, *pair.target, self.sep_id]
        position_ids = list(range(n + 2)) + list(range(1, m + 2))
        language_ids = [pair.source_language] * (n + 2) + [pair.target_language] * (m + 1)
        return TlmRow(input_ids, position_ids, language_ids, len_a=n + 2)

    def instance(self, row: TlmRow, pair_id: int, variant: int) -> Instance:
        positions, tokens = self.masker.mask(row.input_ids, random.Random(seed_of(self.masker.seed, pair_id, 0, variant)))
        return Instance(input_ids=np.asarray(row.input_ids, dtype=np.int64), len_a=row.len_a, nsp_label=0,
                        mask_positions=np.asarray(positions, dtype=np.int64),
                        mask_tokens=np.asarray(tokens, dtype=np.int64), doc_id=pair_id)

    def batch(self, pairs: Sequence[SentencePair], pair_ids: Iterable[int], variant: int = 0) -> dict[str, torch.Tensor]:
        """The collate() batch of the pairs (input_ids with the masks applied, token_type_ids, attention_mask,
        masked_positions, masked_labels) plus position_ids and language_ids [B, T] (0 on padding)."""
        ids = list(pair_ids)
        if len(ids) != len(pairs):
            raise ValueError(f"{len(pairs)} pairs but {len(ids)} pair ids")
        rows = [self.layout(pair, pair_id) for pair, pair_id in zip(pairs, ids)]
        instances = [self.instance(row, pair_id, variant) for row, pair_id in zip(rows, ids)]
        max_predictions = max(1, max(len(inst.mask_positions) for inst in instances))
        batch = collate(instances, self.pad_id, max_predictions)
        del batch["nsp_labels"]
        width = batch["input_ids"].shape[1]
        position_ids = torch.zeros(len(rows), width, dtype=torch.int64)
        language_ids = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, row in enumerate(rows):
            position_ids[i, :len(row.position_ids)] = torch.tensor(row.position_ids)
            language_ids[i, :len(row.language_ids)] = torch.tensor(row.language_ids)
        batch["position_ids"] = position_ids
        batch["language_ids"] = language_ids
        return batch
