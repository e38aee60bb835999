"""Movie-review valence: the `movie_reviews` sample (see movie_sentiment.py for the file format) as a regression
task — predict each sentence's mean human valence, a real number in -4..4 (STS-B-style; scored by Pearson and
Spearman). Every line is used, the 37 sentences of valence exactly 0 included.

Split: the same as movie_sentiment — bucket = first 8 bytes of sha256(id) as a big-endian integer mod 100;
0-79 train, 80-89 dev, 90-99 test — so a sentence is in the same split in both movie tasks.

    from evaluation.tasks.movie_valence import load_movie_valence
    data = load_movie_valence(sample_path("movie_reviews"))
"""

from __future__ import annotations

from pathlib import Path

from bertfactory.errors import InputError

from .base import RegressionExample, TaskData, split_of
from .movie_sentiment import SPLIT_METHOD, parse_line
from .reading import describe_sources, read_text, require_filled, split_lines

NAME = "movie_valence"


def load_movie_valence(path: str | Path) -> TaskData:
    path = Path(path)
    lines = split_lines(read_text(path, "movie-review file"))
    splits: dict[str, list[RegressionExample]] = {"train": [], "dev": [], "test": []}
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        sid, valence, text = parse_line(line, path, lineno)
        if sid in seen:
            raise InputError(f"{path}:{lineno}: sentence id {sid!r} already used on line {seen[sid]}")
        seen[sid] = lineno
        splits[split_of(sid)].append(RegressionExample(sid, text, valence))
    require_filled(splits, str(path))
    source = describe_sources([path])
    return TaskData.from_splits(splits, name=NAME, label_names=(), source=source, split_method=SPLIT_METHOD, dropped={},
                                task_type="regression")
