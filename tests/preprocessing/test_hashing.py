"""preprocessing.hashing: the array hashes behave like hashes (the scalar and array forms agree, keys spread
evenly over pre-shards, nearby inputs give unrelated keys)."""

import numpy as np

from preprocessing.hashing import hash64, row_key, row_keys


def test_row_keys_agree_with_row_key_and_spread_evenly():
    docs = np.array([hash64("doc", i) for i in range(400)], dtype=np.uint64).repeat(25)
    indexes = np.tile(np.arange(25, dtype=np.uint64), 400)
    keys = row_keys(docs, indexes)
    assert keys.dtype == np.uint64 and len(np.unique(keys)) == len(keys)
    assert [row_key(int(d), int(i)) for d, i in zip(docs[:50], indexes[:50])] == keys[:50].tolist()
    # 10,000 keys over 8 pre-shards: each count within 5 standard deviations of 1,250
    counts = np.bincount((keys % np.uint64(8)).astype(np.int64), minlength=8)
    assert np.all(np.abs(counts - 1250) < 5 * np.sqrt(1250 * 7 / 8))
    # consecutive instance indexes of one document: about half the bits differ
    flips = [bin(a ^ b).count("1") for a, b in zip(keys[:24].tolist(), keys[1:25].tolist())]
    assert 24 <= np.mean(flips) <= 40


def test_row_keys_take_small_document_ids_too():
    # test fixtures and the parallel format use small ids: they hash apart as well
    keys = row_keys(np.arange(10_000, dtype=np.uint64), np.zeros(10_000, dtype=np.uint64))
    assert len(np.unique(keys)) == 10_000
    counts = np.bincount((keys % np.uint64(8)).astype(np.int64), minlength=8)
    assert ((counts - 1250) ** 2 / 1250).sum() < 24.3  # chi-square, 7 degrees of freedom, p = 0.001
