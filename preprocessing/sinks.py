"""A Beam sink for the small JSON-lines side outputs of the preprocessing jobs (outcome counts, per-language copy
counts, documents without tokens, shard summaries): DIR/part-00000.jsonl, its lines sorted, written atomically.

Why not WriteToText: its write-then-finalise protocol costs four or five stages per sink (an Impulse, a
GroupByKey, pre-finalise and finalise steps), each a bundle round trip to every worker of a local runner; with
seven sinks in a job that was a second of fixed cost on every run, more than all the work on a small corpus.
Here the lines meet in one group and are written by one call: one stage. A retried bundle rewrites the same
bytes (the lines are sorted), so reruns and retries are idempotent. Only for outputs that stay small (counts per
source, language or shard; the ids of the rare documents that tokenise to nothing): the group is held in one
worker's memory. Documents, the quarantine and the duplicates list go through WriteToText on a shared disk.

Where the staging area is a bucket (preprocessing.exchange) they go through WriteKeyedParts instead: each line to
one of a fixed number of parts by a hash of its bytes, each part's lines sorted and written whole, by one worker,
and uploaded; a retried bundle writes the same bytes again under the same name (WriteToText would need Beam's own
filesystem packages and options for the bucket, and leaves file names to the bundles).

    pcoll_of_lines | "WriteCounts" >> WriteSmallLines(join(work, "outcomes"))
    docs_lines | "WriteDocs" >> WriteKeyedParts(join(work, "docs"), parts=16)
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterable

import apache_beam as beam

from bertfactory.io import atomic_write_text

from . import exchange

PART_NAME = "part-00000.jsonl"


def _write(directory: str, lines: Iterable[str], name: str = PART_NAME) -> str:
    location = exchange.join(directory, name)
    atomic_write_text(exchange.writable(location), "".join(f"{line}\n" for line in sorted(lines)))
    exchange.put(location, keep=False)
    return location


class WriteSmallLines(beam.PTransform):
    """Lines (str, no newline) -> `directory`/part-00000.jsonl, sorted; no file when there are no lines (the
    readers glob part*.jsonl). Returns the written path as a one-element PCollection."""

    def __init__(self, directory: str | Path):  # a path or a URL
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


class WriteKeyedParts(beam.PTransform):
    """Lines (str, no newline) -> `directory`/part-NNNNN-of-MMMMM.jsonl: each line in the part a CRC-32 of its
    bytes picks, a part's lines sorted; parts without lines are not written. The same lines give the same files
    whatever the bundles, so a retry rewrites them byte for byte. Returns the written locations."""

    def __init__(self, directory: str | Path, parts: int = 16):
        super().__init__()
        self.directory = str(directory)
        self.parts = parts

    def expand(self, lines):
        directory, parts = self.directory, self.parts
        return (
            lines
            | "ToPart" >> beam.Map(lambda line: (zlib.crc32(line.encode("utf-8")) % parts, line))
            | "GroupParts" >> beam.GroupByKey()
            | "WritePart" >> beam.MapTuple(
                lambda part, group: _write(directory, group, f"part-{part:05d}-of-{parts:05d}.jsonl"))
        )
