"""Precomputed masked-LM targets: one masking core, with the choice of *what is masked together* as a policy.

Core (as google-research/bert create_masked_lm_predictions): a policy turns the instance into candidate units
(lists of positions; special tokens are never candidates); the units are put in a random order; whole units are
taken in that order while they fit into num_to_predict = min(max_predictions_per_seq, max(1, round(len(input_ids)
* masked_lm_prob))) and do not overlap a unit already taken; every chosen position is replaced by [MASK] with
probability mask_token_prob, by a random non-special token with probability random_token_prob, else kept.
Positions are returned sorted, with the id placed at each.

The core works on a batch of rows at once (Masker.mask_rows): the random order is a sort by hashed keys, the
80/10/10 draws and the random ids are hashes too, all counter-based (splitmix64 of (row seed, stream, position
or unit)), so a row's masks depend on its seed only, never on the batch, the bundle or the worker. For `token`
and `whole-word`, whose units partition the positions, choosing is array work (a sorted cumulative sum; Python only
continues a row whose next unit does not fit); the other policies list their units in Python.

80/10/10 per token or per unit (MaskingConfig.replacement_per): by default every chosen position draws its own
replacement (BERT); per unit, one draw decides for all tokens of the unit (all [MASK], all random, or all kept),
which is SpanBERT's per-span replacement and the default of the `span` policy.

Policies (token, whole-word, ngram, span, entity: what is masked together) are in preprocessing.masking_policies;
word boundaries and token texts come from the tokenizer's vocabulary (preprocessing.masking_vocab; docs/masking.md).
`variants_with_units` / `mask_with_spans` also return each chosen unit's (first, last) positions - the spans whose
boundary tokens SpanBERT's SBO reads. Dynamic masking (MaskingConfig.dynamic): `mask_at_read_time` masks a row at
read time with the same core, deterministic in (seed, epoch, row).

Seeding: variant v of instance (doc_id, index) has the row seed variant_seeds(seed, doc_id, index)[v] (a
counter hash); a single row masked with a random.Random takes 64 bits from it as its row seed. Policies with draws
of their own (ngram, span, entity) use random.Random(row seed) for them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np

from .config import MaskingConfig
from .hashing import mix64 as _mix, seed_of
from .masking_policies import (PARTITION_POLICIES, PER_UNIT_REPLACEMENT_POLICIES, POLICIES, TEXT_POLICIES,
                               Candidates, Units)
from .masking_vocab import token_text_table, word_continuation_ids


def dynamic_rng(seed: int, epoch: int, row_index: int) -> random.Random:
    """The random stream that masks row `row_index` in `epoch` under dynamic masking (the loader's)."""
    return random.Random(seed_of(seed, "dynamic", epoch, row_index))


def mask_at_read_time(masker: "Masker", input_ids: Sequence[int], epoch: int, row_index: int
                      ) -> tuple[list[int], list[int]]:
    """Dynamic masking (MaskingConfig.dynamic, RoBERTa): (positions ascending, replacement ids) for row
    `row_index` of the split read in `epoch`, with the masker's core, policy and seed - the same masks whichever
    rank, worker or resume reads the row, other masks in another epoch. For SBO spans use
    `spans_at_read_time`."""
    return masker.mask(input_ids, dynamic_rng(masker.seed, epoch, row_index))


def spans_at_read_time(masker: "Masker", input_ids: Sequence[int], epoch: int, row_index: int
                       ) -> tuple[list[int], list[int], list[int]]:
    """mask_at_read_time plus the length of every chosen unit in position order (the mask_spans a shard stores
    for policy span): the same draws, so the same masks."""
    positions, tokens, units = masker.mask_with_spans(input_ids, dynamic_rng(masker.seed, epoch, row_index))
    return positions, tokens, [last - first + 1 for first, last in units]


# ------------------------------------------------------------------------------ counter-based randomness

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_ODD = np.uint64(0xD1B54A32D192ED03)
# streams of the core: what a hash is drawn for (each its own sequence, so changing one never moves another)
STREAM_ORDER, STREAM_REPLACE, STREAM_TOKEN = 1, 2, 3
_NO_KEY = np.uint64(_MASK64)  # the key of a position that starts no unit: sorts last


def counter_hash(seeds: np.ndarray, stream: int, counters: np.ndarray) -> np.ndarray:
    """uint64 hashes of (seed, stream, counter), broadcast over the two arrays: the core's random numbers,
    independent of the order or the batch they are computed in."""
    with np.errstate(over="ignore"):
        base = _mix(seeds.astype(np.uint64) + np.uint64(stream) * _GOLDEN)
        return _mix(base ^ (counters.astype(np.uint64) * _ODD))


def _uniform(hashes: np.ndarray) -> np.ndarray:
    """[0, 1) doubles from the top 53 bits of uint64 hashes."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def variant_seeds(seed: int, doc_ids: Sequence[int], indexes: Sequence[int], variants: int) -> np.ndarray:
    """[N, variants] uint64 row seeds of precomputed masks: a hash of (seed, doc_id, instance index, variant)."""
    with np.errstate(over="ignore"):
        h = _mix(np.full(len(doc_ids), (seed & _MASK64), dtype=np.uint64) * _ODD + _GOLDEN)
        h = _mix(h ^ np.asarray(doc_ids, dtype=np.uint64))
        h = _mix(h + np.asarray(indexes, dtype=np.uint64) * _GOLDEN)
        return _mix(h[:, None] ^ (np.arange(variants, dtype=np.uint64)[None, :] + np.uint64(1)) * _ODD)


Masked = tuple[list[int], list[int], list[tuple[int, int]]]  # positions ascending, ids placed, units (first, last)


@dataclass(frozen=True)
class MaskedBatch:
    """The core's result for a batch of N rows with K variants each, as flat arrays over the N*K row-variants in
    order (row 0's variants, then row 1's, ...): what the shard writer turns into Arrow columns without a Python
    list per row. `row(i)` gives row i's variants as lists."""

    variants: int
    counts: np.ndarray  # [N*K] masked positions of each row-variant
    positions: np.ndarray  # the positions, ascending within a row-variant
    tokens: np.ndarray  # the id placed at each position
    unit_counts: np.ndarray  # [N*K] chosen units of each row-variant
    unit_first: np.ndarray  # each unit's first and last position, sorted by first within a row-variant
    unit_last: np.ndarray

    def __len__(self) -> int:
        return len(self.counts) // max(self.variants, 1)

    def unit_lengths(self) -> np.ndarray:
        """Each chosen unit's length in positions (units are runs of consecutive positions): with unit_counts,
        the shard's mask_spans column."""
        return self.unit_last - self.unit_first + 1

    def rows(self) -> list[list[Masked]]:
        """Every row's K variants as (positions, tokens, units (first, last))."""
        bounds = np.concatenate([[0], np.cumsum(self.counts)]).tolist()
        unit_bounds = np.concatenate([[0], np.cumsum(self.unit_counts)]).tolist()
        positions, tokens = self.positions.tolist(), self.tokens.tolist()
        firsts, lasts = self.unit_first.tolist(), self.unit_last.tolist()
        out: list[list[Masked]] = []
        for row in range(len(self)):
            variants = []
            for j in range(row * self.variants, (row + 1) * self.variants):
                a, b, ua, ub = bounds[j], bounds[j + 1], unit_bounds[j], unit_bounds[j + 1]
                variants.append((positions[a:b], tokens[a:b], list(zip(firsts[ua:ub], lasts[ua:ub]))))
            out.append(variants)
        return out


@dataclass(frozen=True)
class Masker:
    """Masks instances for one tokenizer and config. `special_ids`: ids never masked and never drawn as random
    replacements ([PAD], [UNK], [CLS], [SEP], [MASK]). `continuation_ids`: the tokenizer's continuation pieces
    (`word_continuation_ids(tokenizer.get_vocab())`), which word-level policies keep with their word; without them
    every token is a word. `token_texts` / `byte_level`: token_text_table(vocab), needed by the `entity` policy
    only. Masker.from_tokenizer fills everything from a tokenizer."""

    cfg: MaskingConfig
    seed: int
    vocab_size: int
    mask_id: int
    special_ids: frozenset[int]
    continuation_ids: frozenset[int] = frozenset()
    token_texts: tuple[str, ...] = ()
    byte_level: bool = False

    @classmethod
    def from_tokenizer(cls, cfg: MaskingConfig, seed: int, tokenizer, source: str = "tokenizer") -> "Masker":
        """The masker for a `tokenizers.Tokenizer` of any kind bertfactory trains (wordpiece, bpe, unigram):
        special ids by role, word boundaries, and the token texts when the policy reads words. `source` names
        the tokenizer in the error raised when it lacks a complete set of special tokens."""
        from .tokenizer import special_ids  # the tokenizers package only where a tokenizer is at hand

        vocab = tokenizer.get_vocab()
        specials = special_ids(tokenizer, source)
        texts, byte_level = token_text_table(vocab) if cfg.policy in TEXT_POLICIES else ((), False)
        return cls(cfg, seed, tokenizer.get_vocab_size(), specials["mask"], frozenset(specials.values()),
                   word_continuation_ids(vocab), texts, byte_level)

    def num_to_predict(self, length: int) -> int:
        return min(self.cfg.max_predictions_per_seq, max(1, int(round(length * self.cfg.masked_lm_prob))))

    @property
    def replaces_per_unit(self) -> bool:
        """Whether one 80/10/10 draw decides for all tokens of a chosen unit (else one draw per token)."""
        if self.cfg.replacement_per is not None:
            return self.cfg.replacement_per == "unit"
        return self.cfg.policy in PER_UNIT_REPLACEMENT_POLICIES

    def candidates(self, input_ids: Sequence[int]) -> Candidates:
        texts = None
        if self.cfg.policy in TEXT_POLICIES:
            if not self.token_texts:
                raise ValueError(f"masking policy '{self.cfg.policy}' reads the words' text: build the Masker with "
                                 "Masker.from_tokenizer (or pass token_texts=token_text_table(vocab)[0])")
            table = self.token_texts
            texts = [table[t] if 0 <= t < len(table) else "" for t in input_ids]
        return Candidates(is_special=[t in self.special_ids for t in input_ids],
                          is_continuation=[t in self.continuation_ids for t in input_ids],
                          budget=self.num_to_predict(len(input_ids)), token_texts=texts, byte_level=self.byte_level)

    # ---------------------------------------------------------------------------------------------- the core

    def mask_rows(self, rows: Sequence[Sequence[int]], seeds: np.ndarray) -> "MaskedBatch":
        """The core, over a batch: `rows` of token ids and `seeds` [N, K] uint64 row seeds -> a MaskedBatch (K
        variants per row, flat arrays). The result for a row and seed depends on nothing else in the batch."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        values = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        return self._mask(lengths, values, seeds, lambda: rows)

    def mask_flat(self, offsets: np.ndarray, values: np.ndarray, seeds: np.ndarray) -> "MaskedBatch":
        """mask_rows for rows given as flat arrays: row i is values[offsets[i]:offsets[i + 1]] (what the pipeline
        holds; no Python list per row unless the policy lists its units in Python)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        return self._mask(np.diff(offsets), values, seeds,
                          lambda: [values[a:b].tolist() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())])

    def _mask(self, lengths: np.ndarray, values: np.ndarray, seeds: np.ndarray, rows) -> "MaskedBatch":
        """The core on rows of `lengths` whose ids are `values` end to end; `rows()` lists them (listed policies)."""
        seeds = np.asarray(seeds, dtype=np.uint64).reshape(len(lengths), -1)
        n, k = seeds.shape
        width = max(int(lengths.max(initial=0)), 1)
        ids = np.full((n, width), -1, dtype=np.int64)
        valid = np.arange(width)[None, :] < lengths[:, None]
        ids[valid] = values
        special = ~valid | np.isin(ids, np.fromiter(self.special_ids, dtype=np.int64))
        budget = np.minimum(self.cfg.max_predictions_per_seq,
                            np.maximum(1, np.round(lengths * self.cfg.masked_lm_prob).astype(np.int64)))
        flat_seeds = seeds.reshape(n * k)
        if self.cfg.policy in PARTITION_POLICIES:
            chosen, unit_of = self._choose_partition(ids, special, budget, k, flat_seeds)
        else:
            chosen, unit_of = self._choose_listed(rows(), k, flat_seeds, width)
        chosen &= ~np.repeat(special, k, axis=0)
        at_row, at_col = np.nonzero(chosen)  # row-major: each row-variant's positions ascending
        unit = unit_of[at_row, at_col]
        row_seeds = flat_seeds[at_row]
        # 80/10/10: one draw per chosen position, or per unit (the draw of the unit's first position)
        draw = _uniform(counter_hash(row_seeds, STREAM_REPLACE, unit if self.replaces_per_unit else at_col))
        placed = np.where(draw < self.cfg.mask_token_prob, self.mask_id,
                          np.where(draw < self.cfg.mask_token_prob + self.cfg.random_token_prob,
                                   self._random_tokens(row_seeds, at_col), ids[at_row // k, at_col]))
        # a chosen unit is a run of positions with one unit_of: it ends where the next position is not its own
        last = np.ones(len(at_col), dtype=bool)
        last[:-1] = (at_row[1:] != at_row[:-1]) | (unit[1:] != unit[:-1])
        first = unit == at_col
        return MaskedBatch(k, np.bincount(at_row, minlength=n * k), at_col, placed,
                           np.bincount(at_row[first], minlength=n * k), at_col[first], at_col[last])

    def _random_tokens(self, row_seeds: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Uniform non-special token ids, one per (row seed, position); a special drawn is redrawn from the
        next stream."""
        vocab = np.uint64(self.vocab_size)
        tokens = (counter_hash(row_seeds, STREAM_TOKEN, positions) % vocab).astype(np.int64)
        specials = np.fromiter(self.special_ids, dtype=np.int64)
        redraw = np.nonzero(np.isin(tokens, specials))[0]
        attempt = 0
        while len(redraw):
            attempt += 1
            tokens[redraw] = (counter_hash(row_seeds[redraw], STREAM_TOKEN + 16 * attempt, positions[redraw])
                              % vocab).astype(np.int64)
            redraw = redraw[np.isin(tokens[redraw], specials)]
        return tokens

    def _choose_partition(self, ids: np.ndarray, special: np.ndarray, budget: np.ndarray, k: int,
                          seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """token / whole-word: the units partition the non-special positions, so every step is array work.
        Units are ordered by a hashed key of (seed, first position); the core takes them in that order while
        they fit the budget (the prefix by a cumulative sum; a row whose next unit does not fit goes on in
        Python with the smaller units after it, as the greedy core does). Returns (chosen [R, L], unit_of
        [R, L]: each position's unit's first position)."""
        n, width = ids.shape
        positions = np.arange(width, dtype=np.int64)
        starts = ~special
        if self.cfg.policy == "whole-word" and self.continuation_ids:
            continuation = np.isin(ids, np.fromiter(self.continuation_ids, dtype=np.int64))
            after_special = np.concatenate([np.ones((n, 1), dtype=bool), special[:, :-1]], axis=1)
            starts &= ~continuation | after_special
        budget_r = np.repeat(budget, k)
        if self.cfg.policy == "token" or not self.continuation_ids:
            return self._choose_single_positions(starts, budget_r, k, seeds)
        unit_of = np.maximum.accumulate(np.where(starts, positions[None, :], 0), axis=1)
        ends = ~special & np.concatenate([starts[:, 1:] | special[:, 1:], np.ones((n, 1), dtype=bool)], axis=1)
        sizes = np.zeros((n, width), dtype=np.int64)
        start_rows, start_cols = np.nonzero(starts)
        sizes[start_rows, start_cols] = np.nonzero(ends)[1] - start_cols + 1
        starts_r, sizes_r = np.repeat(starts, k, axis=0), np.repeat(sizes, k, axis=0)
        keys = np.where(starts_r, counter_hash(seeds[:, None], STREAM_ORDER, positions[None, :]), _NO_KEY)
        order = np.argsort(keys, axis=1, kind="stable")
        ordered_sizes = np.take_along_axis(sizes_r, order, axis=1)
        taken = np.cumsum(ordered_sizes, axis=1) <= budget_r[:, None]
        taken &= ordered_sizes > 0
        units = starts_r.sum(axis=1)
        n_taken = taken.sum(axis=1)
        filled = (ordered_sizes * taken).sum(axis=1)
        for row in np.nonzero((filled < budget_r) & (n_taken < units))[0].tolist():
            left = int(budget_r[row] - filled[row])
            tail = ordered_sizes[row, n_taken[row] + 1:units[row]].tolist()
            for j, size in enumerate(tail, start=int(n_taken[row]) + 1):
                if size <= left:
                    taken[row, j] = True
                    left -= size
                    if not left:
                        break
        chosen_start = np.zeros_like(starts_r)
        np.put_along_axis(chosen_start, order, taken, axis=1)
        unit_of_r = np.repeat(unit_of, k, axis=0)
        return np.take_along_axis(chosen_start, unit_of_r, axis=1), unit_of_r

    @staticmethod
    def _choose_single_positions(starts: np.ndarray, budget_r: np.ndarray, k: int, seeds: np.ndarray
                                 ) -> tuple[np.ndarray, np.ndarray]:
        """_choose_partition when every unit is one position (token policy; whole-word without continuation
        pieces): the greedy core then takes the `budget` starts of smallest key, so a partial partition finds the
        budget-th smallest key per row and a comparison picks the same positions as the full sort (a row's keys
        are distinct: a bijection of the position under one seed), at a third of its cost."""
        n, width = starts.shape
        positions = np.arange(width, dtype=np.int64)
        starts_r = np.repeat(starts, k, axis=0)
        keys = np.where(starts_r, counter_hash(seeds[:, None], STREAM_ORDER, positions[None, :]), _NO_KEY)
        most = min(int(budget_r.max(initial=1)), width)
        smallest = np.partition(keys, most - 1, axis=1)[:, :most]
        smallest.sort(axis=1)
        threshold = smallest[np.arange(len(keys)), np.clip(budget_r, 1, most) - 1]
        chosen = starts_r & (keys <= threshold[:, None])
        return chosen, np.broadcast_to(positions, chosen.shape)

    def _choose_listed(self, rows: Sequence[Sequence[int]], k: int, seeds: np.ndarray, width: int
                       ) -> tuple[np.ndarray, np.ndarray]:
        """ngram / span / entity: the policy lists the units in Python (with random.Random(row seed) for its own
        draws); the core orders them by hashed keys of (seed, unit index) and takes, greedily, those that fit the
        budget and do not overlap a unit already taken."""
        r = len(rows) * k
        keys = counter_hash(seeds[:, None], STREAM_ORDER, np.arange(width + 1, dtype=np.uint64)[None, :]).tolist()
        chosen = np.zeros((r, width), dtype=bool)
        unit_of = np.zeros((r, width), dtype=np.int64)
        policy = POLICIES[self.cfg.policy]
        for i, ids in enumerate(rows):
            candidates = self.candidates(ids)
            for j in range(i * k, i * k + k):
                units = policy(candidates, random.Random(int(seeds[j])))
                row_keys = keys[j]
                count = 0
                taken: set[int] = set()
                for u in sorted(range(len(units)), key=row_keys.__getitem__):
                    unit = units[u]
                    if count >= candidates.budget:
                        break
                    if count + len(unit) > candidates.budget or not taken.isdisjoint(unit):
                        continue
                    count += len(unit)
                    taken.update(unit)
                    chosen[j, unit] = True
                    unit_of[j, unit] = unit[0]
        return chosen, unit_of

    # ------------------------------------------------------------------------------------------ entry points

    @staticmethod
    def _seed(rng: random.Random | int) -> np.ndarray:
        return np.array([[rng.getrandbits(64) if isinstance(rng, random.Random) else int(rng) & _MASK64]],
                        dtype=np.uint64)

    def choose_units(self, input_ids: Sequence[int], rng: random.Random | int) -> Units:
        """The chosen units (lists of positions, sorted by their first) for one row, with the row seed taken
        from `rng` (a random.Random: 64 bits drawn from it) or given as an int (variant_seeds)."""
        spans = self.mask_rows([input_ids], self._seed(rng)).rows()[0][0][2]
        return [list(range(first, last + 1)) for first, last in spans]

    def mask(self, input_ids: Sequence[int], rng: random.Random | int) -> tuple[list[int], list[int]]:
        """(positions ascending, replacement ids) for one row, seeded as choose_units."""
        positions, tokens, _ = self.mask_with_spans(input_ids, rng)
        return positions, tokens

    def mask_with_spans(self, input_ids: Sequence[int], rng: random.Random | int
                        ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """mask() plus the chosen units as (first, last) positions, inclusive, sorted by first: a span policy's
        spans (their boundary tokens are first - 1 and last + 1), a whole-word policy's words, single tokens for
        `token`. Units are contiguous runs of positions; two units may touch (not under `span`). Same draws as
        mask(), so the same masks."""
        ((masked,),) = self.mask_rows([input_ids], self._seed(rng)).rows()
        return masked

    def variants_batch(self, rows: Sequence[tuple[Sequence[int], int, int]]) -> MaskedBatch:
        """K variants for each (input_ids, doc_id, instance index) of a batch, seeded by variant_seeds: the
        same result as variants() row by row, at array speed."""
        seeds = variant_seeds(self.seed, [d for _, d, _ in rows], [i for _, _, i in rows], self.cfg.variants)
        return self.mask_rows([ids for ids, _, _ in rows], seeds)

    def variants_flat(self, offsets: np.ndarray, values: np.ndarray, doc_ids: np.ndarray,
                      indexes: np.ndarray) -> MaskedBatch:
        """variants_batch for rows as flat arrays (mask_flat): the same result."""
        return self.mask_flat(offsets, values, variant_seeds(self.seed, doc_ids, indexes, self.cfg.variants))

    def variants(self, input_ids: Sequence[int], doc_id: int, index: int) -> tuple[list[list[int]], list[list[int]]]:
        """K variants for instance `index` of document `doc_id`: (mask_positions, mask_tokens)."""
        positions, tokens, _ = self.variants_with_units(input_ids, doc_id, index)
        return positions, tokens

    def variants_with_units(self, input_ids: Sequence[int], doc_id: int, index: int
                            ) -> tuple[list[list[int]], list[list[int]], list[list[tuple[int, int]]]]:
        """variants() plus, per variant, the masked units as (first, last) positions (mask_with_spans): what a
        shard stores for SpanBERT's span boundary objective. The positions and tokens equal variants()'s."""
        (variants,) = self.variants_batch([(input_ids, doc_id, index)]).rows()
        return [p for p, _, _ in variants], [t for _, t, _ in variants], [s for _, _, s in variants]
