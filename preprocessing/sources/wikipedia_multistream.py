"""Split a multistream Wikipedia dump into independently readable chunks, so many workers read one file at once.

A `*-pages-articles-multistream.xml.bz2` dump is a concatenation of bz2 streams: the first holds the XML header
and <siteinfo>, then every stream holds up to 100 <page> elements, and the last closes </mediawiki>. The index
beside it (`*-pages-articles-multistream-index.txt.bz2`, one line `offset:page_id:title` per page, in page order)
gives the byte offset of the stream each page is in. A chunk is a byte range of whole streams plus the ordinal of
its first page (its line number in the index), so the pages a chunk yields carry the same ordinals as a sequential
read of the file: the output does not depend on how the file was split.

The dump and its index may be URLs (s3://, gs://, any fsspec URL; sources.remote) as well as local paths. Planning
on the driver reads the index (streamed) and never the dump: its size, 3 bytes at a sample of the offsets, and the
last page stream (to find where it ends). A worker fetches its chunk as one ranged GET of exactly the chunk's bytes.

    python -m preprocessing.sources.wikipedia_multistream DUMP-multistream.xml.bz2   # prints the chunks
"""

from __future__ import annotations

import bz2
import io
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bertfactory.errors import InputError

from . import remote
from .corrupt import CorruptInput
from .wikipedia import Page, Quarantined, page_records

# Pages per stream in Wikimedia's dumps is 100; a chunk of 50 streams (~5,000 pages, tens of MB of wikitext)
# is enough work to amortise a worker's start and small enough to spread a 20 GB dump over hundreds of workers.
DEFAULT_STREAMS_PER_CHUNK = 50


@dataclass(frozen=True)
class Chunk:
    """Bytes [start, end) of the dump (whole bz2 streams) whose first page has `first_ordinal` in the file."""

    start: int
    end: int
    first_ordinal: int
    pages: int

    def to_json(self) -> list[int]:
        return [self.start, self.end, self.first_ordinal, self.pages]

    @classmethod
    def from_json(cls, values: list[int]) -> "Chunk":
        return cls(*values)


def index_path_for(dump: remote.Location) -> Path | str | None:
    """The multistream index beside `dump` (Wikimedia's naming), or None when there is none: a Path for a local
    dump, a URL beside a URL."""
    name = remote.name_of(dump)
    if "multistream" not in name or not name.endswith(".xml.bz2"):
        return None
    candidate = remote.sibling(dump, name[: -len(".xml.bz2")].replace("multistream", "multistream-index", 1)
                               + ".txt.bz2")
    return candidate if remote.is_file(candidate) else None


def stream_offsets(index: remote.Location) -> list[tuple[int, int]]:
    """(byte offset, pages in it) of every page-holding stream, in file order. InputError for a broken index (a
    URL is streamed, not downloaded)."""
    streams: list[list[int]] = []
    compressed = remote.name_of(index).endswith(".bz2")
    try:
        with remote.open_binary(index) as raw, \
                io.TextIOWrapper(bz2.BZ2File(raw) if compressed else raw, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                head, sep, _rest = line.partition(":")
                if not sep or not head.isdigit():
                    raise InputError(f"{index}: line {number} is not `offset:page_id:title` ({line[:80]!r})")
                offset = int(head)
                if streams and offset < streams[-1][0]:
                    raise InputError(f"{index}: line {number}: offset {offset} goes backwards (after {streams[-1][0]})")
                if streams and streams[-1][0] == offset:
                    streams[-1][1] += 1
                else:
                    streams.append([offset, 1])
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise InputError(f"{index}: unreadable multistream index ({err})") from None
    if not streams:
        raise InputError(f"{index}: the multistream index is empty")
    return [(o, n) for o, n in streams]


def plan_chunks(dump: remote.Location, index: remote.Location,
                streams_per_chunk: int = DEFAULT_STREAMS_PER_CHUNK) -> list[Chunk]:
    """Chunks covering every page of `dump`, `streams_per_chunk` streams each. The last chunk ends at the start of
    the closing stream when the file has one (it holds only </mediawiki>), else at the end of the file. A URL dump
    is not downloaded: its size and small range reads (see the module docstring)."""
    if streams_per_chunk < 1:
        raise ValueError("streams_per_chunk must be >= 1")
    streams = stream_offsets(index)
    try:
        size = remote.size(dump)
    except FileNotFoundError:
        raise InputError(f"{dump}: input file not found") from None
    if streams[-1][0] >= size:
        raise InputError(f"{index}: offset {streams[-1][0]} lies beyond the end of {dump} ({size} bytes); "
                         "the index belongs to another dump")
    # every offset must be the start of a bz2 stream: a sample of them checked (a URL: 3 bytes each)
    for offset, _n in streams[:: max(1, len(streams) // 64)] + [streams[-1]]:
        if remote.read_range(dump, offset, offset + 3) != b"BZh":
            raise InputError(f"{dump}: no bz2 stream starts at offset {offset} given by {index}; "
                             "the index belongs to another dump")
    end_of_pages = _end_of_last_page_stream(dump, streams[-1][0])
    chunks: list[Chunk] = []
    ordinal = 0
    for i in range(0, len(streams), streams_per_chunk):
        group = streams[i : i + streams_per_chunk]
        end = streams[i + streams_per_chunk][0] if i + streams_per_chunk < len(streams) else end_of_pages
        pages = sum(n for _o, n in group)
        chunks.append(Chunk(group[0][0], end, ordinal, pages))
        ordinal += pages
    return chunks


def _end_of_last_page_stream(dump: remote.Location, last_offset: int) -> int:
    """Where the last page-holding stream ends (the closing </mediawiki> stream, if any, follows it). Reads that
    stream only (a URL: ranged GETs of 1 MiB from its offset until it ends)."""
    decompressor = bz2.BZ2Decompressor()
    consumed = 0
    blocks = remote.iter_blocks(dump, last_offset, 1 << 20)
    try:
        while not decompressor.eof:
            block = next(blocks, b"")
            if not block:
                raise InputError(f"{dump}: the last bz2 stream (offset {last_offset}) is truncated")
            try:
                decompressor.decompress(block)
            except OSError as err:
                raise InputError(f"{dump}: corrupt bz2 stream at offset {last_offset}: {err}") from None
            consumed += len(block)
    finally:
        blocks.close()
    return last_offset + consumed - len(decompressor.unused_data)


def _decompress_streams(data: bytes, name: str, chunk: Chunk) -> Iterator[bytes]:
    """The decompressed bytes of consecutive bz2 streams, as they come. A damaged stream is a CorruptInput at its
    offset; none of the chunk's pages has been yielded then (the chunk is decompressed before it is parsed)."""
    position = 0
    lost = f"the chunk's {chunk.pages} pages (from page {chunk.first_ordinal}) are not read"
    while position < len(data):
        decompressor = bz2.BZ2Decompressor()
        offset = chunk.start + position
        try:
            yield decompressor.decompress(data[position:])
        except OSError as err:
            raise CorruptInput(f"{name}: corrupt bz2 stream at byte {offset:,}: {err}; {lost}", reason="corrupt_bz2",
                               file=name, records_read=chunk.first_ordinal, offset=offset) from None
        if not decompressor.eof:
            raise CorruptInput(f"{name}: the bz2 stream at byte {offset:,} is truncated; {lost}",
                               reason="truncated_bz2", file=name, records_read=chunk.first_ordinal, offset=offset)
        position = len(data) - len(decompressor.unused_data)


def iter_chunk_pages(dump: remote.Location, chunk: Chunk, source: int = 0,
                     display_name: str | None = None) -> Iterator[Page | Quarantined]:
    """The pages of one chunk as Page / Quarantined records, with their ordinals in the whole file. The chunk's
    bytes are one read (a URL: one ranged GET of bytes [start, end), never the rest of the dump)."""
    name = display_name or str(dump)
    try:
        data = remote.read_range(dump, chunk.start, chunk.end)
    except FileNotFoundError:
        raise InputError(f"{name}: input file not found") from None
    xml = io.BytesIO(b"<mediawiki>" + b"".join(_decompress_streams(data, name, chunk)) + b"</mediawiki>")
    ordinal = chunk.first_ordinal
    try:
        for record in page_records(xml, source, name, chunk.first_ordinal):
            yield record
            ordinal += 1
    except ET.ParseError as err:
        raise CorruptInput(f"{name}: broken XML in the streams at bytes {chunk.start:,}..{chunk.end:,} after "
                           f"{ordinal - chunk.first_ordinal} pages of that chunk: {err}", reason="broken_xml",
                           file=name, records_read=ordinal, offset=chunk.start) from None
    if ordinal - chunk.first_ordinal != chunk.pages:
        raise InputError(f"{name}: the streams at bytes {chunk.start:,}..{chunk.end:,} hold "
                         f"{ordinal - chunk.first_ordinal} pages, the multistream index says {chunk.pages}")


if __name__ == "__main__":
    dump_path = sys.argv[1] if remote.is_url(sys.argv[1]) else Path(sys.argv[1])
    index_file = index_path_for(dump_path)
    if index_file is None:
        sys.exit(f"{dump_path}: no multistream index beside it")
    for c in plan_chunks(dump_path, index_file):
        print(c)
