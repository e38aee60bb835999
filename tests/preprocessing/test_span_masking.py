"""preprocessing.masking, policy `span` (SpanBERT): statistics over many instances — the 15 % budget, span lengths
in whole words against the truncated Geometric(0.2), one 80/10/10 decision per span, whole words only, spans
that never touch (so the maximal runs of masked positions are the spans), seeding."""

from __future__ import annotations

import random

import pytest

from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker
from preprocessing.masking_policies import MAX_SPAN_WORDS, span_length_probabilities

SPECIALS = frozenset({0, 1, 2, 3, 4})
CLS, SEP, MASK = 2, 3, 4
VOCAB = 1000
CONTINUATION = frozenset(range(700, VOCAB))  # ids 700.. play '##' pieces; 5..699 start words
CHI2_DF9_P001 = 27.88  # chi-square critical value, 9 degrees of freedom, p = 0.001


def _masker(**kw) -> Masker:
    cfg = MaskingConfig(**{"policy": "span", "variants": 1, **kw})
    return Masker(cfg, seed=11, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS, continuation_ids=CONTINUATION)


def _words(rng: random.Random, count: int, max_pieces: int = 3) -> list[int]:
    ids = []
    for _ in range(count):
        ids.append(rng.randrange(5, 700))
        extra = rng.choices(range(max_pieces), weights=[6, 3, 1][:max_pieces])[0]
        ids.extend(rng.randrange(700, VOCAB) for _ in range(extra))
    return ids


def _pair(rng: random.Random, words_a: int, words_b: int, max_pieces: int = 3) -> list[int]:
    return [CLS] + _words(rng, words_a, max_pieces) + [SEP] + _words(rng, words_b, max_pieces) + [SEP]


def _runs(positions: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for p in positions:
        if runs and runs[-1][-1] == p - 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def _word_count(ids: list[int], run: list[int]) -> int:
    return sum(1 for p in run if ids[p] not in CONTINUATION)


def test_budget_is_spent_and_never_exceeded():
    masker = _masker(max_predictions_per_seq=80)
    rng = random.Random(0)
    shortfall = 0
    for i in range(300):
        ids = _pair(rng, rng.randrange(5, 60), rng.randrange(5, 60))
        budget = masker.num_to_predict(len(ids))
        positions, tokens = masker.mask(ids, random.Random(i))
        assert len(positions) == len(tokens) <= budget
        assert positions == sorted(set(positions)) and all(ids[p] not in SPECIALS for p in positions)
        shortfall += budget - len(positions)
        # single-piece words always fill the budget exactly
        flat = _pair(rng, rng.randrange(5, 60), rng.randrange(5, 60), max_pieces=1)
        assert len(masker.mask(flat, random.Random(i))[0]) == masker.num_to_predict(len(flat))
    # with multi-piece words only a last word too long for the remaining budget can leave a gap
    assert shortfall / 300 < 0.5


def test_span_lengths_follow_the_truncated_geometric():
    # Long instances: the one span per instance that the end of the budget may cut short is ~1 % of the spans
    # here (in 512-token instances it is ~5 %, which shifts the mean to ~3.7 words).
    masker = _masker(max_predictions_per_seq=100_000)
    rng = random.Random(1)
    counts = [0] * (MAX_SPAN_WORDS + 1)
    for i in range(30):
        ids = [CLS] + _words(rng, 3000) + [SEP]
        positions, _ = masker.mask(ids, random.Random(1000 + i))
        for run in _runs(positions):
            counts[_word_count(ids, run)] += 1
    assert counts[0] == 0
    total = sum(counts)
    assert total > 2500
    expected = [total * p for p in span_length_probabilities()]
    chi2 = sum((counts[n] - expected[n - 1]) ** 2 / expected[n - 1] for n in range(1, MAX_SPAN_WORDS + 1))
    assert chi2 < CHI2_DF9_P001, (chi2, counts[1:], [round(e) for e in expected])
    mean = sum(n * c for n, c in enumerate(counts)) / total
    assert abs(mean - 3.8) < 0.15  # the paper's mean span length


def test_truncated_geometric_probabilities():
    probs = span_length_probabilities()
    assert len(probs) == 10 and abs(sum(probs) - 1.0) < 1e-12
    assert all(abs(probs[n] / probs[n - 1] - 0.8) < 1e-12 for n in range(1, 10))
    assert abs(sum((n + 1) * p for n, p in enumerate(probs)) - 3.80) < 0.005


def _treatment(ids: list[int], position: int, new: int) -> str:
    return "mask" if new == MASK else "kept" if new == ids[position] else "random"


def test_replacement_is_decided_per_span():
    masker = _masker(max_predictions_per_seq=10_000)
    rng = random.Random(2)
    spans = {"mask": 0, "kept": 0, "random": 0}
    tokens_seen = 0
    for i in range(300):
        ids = _pair(rng, 120, 120)
        positions, tokens = masker.mask(ids, random.Random(i))
        new_at = dict(zip(positions, tokens))
        for run in _runs(positions):
            kinds = {_treatment(ids, p, new_at[p]) for p in run}
            # a random replacement can draw the original id by chance (1 in ~1000): it then reads as "kept"
            if kinds == {"random", "kept"}:
                kinds = {"random"}
            assert len(kinds) == 1, (run, kinds)
            spans[kinds.pop()] += 1
            tokens_seen += len(run)
    total = sum(spans.values())
    assert total > 3000
    for kind, share in (("mask", 0.8), ("kept", 0.1), ("random", 0.1)):
        assert abs(spans[kind] / total - share) < 0.025, spans
    assert all(new not in SPECIALS - {MASK} for new in tokens)
    assert tokens_seen > total  # spans are longer than one token: the per-span decision was really exercised


def test_per_token_replacement_can_be_asked_for():
    masker = _masker(max_predictions_per_seq=10_000, replacement_per="token")
    rng = random.Random(3)
    mixed = 0
    for i in range(40):
        ids = _pair(rng, 120, 120)
        positions, tokens = masker.mask(ids, random.Random(i))
        new_at = dict(zip(positions, tokens))
        mixed += sum(len({new_at[p] == MASK for p in run}) > 1 for run in _runs(positions))
    assert mixed > 50


def test_whole_words_and_spans_apart():
    masker = _masker(max_predictions_per_seq=10_000, masked_lm_prob=0.3)
    rng = random.Random(4)
    for i in range(200):
        ids = _pair(rng, rng.randrange(3, 80), rng.randrange(3, 80))
        positions, _ = masker.mask(ids, random.Random(i))
        masked = set(positions)
        # a word is masked whole or not at all: a continuation piece is masked iff the token before it is
        for p in range(1, len(ids)):
            if ids[p] in CONTINUATION and ids[p - 1] not in SPECIALS:
                assert (p in masked) == (p - 1 in masked), (i, p)
        for run in _runs(positions):
            # a run starts at a word start and is bounded by an unmasked token (a special or a free word) on
            # both sides, so runs of masked positions are exactly the chosen spans
            assert ids[run[0]] not in CONTINUATION or ids[run[0] - 1] in SPECIALS
            assert run[0] - 1 not in masked and run[-1] + 1 not in masked
            assert _word_count(ids, run) <= MAX_SPAN_WORDS
            before, after = run[0] - 1, run[-1] + 1
            assert ids[after] in SPECIALS or ids[after] not in CONTINUATION  # the span ends at a word end
            assert 0 <= before and after < len(ids)


def test_seeded_by_instance_and_variant_only():
    masker = _masker(variants=3, max_predictions_per_seq=40)
    ids = _pair(random.Random(5), 60, 60)
    first = masker.variants(ids, doc_id=3, index=1)
    assert first == masker.variants(list(ids), doc_id=3, index=1)
    assert first != masker.variants(ids, doc_id=3, index=2)
    assert len({tuple(p) for p in first[0]}) == 3


def test_span_policy_without_continuations_treats_every_token_as_a_word():
    cfg = MaskingConfig(policy="span", variants=1, max_predictions_per_seq=10_000)
    masker = Masker(cfg, seed=1, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS)
    ids = _pair(random.Random(6), 200, 200)
    positions, _ = masker.mask(ids, random.Random(0))
    assert len(positions) == masker.num_to_predict(len(ids))
    assert max(len(run) for run in _runs(positions)) <= MAX_SPAN_WORDS


@pytest.mark.parametrize("policy", ["token", "ngram"])
def test_other_policies_keep_per_token_replacement(policy):
    assert not Masker(MaskingConfig(policy=policy), 1, VOCAB, MASK, SPECIALS).replaces_per_unit
    assert Masker(MaskingConfig(policy=policy, replacement_per="unit"), 1, VOCAB, MASK, SPECIALS).replaces_per_unit
