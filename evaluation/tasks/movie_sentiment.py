"""Movie-review sentiment: sentences from Rotten Tomatoes reviews (Pang & Lee) with the mean valence (-4..4) that
human raters gave them (Hutto & Gilbert, ICWSM 2014), turned into a binary task.

File format (the `movie_reviews` sample): UTF-8, CRLF or LF line ends, one sentence per line,
`id<TAB>mean_valence<TAB>text`. Label: 1 (positive) when the valence is > 0, 0 (negative) when < 0; sentences
with valence exactly 0 have no sign and are dropped (counted as `dropped.zero_valence`).

Split: deterministic by the sentence id alone — bucket = first 8 bytes of sha256(id) as a big-endian integer
mod 100; buckets 0-79 train, 80-89 dev, 90-99 test (≈80/10/10). Within a split the file order is kept.

    from evaluation.tasks.movie_sentiment import load_movie_sentiment
    data = load_movie_sentiment(sample_path("movie_reviews"))
"""

from __future__ import annotations

import math
from pathlib import Path

from bertfactory.errors import InputError
from bertfactory.io import decode_utf8, sha256_file

from .base import Example, TaskData, split_of

NAME = "movie_sentiment"
LABEL_NAMES = ("negative", "positive")
SPLIT_METHOD = "sha256(id) first 8 bytes big-endian mod 100: 0-79 train, 80-89 dev, 90-99 test"
VALENCE_RANGE = (-4.0, 4.0)


def parse_line(line: str, path: Path, lineno: int) -> tuple[str, float, str]:
    """One `id<TAB>valence<TAB>text` line (line end already removed) -> (id, valence, text)."""
    parts = line.split("\t", 2)
    where = f"{path}:{lineno}"
    if len(parts) != 3:
        raise InputError(f"{where}: expected 3 tab-separated fields (id, valence, text), found {len(parts)}: {line[:80]!r}")
    sid, raw_valence, text = parts[0].strip(), parts[1].strip(), parts[2].strip()
    if not sid:
        raise InputError(f"{where}: empty sentence id")
    try:
        valence = float(raw_valence)
    except ValueError:
        raise InputError(f"{where}: valence {raw_valence!r} is not a number") from None
    if not math.isfinite(valence) or not VALENCE_RANGE[0] <= valence <= VALENCE_RANGE[1]:
        raise InputError(f"{where}: valence {raw_valence!r} is outside {VALENCE_RANGE[0]:g}..{VALENCE_RANGE[1]:g}")
    if not text:
        raise InputError(f"{where}: empty text for sentence id {sid!r}")
    return sid, valence, text


def load_movie_sentiment(path: str | Path) -> TaskData:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"movie-review file {path} does not exist")
    content = decode_utf8(path.read_bytes(), path)
    lines = content.split("\n")
    if lines and lines[-1] == "":  # a final line end is not an empty record
        lines.pop()
    splits: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    seen: dict[str, int] = {}
    zero = 0
    for lineno, line in enumerate(lines, start=1):
        sid, valence, text = parse_line(line.removesuffix("\r"), path, lineno)
        if sid in seen:
            raise InputError(f"{path}:{lineno}: sentence id {sid!r} already used on line {seen[sid]}")
        seen[sid] = lineno
        if valence == 0.0:
            zero += 1
            continue
        splits[split_of(sid)].append(Example(sid, text, 1 if valence > 0 else 0))
    if not all(splits.values()):
        raise InputError(f"{path}: too few usable lines ({sum(map(len, splits.values()))}) to fill train, dev and test")
    return TaskData.from_splits(splits, name=NAME, label_names=LABEL_NAMES,
                                source={"path": str(path), "sha256": sha256_file(path), "lines": len(lines)},
                                split_method=SPLIT_METHOD, dropped={"zero_valence": zero})
