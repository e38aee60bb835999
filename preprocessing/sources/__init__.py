"""Source readers, one per `corpus.format`; each streams `preprocessing.records` from one input file.

    wikipedia  MediaWiki XML export (plain or bz2; multistream   preprocessing.sources.wikipedia,
               dumps with their index are split into chunks)      preprocessing.sources.wikipedia_multistream
    warc       WARC / WARC.gz web crawls (CC-News)               preprocessing.sources.warc
    text       blank-line separated documents                    preprocessing.sources.text
    jsonl      one JSON object per line with a `text` field      preprocessing.sources.text
    parallel   aligned pairs: TSV, Moses files, gettext .po,     preprocessing.sources.parallel
               UDHR HTML

The pipeline reads *work items*: a whole file, or for a multistream Wikipedia dump one chunk of its bz2 streams,
so the work on one big file spreads over the workers. Ordinals are the record's position in its file in every
case, so the output does not depend on the split.

Every format reads a local path or a URL (s3://, gs://, any fsspec URL) alike, with the same records: text, jsonl
and parallel through sources.lines (fsspec streams), wikipedia and warc through sources.remote (streamed, or for a
multistream chunk one ranged GET of its bytes; the dump is never downloaded whole). Document ids hash the file's
base name, so a URL gives the ids of a local file of the same name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

FORMATS = ("wikipedia", "warc", "text", "jsonl", "parallel")


def _location(path: str) -> str | Path:
    """A URL as it is (a Path would turn s3://b/x into the local folder s3:/b/x), a local path as a Path."""
    from .remote import is_url, local_path

    return path if is_url(path) else local_path(path)


def work_items(corpus, path: str, source: int) -> list[tuple[int, str, list[int] | None]]:
    """(source, path, chunk) items covering one input file: chunk None = the whole file."""
    if corpus.format == "wikipedia" and corpus.multistream_chunk_streams:
        from .wikipedia_multistream import index_path_for, plan_chunks

        index = index_path_for(_location(path))
        if index is not None:
            return [(source, path, c.to_json())
                    for c in plan_chunks(_location(path), index, corpus.multistream_chunk_streams)]
    return [(source, path, None)]


def read_records(corpus, path: str, source: int, chunk: list[int] | None = None, display_name: str | None = None) -> Iterator:
    """Every record of one work item, read with the reader of `corpus.format` and its options."""
    fmt = corpus.format
    if fmt == "wikipedia":
        if chunk is not None:
            from .wikipedia_multistream import Chunk, iter_chunk_pages

            return iter_chunk_pages(_location(path), Chunk.from_json(chunk), source, display_name)
        from .wikipedia import iter_pages

        return iter_pages(_location(path), source, display_name)
    if fmt == "warc":
        from .warc import iter_records

        w = corpus.warc
        return iter_records(_location(path), source, display_name, extractor=w.extractor, min_chars=w.min_chars,
                            max_record_bytes=w.max_record_bytes)
    if fmt in ("text", "jsonl"):
        from .text import iter_records

        return iter_records(path, source, fmt, corpus.text, display_name)
    if fmt == "parallel":
        from .parallel import iter_records

        return iter_records(path, source, corpus.parallel, display_name)
    raise ValueError(f"no reader for corpus.format {fmt!r}")


def validate_file(corpus, path: str) -> None:
    """Cheap up-front checks of one input file (InputError naming it): run before any Beam work starts."""
    fmt = corpus.format
    if fmt == "wikipedia":
        from .wikipedia import validate_dump

        validate_dump(_location(path))
    elif fmt == "warc":
        from .warc import validate_file as validate_warc

        validate_warc(_location(path))
    elif fmt in ("text", "jsonl"):
        from .text import validate_file as validate_text

        validate_text(path, fmt, corpus.text)
    elif fmt == "parallel":
        from .parallel import validate_file as validate_parallel

        validate_parallel(path, corpus.parallel)
