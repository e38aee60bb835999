"""Helpers every task reader shares: decoding a file with errors that name the line, provenance of the source
files, label sets with errors that name file/line/value, and the hash split.

    text = read_text(path)                       # UTF-8 (a leading BOM is dropped), InputError names the line
    lines = split_lines(text)                    # LF or CRLF, a final line end is not an empty record
    labels = LabelSet(("negative", "positive"))  # labels.index("positive", path, 12) -> 1, or InputError
    source = describe_sources([train, dev])      # {"path", "sha256", "lines", "files"}
    parts = assign_splits(items, key_of, SPLIT_PLANS["train/dev/test"])
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from bertfactory.errors import InputError
from bertfactory.io import decode_utf8, sha256_file

from .base import hash_bucket

T = TypeVar("T")

# Which splits a file provides, by bucket of sha256(key) mod 100 (see base.hash_bucket). A split that comes from
# its own file is not in the plan.
SPLIT_PLANS: dict[str, dict[str, range]] = {
    "train/dev/test": {"train": range(0, 80), "dev": range(80, 90), "test": range(90, 100)},
    "train/dev": {"train": range(0, 90), "dev": range(90, 100)},
    "train/test": {"train": range(0, 90), "test": range(90, 100)},
    "train": {"train": range(0, 100)},
}


def plan_description(plan: str, what: str) -> str:
    """'sha256(<what>) first 8 bytes big-endian mod 100: 0-79 train, 80-89 dev, 90-99 test' for a plan name."""
    parts = ", ".join(f"{r.start}-{r.stop - 1} {split}" for split, r in SPLIT_PLANS[plan].items())
    return f"sha256({what}) first 8 bytes big-endian mod 100: {parts}"


def read_text(path: Path, what: str = "task file") -> str:
    """The file decoded as UTF-8 with a leading byte-order mark removed (spreadsheet exports and MRPC have one)."""
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist")
    text = decode_utf8(path.read_bytes(), path)
    if not text.strip():
        raise InputError(f"{path}: the file is empty")
    return text.removeprefix("\ufeff")


def split_lines(text: str) -> list[str]:
    """Lines without their LF / CRLF ends; a final line end does not make an empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def describe_sources(paths: Sequence[Path], display: Path | None = None) -> dict:
    """Provenance for TaskData.source: `path` (`display` or the first file), `sha256` (the file's, or for several
    files the sha256 of the sorted `name<TAB>sha256` lines), total `lines`, and per file sha256 + lines."""
    files = {}
    for p in paths:
        data = p.read_bytes()
        lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        files[str(p)] = {"sha256": sha256_file(p), "lines": lines}
    if len(paths) == 1:
        digest = files[str(paths[0])]["sha256"]
    else:
        listing = "".join(f"{name}\t{info['sha256']}\n" for name, info in sorted(files.items()))
        digest = hashlib.sha256(listing.encode("utf-8")).hexdigest()
    return {"path": str(display or paths[0]), "sha256": digest, "lines": sum(f["lines"] for f in files.values()),
            "files": files}


def assign_splits(items: Iterable[T], key_of: Callable[[T], str], plan: dict[str, range]) -> dict[str, list[T]]:
    """Each item to the split whose bucket range holds hash_bucket(key_of(item)); the input order is kept within
    a split. Items with equal keys (duplicates) always land in the same split."""
    out: dict[str, list[T]] = {split: [] for split in plan}
    for item in items:
        bucket = hash_bucket(key_of(item))
        out[next(split for split, r in plan.items() if bucket in r)].append(item)
    return out


def require_filled(splits: dict[str, Sequence], where: str, why: str = "") -> None:
    """Refuses a split without examples; `why` (e.g. how many distinct split keys there were) ends the message."""
    empty = [name for name, items in splits.items() if not items]
    if empty:
        sizes = ", ".join(f"{name} {len(items)}" for name, items in splits.items())
        raise InputError(f"{where}: too few examples to fill every split ({sizes}); {', '.join(empty)} is empty{why}")


class LabelSet:
    """Label names in id order; `index` maps a raw label to its id or raises naming the file, line and value."""

    def __init__(self, names: Sequence[str]):
        if len(names) < 2:
            raise InputError(f"a label set needs at least 2 labels, got {list(names)}")
        if len(set(names)) != len(names):
            raise InputError(f"label names must be distinct, got {list(names)}")
        self.names = tuple(names)
        self._ids = {name: i for i, name in enumerate(self.names)}

    def index(self, value: str, path: Path, lineno: int) -> int:
        if value not in self._ids:
            raise InputError(f"{path}:{lineno}: label {value!r} is not in the label set ({', '.join(self.names)})")
        return self._ids[value]

    @staticmethod
    def infer(values: Iterable[str]) -> LabelSet:
        """The distinct values, numerically sorted when all are integers ('0' < '1' < '10'; one number spelt two ways,
        '01' and '1', in text order), else sorted as text."""
        distinct = set(values)
        if all(as_integer(v) is not None for v in distinct):
            return LabelSet(sorted(distinct, key=lambda v: (int(v), v)))  # never the set's (hash seed's) order
        return LabelSet(sorted(distinct))


def as_integer(value: str) -> int | None:
    """The integer a label spells (`'10'`, `'-1'`), else None. (`str.isdigit` also accepts what int() refuses, such
    as `'²'`, and a `lstrip('-')` test accepts `'--1'`: both were tracebacks.)"""
    try:
        return int(value)
    except ValueError:
        return None
