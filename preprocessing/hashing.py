"""Stable 64-bit hashes behind every deterministic choice of the stage: document ids, the held-out split,
random-document buckets, shard assignment, and the seeds of the per-instance random generators.

Python's `hash()` is salted per process, so everything here goes through blake2b of a canonical string.
"""

from __future__ import annotations

import hashlib

import numpy as np

_TWO_64 = float(1 << 64)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_ROW_SALT = np.uint64(0x726F772D6B657973)  # "row-keys": keeps row keys apart from the other uses of mix64


def hash64(*parts: object) -> int:
    """An unsigned 64-bit hash of `parts` (joined with a separator that cannot occur in their str())."""
    data = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def doc_id(namespace: int, title: str) -> int:
    """The stable id of a page: its namespace and title (unique within a wiki, unchanged across dumps)."""
    return hash64("doc", namespace, title)


def is_heldout(title: str, fraction: float) -> bool:
    """Whether a document is held out for evaluation: a hash of its title, independent of the seed, so the
    held-out set does not move when other settings change."""
    return hash64("heldout", title) / _TWO_64 < fraction


def bucket_of(doc: int, num_buckets: int) -> int:
    return hash64("bucket", doc) % num_buckets


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic): a bijection whose outputs pass BigCrush.
    The array counterpart of hash64, for hashes needed per row or per position (blake2b costs microseconds each)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_keys(docs: np.ndarray, instance_indexes: np.ndarray) -> np.ndarray:
    """Sort keys of instances inside their shards (uint64; a key modulo the pre-shard count also picks the
    pre-shard): a hash of (doc_id, instance index), for a whole block of rows at once."""
    with np.errstate(over="ignore"):
        h = mix64(np.asarray(docs, dtype=np.uint64) ^ _ROW_SALT)
        return mix64(h + (np.asarray(instance_indexes, dtype=np.uint64) + np.uint64(1)) * _GOLDEN)


def row_key(doc: int, instance_index: int) -> int:
    """row_keys of one instance."""
    return int(row_keys(np.array([doc], dtype=np.uint64), np.array([instance_index], dtype=np.uint64))[0])


def seed_of(*parts: object) -> int:
    """A seed for `random.Random` from the configured seed and the identity of what is being randomised."""
    return hash64("seed", *parts)
