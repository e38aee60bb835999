"""Stable 64-bit hashes behind every deterministic choice of the stage: document ids, the held-out split,
random-document buckets, shard assignment, and the seeds of the per-instance random generators.

Python's `hash()` is salted per process, so everything here goes through blake2b of a canonical string.
"""

from __future__ import annotations

import hashlib

_TWO_64 = float(1 << 64)


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


def row_key(doc: int, instance_index: int) -> int:
    """Sort key of an instance inside its shard; also decides the shard (key % shards)."""
    return hash64("row", doc, instance_index)


def seed_of(*parts: object) -> int:
    """A seed for `random.Random` from the configured seed and the identity of what is being randomised."""
    return hash64("seed", *parts)
