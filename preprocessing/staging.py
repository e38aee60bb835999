"""The staging directory of one preprocess run (RUN/.preprocess-staging: work files, shards, tokenizer, published
by preprocessing.pipeline at the end), where the Beam jobs write it (JobArea: the same folder, or a bucket), and
readers of the jobs' line outputs in it.

    python -c "from pathlib import Path; from preprocessing.staging import Staging; print(Staging(Path('S')).shards)"
"""

from __future__ import annotations

import glob
import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bertfactory import storage

from . import exchange

# the large line outputs of the documents job (WriteToText on a disk, WriteBundleParts in a bucket)
LINE_OUTPUTS = ("docs", "quarantine", "duplicates")
# what the driver never downloads from a bucket area: spills, and the bundle files (read through their lists)
SKIPPED = (".spill-", f"{exchange.BUNDLES}/", f"{exchange.COMMITTED}/")

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


@dataclass
class JobArea:
    """Where the Beam jobs of one run write (preprocessing.exchange): the staging folder itself (`remote` None:
    every worker sees the driver's disk), or a folder of the run location's bucket, `remote`, that the driver
    reads back from: the jobs' small outputs and the shards are downloaded into the staging folder once each job
    has finished (spill files stay in the bucket, and go with the area when the run ends)."""

    staging: Staging
    remote: str | None = None

    @classmethod
    def in_bucket(cls, staging: Staging, run_url: str) -> "JobArea":
        """A fresh area under RUN_URL/.preprocess-staging/<attempt>; what a failed attempt left there is removed
        first (the run directory's lock keeps two jobs of one run apart)."""
        exchange.remove(exchange.join(run_url, STAGING))
        return cls(staging, exchange.join(run_url, STAGING, uuid.uuid4().hex[:12]))

    def _location(self, rel: str) -> str:
        return exchange.join(self.remote, rel) if self.remote else str(self.staging.root / rel)

    @property
    def work(self) -> str:
        return self._location("work")

    @property
    def shards(self) -> str:
        return self._location("shards")

    @property
    def tokenizer(self) -> str:
        return self._location("tokenizer/tokenizer.json")

    def share_tokenizer(self) -> None:
        """The tokenizer file of the staging folder, uploaded for the workers (a bucket area)."""
        if self.remote:
            storage.upload_file(self.staging.tokenizer, self.tokenizer)

    def doc_parts(self) -> list[str]:
        """The documents job's docs files (locations) in a bucket area, sorted (sinks.committed_parts)."""
        return exchange.committed_parts(exchange.join(self.work, "docs"))

    def collect(self) -> None:
        """A bucket area: the jobs' outputs (not their spills) downloaded into the staging folder, where the
        driver's readers find them as on a shared disk; files already there are not fetched again. The large
        line outputs (sinks.WriteBundleParts) come down as part-NNNNN.jsonl, their committed files only."""
        if not self.remote:
            return
        for rel, local in (("work", self.staging.work), ("shards", self.staging.shards)):
            exchange.pull(self._location(rel), local,
                          skip=lambda name, local=local: any(f"/{mark}" in f"/{name}" for mark in SKIPPED)
                          or (local / name).exists())
        for name in LINE_OUTPUTS:
            target = self.staging.work / name
            for index, location in enumerate(exchange.committed_parts(exchange.join(self.work, name))):
                if not (target / f"part-{index:05d}.jsonl").exists():
                    storage.download_file(location, target / f"part-{index:05d}.jsonl")

    def drop_spills(self, location: str) -> None:
        """Remove one folder of spill files of this area (e.g. the documents job's) once nothing reads it."""
        exchange.remove(location)

    def remove(self) -> None:
        if self.remote:
            exchange.remove(self.remote)
