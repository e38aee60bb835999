"""The staging directory of one preprocess run (RUN/.preprocess-staging: work files, shards, tokenizer, published
by preprocessing.pipeline at the end) and readers of the Beam jobs' line outputs in it.

    python -c "from pathlib import Path; from preprocessing.staging import Staging; print(Staging(Path('S')).shards)"
"""

from __future__ import annotations

import glob
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

STAGING = ".preprocess-staging"


def read_lines(pattern: str) -> Iterator[str]:
    """The non-blank lines of every file matching `pattern`, files in sorted order (a Beam sink's parts)."""
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield line


def iter_docs(work: Path) -> Iterator[dict]:
    """The documents pipeline's kept document records (work/docs), parsed."""
    for line in read_lines(str(work / "docs" / "part*.jsonl")):
        yield json.loads(line)


@dataclass
class Staging:
    """The directories of one run before they are published."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer" / "tokenizer.json"

    def create(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        for d in (self.work, self.shards, self.tokenizer.parent):
            d.mkdir(parents=True)
