"""Statistics of every masking policy over thousands of rows the test generates: a synthetic vocabulary spelled as
each tokenizer kind spells words (WordPiece `##` continuations, byte-level BPE `Ġ` and Unigram `▁` word starts) and
random word structure (1-4 pieces a word, some words capitalised so the entity policy finds names).

Checked: the budget (15 % of the row, never more than num_to_predict / max_predictions_per_seq), the 80/10/10
replacement proportions (binomial tolerance), SpanBERT span lengths against the clipped Geometric(0.2) (total
variation), ALBERT's p(n) proportional to 1/n, whole-word integrity under every word-level policy and every
kind's conventions, the (first, last) units of variants_with_units, and dynamic masking's determinism.
"""

from __future__ import annotations

import math
import random

import pytest

from bertfactory.tokens import SPECIAL_TOKENS_BY_KIND
from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker, mask_at_read_time
from preprocessing.masking_policies import MAX_NGRAM, Candidates, ngram_units, span_length_probabilities
from preprocessing.masking_vocab import token_text_table, word_continuation_ids

KINDS = ("wordpiece", "bpe", "unigram")
POLICIES = ("token", "whole-word", "ngram", "span", "entity")
WORD_POLICIES = ("whole-word", "ngram", "span", "entity")
N_STARTS, N_PIECES = 300, 200  # word-start tokens (half of them capitalised), continuation pieces
PIECES_PER_WORD = ([1, 2, 3, 4], [0.6, 0.25, 0.1, 0.05])


def _vocab(kind: str) -> dict[str, int]:
    """Specials (ids 0-4 in the kind's order), then word starts, then continuation pieces."""
    tokens = list(SPECIAL_TOKENS_BY_KIND[kind].values())
    starts = [f"W{i}" if i % 2 else f"w{i}" for i in range(N_STARTS)]
    pieces = [f"p{i}" for i in range(N_PIECES)]
    if kind == "wordpiece":
        tokens += starts + [f"##{p}" for p in pieces]
    else:
        marker = "\u0120" if kind == "bpe" else "\u2581"
        tokens += [marker + s for s in starts] + pieces
    return {token: i for i, token in enumerate(tokens)}


def _masker(kind: str, seed: int = 3, **cfg) -> Masker:
    vocab = _vocab(kind)
    roles = {role: vocab[token] for role, token in SPECIAL_TOKENS_BY_KIND[kind].items()}
    texts, byte_level = token_text_table(vocab)
    return Masker(MaskingConfig(**cfg), seed, len(vocab), roles["mask"], frozenset(roles.values()),
                  word_continuation_ids(vocab), texts, byte_level)


def _segment(rng: random.Random, n_words: int, first: int) -> tuple[list[int], list[list[int]]]:
    """Token ids of n_words random words and each word's positions (the truth the masker must respect)."""
    ids, words = [], []
    for _ in range(n_words):
        n = rng.choices(*PIECES_PER_WORD)[0]
        words.append(list(range(first + len(ids), first + len(ids) + n)))
        ids.append(5 + rng.randrange(N_STARTS))
        ids += [5 + N_STARTS + rng.randrange(N_PIECES) for _ in range(n - 1)]
    return ids, words


def _rows(kind: str, count: int, seed: int, words_range=(10, 120)) -> list[tuple[list[int], list[list[int]]]]:
    """[CLS] A [SEP] B [SEP] rows with their true words."""
    roles = {role: _vocab(kind)[t] for role, t in SPECIAL_TOKENS_BY_KIND[kind].items()}
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, words_a = _segment(rng, rng.randint(*words_range), 1)
        b, words_b = _segment(rng, rng.randint(*words_range), len(a) + 2)
        rows.append(([roles["cls"], *a, roles["sep"], *b, roles["sep"]], words_a + words_b))
    return rows


def _within_binomial(successes: int, trials: int, p: float, sigmas: float = 4.0) -> bool:
    return abs(successes / trials - p) <= sigmas * math.sqrt(p * (1 - p) / trials)


@pytest.mark.parametrize("policy", POLICIES)
def test_budget_is_15_percent_and_max_predictions_holds(policy):
    masker = _masker("wordpiece", policy=policy, max_predictions_per_seq=10_000)
    capped = _masker("wordpiece", policy=policy, max_predictions_per_seq=20)
    masked = tokens = 0
    for n, (ids, _) in enumerate(_rows("wordpiece", 1500, seed=1)):
        positions, _ = masker.mask(ids, random.Random(n))
        assert len(positions) <= masker.num_to_predict(len(ids))
        masked += len(positions)
        tokens += len(ids)
        assert len(capped.mask(ids, random.Random(n))[0]) <= 20
    fraction = masked / tokens
    # token fills num_to_predict exactly; whole-word units can leave less than a word unspent
    assert (abs(fraction - 0.15) < 0.002) if policy == "token" else (0.145 < fraction <= 0.1502), fraction


@pytest.mark.parametrize("policy", POLICIES)
def test_replacement_proportions_80_10_10(policy):
    kind = "bpe"
    masker = _masker(kind, policy=policy, max_predictions_per_seq=10_000)
    mask_id = masker.mask_id
    counts = {"mask": 0, "random": 0, "kept": 0}
    unit_counts = {"mask": 0, "random": 0, "kept": 0}
    for n, (ids, _) in enumerate(_rows(kind, 600, seed=2)):
        positions, tokens, units = masker.mask_with_spans(ids, random.Random(n))
        new = dict(zip(positions, tokens))
        for p, t in new.items():
            assert t not in masker.special_ids or t == mask_id
            counts["mask" if t == mask_id else "kept" if t == ids[p] else "random"] += 1
        for first, last in units:
            kinds = {"mask" if new[p] == mask_id else "kept" if new[p] == ids[p] else "random"
                     for p in range(first, last + 1)}
            if masker.replaces_per_unit:  # one decision per unit (span); a random token may equal the original
                assert len(kinds) == 1 or kinds == {"random", "kept"}, kinds
            unit_counts[min(kinds)] += 1
    scope = unit_counts if masker.replaces_per_unit else counts
    trials = sum(scope.values())
    assert trials > 5000 if not masker.replaces_per_unit else trials > 2000
    for treatment, p in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        assert _within_binomial(scope[treatment], trials, p), (policy, scope)


def test_span_lengths_match_the_clipped_geometric():
    masker = _masker("unigram", policy="span", max_predictions_per_seq=100_000)
    counts = [0] * 11
    for n, (ids, words) in enumerate(_rows("unigram", 50, seed=3, words_range=(600, 900))):
        word_of = {p: k for k, word in enumerate(words) for p in word}
        _, _, units = masker.mask_with_spans(ids, random.Random(n))
        for first, last in units:
            counts[word_of[last] - word_of[first] + 1] += 1
    total = sum(counts)
    assert total > 2500 and counts[0] == 0
    expected = span_length_probabilities()
    tv = 0.5 * sum(abs(counts[k + 1] / total - expected[k]) for k in range(10))
    # sampling noise of ~3000 spans is ~0.02; the span the end of the budget shortens adds < 0.01
    assert tv < 0.035, (tv, counts)


def test_ngram_lengths_are_drawn_with_p_proportional_to_1_over_n():
    rng = random.Random(4)
    drawn = [0] * (MAX_NGRAM + 1)
    for _ in range(200):
        n_words = 60
        candidates = Candidates(is_special=[False] * n_words, is_continuation=[False] * n_words)
        for start, unit in enumerate(ngram_units(candidates, rng)[:n_words - MAX_NGRAM + 1]):
            assert unit[0] == start  # one n-gram per word, in order
            drawn[len(unit)] += 1
    total = sum(drawn)
    weights = [1 / n for n in range(1, MAX_NGRAM + 1)]
    expected = [w / sum(weights) for w in weights]  # 6/11, 3/11, 2/11
    tv = 0.5 * sum(abs(drawn[n] / total - expected[n - 1]) for n in range(1, MAX_NGRAM + 1))
    assert total > 10_000 and tv < 0.015, (drawn, expected)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", WORD_POLICIES)
def test_no_word_is_ever_partly_masked(kind, policy):
    masker = _masker(kind, policy=policy, max_predictions_per_seq=40, variants=2)
    whole_units = 0
    for n, (ids, words) in enumerate(_rows(kind, 400, seed=5)):
        positions_per_variant, _, units_per_variant = masker.variants_with_units(ids, 9, n)
        for positions, units in zip(positions_per_variant, units_per_variant):
            taken = set(positions)
            for word in words:
                assert taken.isdisjoint(word) or taken.issuperset(word), (kind, policy, word, positions)
            starts = {word[0] for word in words}
            ends = {word[-1] for word in words}
            for first, last in units:  # a unit is one or more whole words
                assert first in starts and last in ends, (first, last)
                whole_units += 1
    assert whole_units > 2000


@pytest.mark.parametrize("policy", POLICIES)
def test_units_describe_the_masked_positions(policy):
    masker = _masker("wordpiece", policy=policy, variants=3)
    for n, (ids, _) in enumerate(_rows("wordpiece", 200, seed=6)):
        positions, tokens = masker.variants(ids, 4, n)
        positions_u, tokens_u, units = masker.variants_with_units(ids, 4, n)
        assert (positions, tokens) == (positions_u, tokens_u)
        for variant_positions, variant_units in zip(positions, units):
            covered = [p for first, last in variant_units for p in range(first, last + 1)]
            assert covered == variant_positions  # sorted, disjoint, contiguous units covering exactly the masks
            if policy == "span":  # spans never touch, so the SBO boundaries are unmasked tokens
                assert all(a[1] + 1 < b[0] for a, b in zip(variant_units, variant_units[1:]))


@pytest.mark.parametrize("policy", POLICIES)
def test_dynamic_masking_is_deterministic_per_epoch_and_row(policy):
    masker = _masker("unigram", policy=policy)
    rows = [ids for ids, _ in _rows("unigram", 300, seed=7)]
    epoch0 = [mask_at_read_time(masker, ids, 0, r) for r, ids in enumerate(rows)]
    # read again, in another order, by a fresh masker: the same masks
    again = _masker("unigram", policy=policy)
    for r in reversed(range(len(rows))):
        assert mask_at_read_time(again, rows[r], 0, r) == epoch0[r]
    epoch1 = [mask_at_read_time(masker, ids, 1, r) for r, ids in enumerate(rows)]
    assert sum(a != b for a, b in zip(epoch0, epoch1)) > 0.95 * len(rows)
    other_seed = _masker("unigram", seed=4, policy=policy)
    assert sum(mask_at_read_time(other_seed, ids, 0, r) != epoch0[r] for r, ids in enumerate(rows)) > 0.95 * len(rows)
    for ids, (positions, _) in zip(rows, epoch0 + epoch1):
        assert len(positions) <= masker.num_to_predict(len(ids))
