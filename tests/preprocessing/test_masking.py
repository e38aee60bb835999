"""preprocessing.masking: 15 % of tokens, 80/10/10, never special tokens, seeded per instance and variant."""

import random

from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker

SPECIALS = frozenset({0, 1, 2, 3, 4})


def _masker(**kw) -> Masker:
    return Masker(MaskingConfig(**kw), seed=9, vocab_size=1000, mask_id=4, special_ids=SPECIALS)


def _instance(rng, n):
    return [2] + [rng.randrange(5, 1000) for _ in range(n - 3)] + [3] + [rng.randrange(5, 1000)] + [3]


def test_counts_and_special_tokens():
    masker = _masker(variants=4)
    rng = random.Random(0)
    for n in (6, 20, 64, 128, 200):
        ids = _instance(rng, n)
        positions, tokens = masker.variants(ids, doc_id=5, index=n)
        assert len(positions) == 4
        expected = min(20, max(1, round(len(ids) * 0.15)))
        for p, t in zip(positions, tokens):
            assert len(p) == expected and p == sorted(set(p))
            assert all(ids[i] not in SPECIALS for i in p)
            assert all(x not in SPECIALS - {4} for x in t)


def test_80_10_10_proportions():
    masker = _masker(variants=1, max_predictions_per_seq=200)
    rng = random.Random(1)
    kinds = {"mask": 0, "kept": 0, "random": 0}
    for i in range(300):
        ids = _instance(rng, 128)
        (p,), (t,) = masker.variants(ids, doc_id=i, index=0)
        for pos, new in zip(p, t):
            kinds["mask" if new == 4 else "kept" if new == ids[pos] else "random"] += 1
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02
    assert abs(kinds["kept"] / total - 0.1) < 0.02
    assert abs(kinds["random"] / total - 0.1) < 0.02


def test_seeded_by_instance_and_variant_only():
    masker = _masker(variants=3)
    ids = _instance(random.Random(2), 100)
    first = masker.variants(ids, doc_id=7, index=1)
    assert first == masker.variants(list(ids), doc_id=7, index=1)
    assert first != masker.variants(ids, doc_id=7, index=2)
    assert len({tuple(p) for p in first[0]}) == 3  # variants differ
    other_seed = Masker(MaskingConfig(variants=3), seed=10, vocab_size=1000, mask_id=4, special_ids=SPECIALS)
    assert first != other_seed.variants(ids, doc_id=7, index=1)
