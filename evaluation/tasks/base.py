"""What every downstream task reader returns: labelled examples split into train/dev/test, plus the facts about
the source that the results record (path, sha256, how the split was made, what was dropped)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    id: str
    text: str
    label: int


@dataclass(frozen=True)
class TaskData:
    name: str
    label_names: tuple[str, ...]
    train: tuple[Example, ...]
    dev: tuple[Example, ...]
    test: tuple[Example, ...]
    source: dict[str, Any]  # path, sha256, lines
    split_method: str
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "dev": len(self.dev), "test": len(self.test)}


def hash_bucket(key: str, buckets: int = 100) -> int:
    """A stable bucket in [0, buckets) from the sha256 of `key` (UTF-8): the first 8 digest bytes as a big-endian
    integer, modulo `buckets`. Independent of file order, Python's hash seed and the platform."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % buckets


def split_of(key: str, train_pct: int = 80, dev_pct: int = 10) -> str:
    """'train' for buckets [0, train_pct), 'dev' for the next dev_pct, 'test' for the rest."""
    bucket = hash_bucket(key)
    if bucket < train_pct:
        return "train"
    return "dev" if bucket < train_pct + dev_pct else "test"
