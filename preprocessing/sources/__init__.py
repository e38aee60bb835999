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
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

FORMATS = ("wikipedia", "warc", "text", "jsonl", "parallel")


def work_items(corpus, path: str, source: int) -> list[tuple[int, str, list[int] | None]]:
    """(source, path, chunk) items covering one input file: chunk None = the whole file."""
    if corpus.format == "wikipedia" and corpus.multistream_chunk_streams:
        from .wikipedia_multistream import index_path_for, plan_chunks

        index = index_path_for(Path(path))
        if index is not None:
            return [(source, path, c.to_json()) for c in plan_chunks(Path(path), index, corpus.multistream_chunk_streams)]
    return [(source, path, None)]


def read_records(corpus, path: str, source: int, chunk: list[int] | None = None, display_name: str | None = None) -> Iterator:
    """Every record of one work item, read with the reader of `corpus.format` and its options."""
    fmt = corpus.format
    if fmt == "wikipedia":
        if chunk is not None:
            from .wikipedia_multistream import Chunk, iter_chunk_pages

            return iter_chunk_pages(Path(path), Chunk.from_json(chunk), source, display_name)
        from .wikipedia import iter_pages

        return iter_pages(Path(path), source, display_name)
    if fmt == "warc":
        from .warc import iter_records

        w = corpus.warc
        return iter_records(Path(path), source, display_name, extractor=w.extractor, min_chars=w.min_chars,
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
    if "://" in path and not path.startswith("file://") and fmt not in ("text", "jsonl"):
        from bertfactory.errors import InputError

        raise InputError(f"{path}: corpus.format {fmt} reads local files; URLs (fsspec) are read for text and jsonl "
                         f"only - copy the file to local disk first (e.g. `gsutil cp`, `aws s3 cp`)")
    if fmt == "wikipedia":
        from .wikipedia import validate_dump

        validate_dump(Path(path))
    elif fmt == "warc":
        from .warc import validate_file as validate_warc

        validate_warc(Path(path))
    elif fmt in ("text", "jsonl"):
        from .text import validate_file as validate_text

        validate_text(path, fmt)
    elif fmt == "parallel":
        from .parallel import validate_file as validate_parallel

        validate_parallel(path, corpus.parallel)
