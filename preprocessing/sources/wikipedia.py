"""Stream pages out of a MediaWiki XML export (pages-articles dump), bz2-compressed or plain.

The file is never loaded whole: `bz2.open` decompresses as `xml.etree.ElementTree.iterparse` reads, and each
<page> element is cleared (and detached from the root) once yielded. A page whose fields are missing or
malformed is yielded as a quarantine record, never dropped silently. A corrupt or truncated bz2 stream or broken
XML stops the file with a `CorruptInput` (an InputError; sources.corrupt) that names it, the byte offset and the
pages read; the pipeline quarantines the file. A damaged bz2 block is reported as such even when its garbage
reached the XML parser first.

The dump is a location (sources.remote): a local path, or a URL (s3://, gs://, any fsspec URL) streamed through
the store's read-ahead buffer, never downloaded whole; the same records either way.

    python -m preprocessing.sources.wikipedia DUMP.xml.bz2     # prints one line per page
"""

from __future__ import annotations

import bz2
import io
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Iterator

from bertfactory.errors import InputError

from . import remote
from .corrupt import CorruptInput
from .lines import compression_by_signature

BZ2_MAGIC = b"BZh"
_SNIFF_BYTES = 64 << 10


@dataclass(frozen=True)
class Page:
    """One <page> of the dump, as read (wikitext not yet cleaned)."""

    source: int  # index of the input file in the corpus
    ordinal: int  # position of the page in its file (0-based)
    title: str
    namespace: int
    page_id: int
    redirect: bool
    text: str


@dataclass(frozen=True)
class Quarantined:
    """A record that could not be used, with where it came from and why."""

    source: int
    file: str
    ordinal: int
    record_id: str
    reason: str
    detail: str

    def to_json(self) -> dict:
        return {"source": self.source, "file": self.file, "ordinal": self.ordinal, "record_id": self.record_id,
                "reason": self.reason, "detail": self.detail}


class _CountingReader(io.RawIOBase):
    """A raw file wrapper that counts compressed bytes consumed, to say how far reading got."""

    def __init__(self, raw):
        self.raw = raw
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self.consumed += n or 0
        return n


def _is_bz2(path: remote.Location) -> bool:
    return remote.read_range(path, 0, 3) == BZ2_MAGIC


def validate_dump(path: remote.Location) -> None:
    """Cheap check before the pipeline starts: the file exists, decompresses, and its XML root is <mediawiki>.
    Raises InputError naming the file (path or URL) and what is wrong. A URL costs a few small range reads."""
    if not remote.is_url(path):
        path = remote.local_path(path)
    if not remote.is_file(path):
        raise InputError(f"{path}: input file not found")
    if remote.size(path) == 0:
        raise InputError(f"{path}: the file is empty; expected a MediaWiki XML export (.xml or .xml.bz2)")
    compressed = _is_bz2(path)
    try:
        with remote.open_binary(path, block_size=256 << 10) as raw:
            f = bz2.BZ2File(raw) if compressed else raw
            head = f.read(_SNIFF_BYTES)
    except (OSError, EOFError, ValueError) as err:
        raise InputError(f"{path}: not a readable bz2 file ({err}); expected a bz2-compressed MediaWiki XML export") from None
    other = None if compressed else compression_by_signature(head)
    if other is not None:
        raise InputError(f"{path}: the file is {other}-compressed; a MediaWiki XML export is read plain or "
                         f"bz2-compressed: decompress it first, or recompress it with bzip2")
    kind = "bz2-compressed file" if compressed else "file"
    try:
        for _event, element in ET.iterparse(io.BytesIO(head), events=("start",)):
            tag = _local(element.tag)
            if tag != "mediawiki":
                raise InputError(
                    f"{path}: this {kind} is XML whose root element is <{tag}>, not <mediawiki>; "
                    "expected a MediaWiki XML export (pages-articles dump)"
                )
            return
    except ET.ParseError as err:
        # A truncated head is fine (the sniff cut the document); anything before the root is not.
        if "no element found" in str(err) or "unclosed token" in str(err):
            if b"<mediawiki" in head:
                return
        preview = head[:60].decode("utf-8", "replace").replace("\n", "\\n")
        raise InputError(
            f"{path}: this {kind} is not MediaWiki XML ({err}; it starts with {preview!r}); "
            "expected a MediaWiki XML export (pages-articles dump)"
        ) from None
    raise InputError(f"{path}: no XML element found; expected a MediaWiki XML export")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child_text(page: ET.Element, *path: str) -> str | None:
    node = page
    for name in path:
        node = next((c for c in node if _local(c.tag) == name), None)
        if node is None:
            return None
    return node.text if node.text is not None else ""


def _to_record(element: ET.Element, source: int, file: str, ordinal: int) -> Page | Quarantined:
    title = _child_text(element, "title")
    ns = _child_text(element, "ns")
    pid = _child_text(element, "id")
    record_id = f"id={pid}" if pid else (f"title={title!r}" if title else f"page #{ordinal}")

    def bad(reason: str, detail: str) -> Quarantined:
        return Quarantined(source, file, ordinal, record_id, reason, detail)

    if not title or not title.strip():
        return bad("missing_title", "<page> has no <title> or an empty one")
    if ns is None:
        return bad("missing_namespace", "<page> has no <ns>")
    if pid is None:
        return bad("missing_id", "<page> has no <id>")
    try:
        namespace, page_id = int(ns), int(pid)
    except ValueError:
        return bad("bad_number", f"<ns>{ns!r}</ns> / <id>{pid!r}</id> is not an integer")
    redirect = any(_local(c.tag) == "redirect" for c in element)
    # an export with history (Special:Export, pages-meta-history) lists a page's revisions oldest first: the last
    # one is the page as it stands
    revision = next((c for c in reversed(element) if _local(c.tag) == "revision"), None)
    text = _child_text(revision, "text") if revision is not None else None
    if text is None:
        if redirect:  # a redirect is dropped as one whatever its body: none is nothing wrong
            return Page(source, ordinal, title, namespace, page_id, redirect, "")
        return bad("missing_text", "<page> has no <revision><text>")
    return Page(source, ordinal, title, namespace, page_id, redirect, text)


def page_records(stream, source: int, name: str, first_ordinal: int = 0) -> Iterator[Page | Quarantined]:
    """Every <page> under the <mediawiki> root of an XML byte stream as a record, ordinals from `first_ordinal`.
    ET.ParseError / decompression errors propagate: the caller knows how far it got and names the file."""
    root = None
    ordinal = first_ordinal
    for event, element in ET.iterparse(stream, events=("start", "end")):
        if root is None:
            root = element
            if _local(element.tag) != "mediawiki":
                raise InputError(f"{name}: root element is <{_local(element.tag)}>, not <mediawiki>")
            continue
        if event == "end" and _local(element.tag) == "page":
            yield _to_record(element, source, name, ordinal)
            ordinal += 1
            # Drop the finished page (and the siteinfo before it) so memory stays flat over the dump.
            element.clear()
            root.clear()


def iter_pages(path: remote.Location, source: int = 0, display_name: str | None = None) -> Iterator[Page | Quarantined]:
    """Yield every <page> of the dump at `path` (a local path or a URL) as a Page or, when malformed, a
    Quarantined record.

    Raises InputError (naming the file, the compressed bytes consumed and the pages read) when the bz2 stream is
    corrupt or the XML is broken: nothing after that point can be trusted."""
    if not remote.is_url(path):
        path = remote.local_path(path)
    name = display_name or str(path)
    compressed = _is_bz2(path)
    size = remote.size(path)
    raw = remote.open_binary(path)
    counter = _CountingReader(raw)
    stream = bz2.BZ2File(io.BufferedReader(counter, buffer_size=1 << 16)) if compressed else io.BufferedReader(counter)
    pages = 0
    try:
        for record in page_records(stream, source, name):
            yield record
            pages += 1
    except (OSError, EOFError) as err:
        raise _bz2_error(name, err, counter.consumed, size, pages) from None
    except ET.ParseError as err:
        if compressed:
            # A damaged bz2 block decompresses to garbage before libbz2 checks the block's CRC at its end, so the
            # XML parser usually trips first: read on to the CRC check (a bz2 block is < 1 MB compressed) and
            # report the damaged stream, not "broken XML", when that is what it is.
            bz2_err = _bz2_error_ahead(stream, counter, limit=2 << 20)
            if bz2_err is not None:
                raise _bz2_error(name, bz2_err, counter.consumed, size, pages) from None
        raise CorruptInput(
            f"{name}: broken XML at line {err.position[0]}, column {err.position[1]} "
            f"after {pages} pages ({counter.consumed:,} bytes of the file read): {err}",
            reason="broken_xml", file=name, records_read=pages, offset=counter.consumed,
        ) from None
    finally:
        stream.close()
        raw.close()


def _bz2_error(name: str, err: Exception, consumed: int, size: int, pages: int) -> CorruptInput:
    if isinstance(err, EOFError):
        return CorruptInput(f"{name}: truncated bz2 data: the file ends ({size:,} bytes) before its bz2 "
                            f"end-of-stream marker ({pages} pages read): {err}", reason="truncated_bz2", file=name,
                            records_read=pages, offset=size)
    return CorruptInput(f"{name}: corrupt bz2 data after {consumed:,} compressed bytes of {size:,} ({pages} pages "
                        f"read): a damaged bz2 block ends before byte {consumed:,} ({err})", reason="corrupt_bz2",
                        file=name, records_read=pages, offset=consumed)


def _bz2_error_ahead(stream, counter: _CountingReader, limit: int) -> Exception | None:
    """Decompress up to `limit` more compressed bytes; the bz2 error met on the way, else None."""
    start = counter.consumed
    try:
        while counter.consumed - start < limit and stream.read(1 << 16):
            pass
    except (OSError, EOFError) as err:
        return err
    return None


if __name__ == "__main__":
    for record in iter_pages(sys.argv[1]):
        if isinstance(record, Page):
            print(record.page_id, record.namespace, "redirect" if record.redirect else f"{len(record.text)} chars", record.title)
        else:
            print("QUARANTINED", record.to_json())
