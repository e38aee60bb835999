"""A Beam sink for the small JSON-lines side outputs of the preprocessing jobs (outcome counts, per-language copy
counts, documents without tokens, shard summaries): DIR/part-00000.jsonl, its lines sorted, written atomically.

Why not WriteToText: its write-then-finalise protocol costs four or five stages per sink (an Impulse, a
GroupByKey, pre-finalise and finalise steps), each a bundle round trip to every worker of a local runner; with
seven sinks in a job that was a second of fixed cost on every run, more than all the work on a small corpus.
Here the lines meet in one group and are written by one call: one stage. A retried bundle rewrites the same
bytes (the lines are sorted), so reruns and retries are idempotent. Only for outputs that stay small (counts per
source, language or shard; the ids of the rare documents that tokenise to nothing): the group is held in one
worker's memory. Documents, the quarantine and the duplicates list go through WriteToText.

    pcoll_of_lines | "WriteCounts" >> WriteSmallLines(work / "outcomes")
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import apache_beam as beam

from bertfactory.io import atomic_write_text

PART_NAME = "part-00000.jsonl"


def _write(directory: str, lines: Iterable[str]) -> str:
    path = Path(directory) / PART_NAME
    atomic_write_text(path, "".join(f"{line}\n" for line in sorted(lines)))
    return str(path)


class WriteSmallLines(beam.PTransform):
    """Lines (str, no newline) -> `directory`/part-00000.jsonl, sorted; no file when there are no lines (the
    readers glob part*.jsonl). Returns the written path as a one-element PCollection."""

    def __init__(self, directory: str | Path):
        super().__init__()
        self.directory = str(directory)

    def expand(self, lines):
        directory = self.directory
        return (
            lines
            | "OneGroup" >> beam.Map(lambda line: (0, line))
            | "Group" >> beam.GroupByKey()
            | "Write" >> beam.MapTuple(lambda _key, group: _write(directory, group))
        )
