"""A Beam sink for the small JSON-lines side outputs of the preprocessing jobs (outcome counts, per-language copy
counts, documents without tokens, shard summaries): DIR/part-00000.jsonl, its lines sorted, written atomically.

Why not WriteToText: its write-then-finalise protocol costs four or five stages per sink (an Impulse, a
GroupByKey, pre-finalise and finalise steps), each a bundle round trip to every worker of a local runner; with
seven sinks in a job that was a second of fixed cost on every run, more than all the work on a small corpus.
Here the lines meet in one group and are written by one call: one stage. A retried bundle rewrites the same
bytes (the lines are sorted), so reruns and retries are idempotent. Only for outputs that stay small (counts per
source, language or shard; the ids of the rare documents that tokenise to nothing): the group is held in one
worker's memory. Documents, the quarantine and the duplicates list go through WriteToText on a shared disk.

Where the staging area is a bucket (preprocessing.exchange) they go through WriteBundleParts instead: each bundle
writes its lines to a file of its own (DIR/.bundles/<random>.jsonl) in the worker's scratch, uploads it when the
bundle ends and emits its name; the names of the bundles that committed are written last, as a small list
(DIR/_committed/part-00000.jsonl), and readers read the listed files only, so a failed attempt's file is never
read. No text goes through a shuffle (a local runner would hold it all in the driver's memory). WriteToText would
need Beam's own filesystem packages and options for the bucket.

    pcoll_of_lines | "WriteCounts" >> WriteSmallLines(join(work, "outcomes"))
    docs_lines | "WriteDocs" >> WriteBundleParts(join(work, "docs"))
    exchange.committed_parts(join(work, "docs"))      # the driver or a later job: the files to read
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

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


class _WriteBundle(beam.DoFn):
    def __init__(self, directory: str):
        self.directory = directory

    def start_bundle(self) -> None:
        self._file, self._location = None, None

    def process(self, line: str):
        if self._file is None:
            self._location = exchange.join(self.directory, exchange.BUNDLES, f"{uuid.uuid4().hex}.jsonl")
            self._file = open(exchange.writable(self._location), "w", encoding="utf-8")
        self._file.write(line + "\n")
        return ()

    def finish_bundle(self):
        if self._file is not None:
            self._file.close()
            self._file = None
            exchange.put(self._location, keep=False)  # whole before its name leaves the bundle
            yield WindowedValue(self._location, MIN_TIMESTAMP, [GlobalWindow()])


class WriteBundleParts(beam.PTransform):
    """Lines (str, no newline) -> a file per bundle under `directory`/.bundles/, and the committed files' names in
    `directory`/_committed/part-00000.jsonl (exchange.committed_parts reads it). Returns that list's location."""

    def __init__(self, directory: str | Path):
        super().__init__()
        self.directory = str(directory)

    def expand(self, lines):
        return (lines
                | "WriteBundles" >> beam.ParDo(_WriteBundle(self.directory))
                | "ListCommitted" >> WriteSmallLines(exchange.join(self.directory, exchange.COMMITTED)))
