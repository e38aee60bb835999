"""preprocessing.masking's batched core: a row's masks depend only on its seed (not on the batch it is masked in,
the other rows or their order), the columnar MaskedBatch equals the per-row API, the greedy fill of the budget
(skip a unit that does not fit, go on with smaller ones) holds on the array path, and a known row's masks are
pinned (a change to the hashing shows up here, and calls for a new manifest `masking.seeding`)."""

import random

import numpy as np
import pytest

from preprocessing.config import MaskingConfig
from preprocessing.masking import STREAM_ORDER, Masker, counter_hash, variant_seeds
from preprocessing.masking_policies import POLICIES

SPECIALS = frozenset({0, 1, 2, 3, 4})
CONTINUATION = frozenset(range(500, 1000))  # ids 500.. continue the word before them


def _masker(policy: str, **kw) -> Masker:
    return Masker(MaskingConfig(policy=policy, variants=3, **kw), seed=21, vocab_size=1000, mask_id=4,
                  special_ids=SPECIALS, continuation_ids=CONTINUATION)


def _rows(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randrange(1, 60), rng.randrange(1, 60)
        rows.append([2] + [rng.randrange(5, 1000) for _ in range(a)] + [3] + [rng.randrange(5, 1000) for _ in range(b)] + [3])
    return rows


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "entity"])
def test_a_rows_masks_do_not_depend_on_its_batch(policy):
    masker = _masker(policy)
    rows = _rows(120, seed=1)
    items = [(ids, 1000 + i, i % 7) for i, ids in enumerate(rows)]
    whole = masker.variants_batch(items).rows()
    shuffled = list(range(len(items)))
    random.Random(2).shuffle(shuffled)
    for start in range(0, len(items), 37):  # other batches, other order
        part = shuffled[start:start + 37]
        for i, masked in zip(part, masker.variants_batch([items[i] for i in part]).rows()):
            assert masked == whole[i]
    for i in (0, 59, 119):  # the per-row API is the same core
        positions, tokens, units = masker.variants_with_units(*items[i])
        assert [(p, t, u) for p, t, u in whole[i]] == list(zip(positions, tokens, units))

    # rows as flat arrays (what the pipeline holds): the same masks
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    flat = masker.variants_flat(offsets, np.array([t for r in rows for t in r]), np.arange(len(rows)) + 1000,
                                np.arange(len(rows)) % 7)
    assert flat.rows() == whole


def test_whole_word_fills_the_budget_greedily_past_a_unit_that_does_not_fit():
    # words of 3 pieces and one-piece words: when a 3-piece word no longer fits, later one-piece words still do
    masker = _masker("whole-word", masked_lm_prob=0.5, max_predictions_per_seq=4)
    row = [2] + [5, 600, 601] * 6 + [7] * 2 + [3]
    fills = []
    for v in range(300):
        sizes = sorted(len(u) for u in masker.choose_units(row, v))
        # budget 4: a 3-piece word first leaves 1, which one of the two single words fills; a single first leaves
        # 3, filled by a 3-piece word unless the other single comes first (2, and nothing else fits). Stopping
        # at the first unit that does not fit would leave [3] or [1].
        assert sizes in ([1, 3], [1, 1]), (v, sizes)
        fills.append(sum(sizes))
    assert fills.count(4) > 200


def test_counter_hash_is_uniform_enough_and_streams_differ():
    seeds = np.arange(2000, dtype=np.uint64)
    h = counter_hash(seeds[:, None], 1, np.arange(64, dtype=np.uint64)[None, :])
    top = (h >> np.uint64(60)).ravel()  # 16 buckets of the top 4 bits
    counts = np.bincount(top.astype(np.int64), minlength=16)
    expected = h.size / 16
    assert ((counts - expected) ** 2 / expected).sum() < 45  # chi-square, 15 dof: p < 1e-4 beyond 45
    assert not np.any(counter_hash(seeds, 1, seeds) == counter_hash(seeds, 2, seeds))
    s = variant_seeds(21, [5, 5, 6], [0, 1, 0], 4)
    assert s.shape == (3, 4) and len(set(s.ravel().tolist())) == 12


def test_pinned_masks_of_one_row():
    masker = _masker("token")
    row = [2] + list(range(10, 40)) + [3] + list(range(40, 60)) + [3]
    positions, tokens = masker.variants(row, 77, 3)
    assert [len(p) for p in positions] == [8, 8, 8]
    assert positions == PINNED_POSITIONS and tokens == PINNED_TOKENS


PINNED_POSITIONS = [[1, 19, 21, 24, 30, 40, 43, 45], [2, 11, 24, 25, 29, 34, 43, 50], [2, 3, 4, 5, 21, 29, 37, 38]]
PINNED_TOKENS = [[4, 4, 30, 4, 4, 4, 4, 4], [4, 4, 4, 4, 379, 216, 4, 795], [4, 4, 4, 14, 4, 4, 4, 4]]


@pytest.mark.parametrize("max_predictions", [1, 5, 20, 200])
def test_single_position_units_are_the_budget_smallest_keys(max_predictions):
    # the token policy's shortcut (a partial partition instead of a sort) against the greedy core written plainly:
    # order the row's non-special positions by their hashed key, take the first `budget`
    masker = _masker("token", max_predictions_per_seq=max_predictions, masked_lm_prob=0.3)
    rows = _rows(60, seed=3) + [[2, 3], [2, 9, 3], [2] + [7] * 120 + [3]]
    batch = masker.variants_batch([(ids, 50 + i, i) for i, ids in enumerate(rows)]).rows()
    seeds = variant_seeds(21, [50 + i for i in range(len(rows))], list(range(len(rows))), 3)
    for i, ids in enumerate(rows):
        for v in range(3):
            keys = counter_hash(seeds[i, v:v + 1][:, None], STREAM_ORDER, np.arange(len(ids))[None, :])[0].tolist()
            free = [p for p, t in enumerate(ids) if t not in SPECIALS]
            budget = min(max_predictions, max(1, round(len(ids) * 0.3)))
            assert batch[i][v][0] == sorted(sorted(free, key=keys.__getitem__)[:budget])
