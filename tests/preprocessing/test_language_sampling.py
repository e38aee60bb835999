"""Exponentially smoothed language sampling: the limits alpha = 1 and 0, a hand computation, and the realised shares
and corpus size of many synthetic documents copied with `copies`."""

from __future__ import annotations

import random

import pytest

from preprocessing.language_sampling import copies, copy_rates, sampling_probabilities

COUNTS = {"en": 9_000_000, "fr": 900_000, "sw": 100_000}  # shares 0.9, 0.09, 0.01


def test_alpha_one_keeps_the_shares_and_zero_equalises():
    assert sampling_probabilities(COUNTS, alpha=1.0) == pytest.approx({"en": 0.9, "fr": 0.09, "sw": 0.01})
    assert copy_rates(COUNTS, alpha=1.0) == pytest.approx({"en": 1.0, "fr": 1.0, "sw": 1.0})
    assert sampling_probabilities(COUNTS, alpha=0.0) == pytest.approx({"en": 1 / 3, "fr": 1 / 3, "sw": 1 / 3})


def test_alpha_07_matches_a_hand_computation():
    # 0.9^0.7 = e^(0.7 ln 0.9) = 0.928902, 0.09^0.7 = 0.185340, 0.01^0.7 = 0.039811; sum 1.154053
    q = sampling_probabilities(COUNTS, alpha=0.7)
    assert q == pytest.approx({"en": 0.928902 / 1.154053, "fr": 0.185340 / 1.154053, "sw": 0.039811 / 1.154053},
                              abs=2e-6)
    assert q == pytest.approx({"en": 0.8049, "fr": 0.1606, "sw": 0.0345}, abs=1e-4)
    rates = copy_rates(COUNTS, alpha=0.7)
    assert rates == pytest.approx({"en": 0.8049 / 0.9, "fr": 0.1606 / 0.09, "sw": 0.0345 / 0.01}, rel=1e-3)
    assert sum(rates[lang] * n for lang, n in COUNTS.items()) == pytest.approx(sum(COUNTS.values()))


def test_zero_counts_and_bad_input():
    q = sampling_probabilities({"en": 10, "xx": 0}, alpha=0.0)
    assert q == {"en": 1.0, "xx": 0.0} and copy_rates({"en": 10, "xx": 0}, 0.0) == {"en": 1.0, "xx": 0.0}
    with pytest.raises(ValueError, match="add up to 0"):
        sampling_probabilities({"en": 0})
    with pytest.raises(ValueError, match="counts must be finite numbers >= 0"):
        copy_rates({"en": -3, "fr": 5})
    with pytest.raises(ValueError, match="alpha must be"):
        sampling_probabilities(COUNTS, alpha=-0.5)
    with pytest.raises(ValueError, match="no copy rate for language 'de'"):
        copies("doc", "de", copy_rates(COUNTS), seed=1)


def test_realised_shares_approach_q_and_the_corpus_keeps_its_size():
    rng = random.Random(5)
    docs = []  # (key, lang, tokens): many short documents, lengths varying by language like real sources
    for lang, n_docs, mean_len in (("en", 30_000, 300), ("fr", 6_000, 150), ("sw", 2_500, 40)):
        docs += [(f"{lang}/{i}", lang, max(1, int(rng.expovariate(1 / mean_len)))) for i in range(n_docs)]
    counts: dict[str, int] = {}
    for _, lang, tokens in docs:
        counts[lang] = counts.get(lang, 0) + tokens
    q = sampling_probabilities(counts, alpha=0.5)
    rates = copy_rates(counts, alpha=0.5)
    realised: dict[str, int] = {lang: 0 for lang in counts}
    for key, lang, tokens in docs:
        realised[lang] += copies(key, lang, rates, seed=42) * tokens
    total = sum(realised.values())
    assert total == pytest.approx(sum(counts.values()), rel=0.02)
    for lang in counts:
        assert realised[lang] / total == pytest.approx(q[lang], abs=0.01), (lang, realised, q)
    assert counts["sw"] / sum(counts.values()) < 0.02 < q["sw"]  # the small language did grow


def test_copies_is_a_pure_function_of_seed_language_and_key():
    rates = copy_rates(COUNTS, alpha=0.7)  # sw: 3.4496...
    keys = [f"doc-{i}" for i in range(20_000)]
    first = [copies(k, "sw", rates, seed=7) for k in keys]
    assert first == [copies(k, "sw", rates, seed=7) for k in keys]
    assert set(first) == {3, 4} and sum(first) / len(first) == pytest.approx(rates["sw"], abs=0.02)
    other_seed = [copies(k, "sw", rates, seed=8) for k in keys]
    assert other_seed != first and sum(other_seed) / len(keys) == pytest.approx(rates["sw"], abs=0.02)
    en = [copies(k, "en", rates, seed=7) for k in keys]  # rate 0.894: kept or not
    assert set(en) == {0, 1} and sum(en) / len(en) == pytest.approx(rates["en"], abs=0.01)
