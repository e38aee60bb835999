"""CC-News / Common Crawl WARC reader: `response` records with HTTP 200 HTML -> `Document`s of main article text.

    from preprocessing.sources.warc import iter_records, validate_file, WarcOptions
    for rec in iter_records(Path("CC-NEWS-2024.warc.gz"), source=0, extractor="resiliparse"): ...

Reads `.warc` and `.warc.gz` (one gzip member per record, or one for the whole file) as a stream, one record in
memory at a time. Framing is done here, strictly, rather than with warcio's or fastwarc's ArchiveIterator: both
are lenient by design (warcio returns a bogus record for a file that is not a WARC, ends silently on a truncated
gzip, and only warns on a wrong Content-Length; fastwarc skips what it cannot parse), whereas this pipeline must
say what is wrong and count it. The framing is simple (header lines, a Content-Length block, CRLF CRLF); Python's
gzip module reads multi-member files and raises on truncation. warcio is what the tests use to write WARCs.

What each record becomes:
- `Dropped(not_response)` — warcinfo, request, metadata, ... records; `Dropped(http_status)` — a response whose
  HTTP status is not 200; `Dropped(not_html)` — a 200 whose Content-Type is not HTML (no Content-Type: sniffed);
  `Dropped(too_short)` — an HTML page whose extracted main text is shorter than `min_chars` (a normal empty page:
  galleries, redirects with a body, index pages — not a defect, so not quarantined).
- `Quarantined` — `bad_length` (Content-Length not a number, or the block is not followed by CRLF CRLF, or the file
  ends inside it; the reader resynchronises on the next `WARC/1.x` line, also one inside a block that runs past the
  end of the file), `record_too_large`, `bad_http_headers`,
  `binary_payload` (declared HTML, but NUL bytes or a binary file signature), `undecodable` (bytes invalid in the
  declared charset — HTTP header, else `<meta charset>` — or, with nothing declared, neither UTF-8 nor a charset
  detected by charset_normalizer; a declared charset is trusted over guessing, mojibake is worse than a lost page),
  `bad_content_encoding` (a gzip / deflate payload that does not decompress, or one stored in another encoding, br
  or zstd, which is not decoded), `extraction_failed` (the extractor raised), `missing_uri` (a response without a
  WARC-Target-URI, the document's identity).
- `Document(key=WARC-Target-URI, paragraphs=main text lines, lang=<html lang> else Content-Language (primary
  subtag, lower case) else None, meta={url, domain, date, title, warc_record_id})`; `date` is the page's publish
  date (article:published_time and similar meta tags, or JSON-LD datePublished) when it parses as ISO 8601, else
  the WARC-Date.

Main-text extraction: `trafilatura_precision` (default: trafilatura with favor_precision, best mean token F1
against newspaper4k's 23 gold texts, 0.964 vs 0.925 for trafilatura's defaults and 0.890 for resiliparse; see
benchmarks/extraction.py and benchmarks/RESULTS.md) or `resiliparse` (main_content=True; ~10x faster, for when
throughput matters more than boilerplate in the text).
File-level problems raise `InputError` naming the file: before the first record (missing, empty, not a WARC) a plain
one; part way through (a corrupt or truncated gzip, framing that stops being WARC) a `CorruptInput` (sources.corrupt)
with the byte offset and the records read, which the pipeline quarantines instead of ending the job.
Locations: a local path or a URL (s3://, gs://, any fsspec URL; sources.remote), streamed either way (a URL through
the store's read-ahead buffer, never downloaded whole), with the same records.
Line ends: `WARC/1.0` lines and header lines may end CR LF, LF or CR CR LF (warcio reads all three, and crawlers
have written the last); a block may be followed by LF LF instead of CR LF CR LF (a WARC written with LF line ends).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import BinaryIO, Literal
from urllib.parse import urlsplit

from pydantic import Field

from bertfactory.config import StrictModel
from bertfactory.errors import InputError

from ..records import Document, Dropped, Quarantined
from . import remote
from .corrupt import CorruptInput
from .lines import compression_by_signature

ExtractorName = Literal["trafilatura", "trafilatura_precision", "trafilatura_recall", "resiliparse",
                        "resiliparse_all"]

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_BINARY_MAGIC = (b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"%PDF", b"PK\x03\x04", b"\x1f\x8b", b"RIFF", b"\x00\x00\x01")
_DATE_META = ("article:published_time", "og:published_time", "datepublished", "pubdate", "publishdate",
              "publish-date", "date", "dc.date.issued", "dc.date", "parsely-pub-date", "sailthru.date",
              "article.published", "published_time")
_WARC_VERSION_LINE = re.compile(rb"^WARC/1\.[01]\r*\n$")
_NEXT_RECORD = re.compile(rb"\r\n\r\n(WARC/1\.[01]\r*\n)")  # a block's end and the next record's version line


class WarcOptions(StrictModel):
    """How WARC inputs become documents."""

    extractor: ExtractorName = Field(
        "trafilatura_precision", description="main-text extractor: trafilatura_precision (favor_precision; best on "
        "the gold texts), trafilatura (its defaults), trafilatura_recall (favor_recall), resiliparse "
        "(extract_plain_text main_content=True, faster) or resiliparse_all (whole page text)")
    min_chars: int = Field(200, ge=0, description="pages whose extracted main text has fewer characters are "
                           "Dropped(too_short)")
    max_record_bytes: int = Field(64 << 20, ge=1024, description="records with a larger Content-Length are "
                                  "Quarantined(record_too_large) and skipped without being read into memory")


# --------------------------------------------------------------------------------------------------- extraction


def _trafilatura(mode: str) -> Callable[[str], str]:
    import trafilatura

    flags = {"precision": {"favor_precision": True}, "recall": {"favor_recall": True}}.get(mode, {})

    def extract(html: str) -> str:
        return trafilatura.extract(html, include_comments=False, include_tables=False, deduplicate=False,
                                   **flags) or ""

    return extract


def _resiliparse(main_content: bool) -> Callable[[str], str]:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    def extract(html: str) -> str:
        return extract_plain_text(HTMLTree.parse(html), main_content=main_content, alt_texts=False,
                                  links=False, form_fields=False, noscript=False) or ""

    return extract


def make_extractor(name: ExtractorName) -> Callable[[str], str]:
    """The function html -> main text (paragraphs separated by newlines) for an extractor name."""
    return {
        "trafilatura": lambda: _trafilatura("default"),
        "trafilatura_precision": lambda: _trafilatura("precision"),
        "trafilatura_recall": lambda: _trafilatura("recall"),
        "resiliparse": lambda: _resiliparse(True),
        "resiliparse_all": lambda: _resiliparse(False),
    }[name]()


def paragraphs_of(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ page metadata


def normalise_lang(value: str | None) -> str | None:
    """'en-US' -> 'en', 'zh_Hans' -> 'zh', 'ENG' -> 'eng'; anything not a 2-3 letter primary subtag -> None."""
    if not value:
        return None
    primary = re.split(r"[-_]", value.strip().split(",")[0].strip())[0].lower()
    return primary if re.fullmatch(r"[a-z]{2,3}", primary) else None


def _iso_date(value: str) -> str | None:
    value = value.strip()
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).isoformat()
    except ValueError:
        # "2023-11-06T12:00:00.000-0500" and similar: keep the calendar date, which is what matters downstream
        m = re.match(r"(\d{4}-\d{2}-\d{2})", value)
        return m.group(1) if m else None


def page_metadata(html: str) -> dict[str, str | None]:
    """title, publish date (ISO 8601 or None) and declared language of an HTML page."""
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(html)
    title = (tree.title or "").strip() or None
    root = tree.document.query_selector("html") if tree.document is not None else None
    lang = (root.getattr("lang") or root.getattr("xml:lang")) if root is not None else None
    date = None
    for meta in tree.document.query_selector_all("meta[content]") if tree.document is not None else []:
        names = {(meta.getattr(a) or "").strip().lower() for a in ("property", "name", "itemprop")}
        if not title and "og:title" in names:
            title = meta.getattr("content").strip() or None
        if date is None and names & set(_DATE_META):
            date = _iso_date(meta.getattr("content") or "")
    if date is None:
        m = re.search(r'"datePublished"\s*:\s*"([^"]+)"', html)
        date = _iso_date(m.group(1)) if m else None
    return {"title": title, "date": date, "lang": lang}


# ------------------------------------------------------------------------------------------------------ framing


class _Stream:
    """Line/block reads with push-back over a (possibly gzip) binary stream, counting records for messages."""

    def __init__(self, raw: BinaryIO, name: str):
        self.raw, self.name, self.pushed, self.records = raw, name, b"", 0

    def _wrap(self, fn):
        try:
            return fn()
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
            offset = self.compressed_offset()
            at = f" (at byte {offset:,} of the file)" if offset is not None else ""
            raise CorruptInput(f"{self.name}: corrupt or truncated gzip after {self.records} WARC records{at}: "
                               f"{type(e).__name__}: {e}",
                               reason="truncated_gzip" if isinstance(e, EOFError) else "corrupt_gzip",
                               file=self.name, records_read=self.records, offset=offset) from None

    def compressed_offset(self) -> int | None:
        """Bytes of the file read so far (for a gzip file: compressed bytes, read ahead in small blocks)."""
        inner = getattr(self.raw, "fileobj", self.raw)
        try:
            return inner.tell()
        except (OSError, ValueError):
            return None

    def readline(self) -> bytes:
        if self.pushed:
            i = self.pushed.find(b"\n")
            if i >= 0:
                line, self.pushed = self.pushed[: i + 1], self.pushed[i + 1 :]
                return line
            line, self.pushed = self.pushed, b""
            return line + self._wrap(self.raw.readline)
        return self._wrap(self.raw.readline)

    def read(self, n: int) -> bytes:
        head, self.pushed = self.pushed[:n], self.pushed[n:]
        return head + (self._wrap(lambda: self.raw.read(n - len(head))) if n > len(head) else b"")

    def skip(self, n: int, keep: int = 0) -> tuple[int, bytes | None]:
        """Read past `n` bytes without holding them: (bytes there were, the bytes from the first record start in
        them on when there is one and they are at most `keep` bytes, else None)."""
        skipped, tail, rest = 0, b"", None
        while skipped < n:
            chunk = self.read(min(1 << 20, n - skipped))
            if not chunk:
                break
            skipped += len(chunk)
            if rest is None and tail is not None:
                window = tail + chunk
                found = _NEXT_RECORD.search(window)
                rest, tail = ([window[found.start(1):]], None) if found else (None, window[-16:])
            elif rest is not None:
                rest.append(chunk)
                if sum(map(len, rest)) > keep:
                    rest = None  # too much to hold: skipped as the record it claims to be
        return skipped, b"".join(rest) if rest is not None else None

    def push_back(self, data: bytes) -> None:
        self.pushed = data + self.pushed


def _open(path: remote.Location, block_size: int = remote.STREAM_BLOCK) -> BinaryIO:
    """The file's (decompressed) bytes; a local path on plain open()/gzip.open(), a URL streamed."""
    gzipped = remote.read_range(path, 0, 2) == b"\x1f\x8b"
    if not remote.is_url(path):
        return gzip.open(path, "rb") if gzipped else open(path, "rb")
    raw = remote.open_binary(path, block_size)
    if not gzipped:
        return io.BufferedReader(raw)  # a bounded, buffered readline over the store's file
    stream = gzip.GzipFile(fileobj=raw, mode="rb")
    stream.myfileobj = raw  # GzipFile closes its `myfileobj` (what gzip.open sets for a file it opened itself)
    return stream


def validate_file(path: remote.Location) -> None:
    """Cheap up-front check: the file exists, is not empty, and starts with a WARC version line (a URL: a few
    small range reads)."""
    if not remote.is_url(path):
        path = remote.local_path(path)
    if not remote.is_file(path):
        raise InputError(f"{path}: no such file")
    if remote.size(path) == 0:
        raise InputError(f"{path}: empty file, not a WARC (0 records read)")
    with _open(path, block_size=256 << 10) as raw:
        first = _Stream(raw, str(path)).readline()
    if not _WARC_VERSION_LINE.match(first):
        if (kind := compression_by_signature(first)) is not None:
            raise InputError(f"{path}: the file is {kind}-compressed; a WARC file is read plain or gzip-compressed "
                             f"(.warc, .warc.gz): decompress it first, or recompress it with gzip")
        raise InputError(f"{path}: not a WARC file: first line is {first[:60]!r}, expected 'WARC/1.0' or "
                         f"'WARC/1.1' (0 records read)")


def _parse_headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            headers.setdefault(name.strip().lower(), value.strip())
    return headers


def _records(stream: _Stream, name: str, max_record_bytes: int) -> Iterator[tuple[dict, bytes | None, str | None]]:
    """(WARC headers, block, problem) per record; block None with a problem for a record that cannot be used."""
    while True:
        line = stream.readline()
        while line and _is_blank(line):
            line = stream.readline()
        if not line:
            return
        if not _WARC_VERSION_LINE.match(line):
            offset = stream.compressed_offset()
            near = f" near byte {offset:,} of the file" if offset is not None else ""
            raise CorruptInput(f"{name}: not a WARC file after {stream.records} records: expected a 'WARC/1.x' line"
                               f"{near}, got {line[:60]!r}", reason="bad_warc_framing",
                               file=name, records_read=stream.records, offset=offset)
        header_lines = []
        while (line := stream.readline()) and not _is_blank(line):
            header_lines.append(line.rstrip(b"\r\n"))
        headers = _parse_headers(header_lines)
        stream.records += 1
        length_text = headers.get("content-length", "")
        if not length_text.isdigit():
            yield headers, None, f"bad_length: Content-Length {length_text!r} is not a number"
            _resync(stream)
            continue
        length = int(length_text)
        if length > max_record_bytes:
            got, rest = stream.skip(length, keep=max_record_bytes)
            if got < length and rest is not None:  # the file ends inside it, a record starts inside: a wrong length
                stream.push_back(rest)
                yield headers, None, f"bad_length: Content-Length {length} runs into the next record and " \
                                     f"{length - got} bytes past the end of the file"
                continue
            yield headers, None, f"record_too_large: Content-Length {length} > max_record_bytes {max_record_bytes}"
            if got < length:
                return
            continue
        block = stream.read(length)
        trailer = stream.read(4) if len(block) == length else b""
        if trailer == b"\r\n\r\n" or trailer.startswith(b"\n\n"):  # a WARC written with LF line ends: LF LF
            stream.push_back(trailer[2:] if trailer[0:1] == b"\n" else b"")
            yield headers, block, None
            continue
        # Content-Length too long: the next record starts inside the block (which may run past the end of the file:
        # the records after this one are read all the same). Too short: the block goes on.
        nxt = _NEXT_RECORD.search(block + trailer)
        if nxt is not None:
            stream.push_back((block + trailer)[nxt.start(1):])
            runs = (f"into the next record and {length - len(block)} bytes past the end of the file"
                    if len(block) < length else f"{length + 4 - nxt.start(1)} bytes into the next record")
            yield headers, None, f"bad_length: Content-Length {length} runs {runs}"
        elif len(block) < length:
            yield headers, None, f"bad_length: file ends {length - len(block)} bytes before the declared " \
                                 f"Content-Length {length}"
            return
        else:
            stream.push_back(trailer)
            yield headers, None, f"bad_length: block of Content-Length {length} is not followed by CRLF CRLF"
            _resync(stream)


def _is_blank(line: bytes) -> bool:
    """A line holding only its line end (CR LF, LF, CR CR LF)."""
    return not line.strip(b"\r\n")


def _resync(stream: _Stream) -> None:
    """Skip to the next 'WARC/1.x' line (pushed back, so the next record reads normally)."""
    while line := stream.readline():
        if _WARC_VERSION_LINE.match(line):
            stream.push_back(line)
            return


# ------------------------------------------------------------------------------------------------------- records


def _split_http(block: bytes) -> tuple[int, dict[str, str], bytes] | None:
    head, sep, body = block.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = block.partition(b"\n\n")
    lines = head.split(b"\n")
    m = re.match(rb"HTTP/\d(?:\.\d)? (\d{3})", lines[0]) if sep else None
    if m is None:
        return None
    return int(m.group(1)), _parse_headers([ln.rstrip(b"\r") for ln in lines[1:]]), body


def _charset_of(content_type: str, body: bytes) -> str | None:
    m = re.search(r"charset\s*=\s*[\"']?([\w.:-]+)", content_type, re.I)
    if m is None:
        m = re.search(rb"<meta[^>]+charset\s*=\s*[\"']?([\w.:-]+)", body[:4096], re.I)
        return m.group(1).decode("ascii").lower() if m else None
    return m.group(1).lower()


def _decode(body: bytes, content_type: str) -> tuple[str | None, str]:
    charset = _charset_of(content_type, body)
    if charset:
        try:
            return body.decode(charset), charset
        except LookupError:
            pass  # an unknown charset name is as good as none: detect
        except UnicodeDecodeError as e:
            return None, f"bytes invalid in the declared charset {charset} at offset {e.start}"
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        from charset_normalizer import from_bytes

        best = from_bytes(body).best()
        if best is None:
            return None, "no charset declared, not UTF-8, and no charset detected"
        return str(best), best.encoding


def _zlib_header(body: bytes) -> bool:
    """Whether `body` starts with a zlib header (RFC 1950; HTTP's deflate): method 8, a window of at most 32 KiB, a
    check sum of the two bytes divisible by 31. HTML never does: it starts with < or white space."""
    return len(body) > 2 and body[0] & 0x0F == 8 and body[0] >> 4 <= 7 and ((body[0] << 8) | body[1]) % 31 == 0


def _is_binary(body: bytes) -> bool:
    head = body[:4096]
    return head.startswith(_BINARY_MAGIC) or b"\x00" in head


def iter_records(path: remote.Location, source: int, display_name: str | None = None,
                 extractor: ExtractorName = "trafilatura_precision",
                 min_chars: int = 200, max_record_bytes: int = 64 << 20) -> Iterator[Document | Dropped | Quarantined]:
    """Stream the records of one WARC file (see the module docstring for what each becomes)."""
    if not remote.is_url(path):
        path = remote.local_path(path)
    name = display_name or str(path)
    validate_file(path)
    extract = make_extractor(extractor)
    with _open(path) as raw:
        stream = _Stream(raw, name)
        for ordinal, (headers, block, problem) in enumerate(_records(stream, name, max_record_bytes)):
            record_id = headers.get("warc-record-id", "").strip("<>")
            url = headers.get("warc-target-uri", "")

            def quarantined(reason: str, detail: str) -> Quarantined:
                return Quarantined(source, name, ordinal, record_id or url, reason, detail)

            if problem is not None:
                reason, _, detail = problem.partition(": ")
                yield quarantined(reason, detail)
                continue
            if headers.get("warc-type") != "response":
                yield Dropped(source, ordinal, "not_response")
                continue
            http = _split_http(block)
            if http is None:
                yield quarantined("bad_http_headers", f"block does not start with an HTTP status line: {block[:40]!r}")
                continue
            status, http_headers, body = http
            if status != 200:
                yield Dropped(source, ordinal, "http_status")
                continue
            content_type = http_headers.get("content-type", "")
            mime = content_type.split(";")[0].strip().lower()
            sniffed_html = not mime and re.match(rb"\s*(<!doctype html|<html)", body[:512], re.I) is not None
            if mime not in _HTML_TYPES and not sniffed_html:
                yield Dropped(source, ordinal, "not_html")
                continue
            if not url:  # the document's identity: every response without one would be a duplicate of the first
                yield quarantined("missing_uri", "an HTML response without a WARC-Target-URI")
                continue
            encoding = http_headers.get("content-encoding", "").lower()
            if encoding in ("gzip", "x-gzip", "deflate") and (body[:2] == b"\x1f\x8b" or _zlib_header(body)):
                # Common Crawl usually stores the decoded payload but keeps the header; decode only real gzip / zlib
                try:
                    body = zlib.decompress(body, 47)
                except zlib.error as e:
                    yield quarantined("bad_content_encoding", f"Content-Encoding {encoding}: {e}")
                    continue
            if _is_binary(body):
                if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):  # br, zstd, ... stored as sent
                    yield quarantined("bad_content_encoding", f"Content-Encoding {encoding}: the payload is stored "
                                      f"encoded, and this reader decodes only gzip and deflate")
                else:
                    yield quarantined("binary_payload", f"declared {mime or 'HTML (sniffed)'} but the payload "
                                      f"starts with {body[:8]!r} / contains NUL bytes")
                continue
            html, how = _decode(body, content_type)
            if html is None:
                yield quarantined("undecodable", how)
                continue
            try:
                text = extract(html)
                meta = page_metadata(html)
            except Exception as e:  # noqa: BLE001 — any extractor failure is this page's problem, not the run's
                yield quarantined("extraction_failed", f"{extractor}: {type(e).__name__}: {e}")
                continue
            paragraphs = paragraphs_of(text)
            if sum(len(p) for p in paragraphs) < min_chars:
                yield Dropped(source, ordinal, "too_short")
                continue
            yield Document(
                source=source, ordinal=ordinal, key=url, paragraphs=paragraphs,
                lang=normalise_lang(meta["lang"]) or normalise_lang(http_headers.get("content-language")),
                meta={"url": url, "domain": (urlsplit(url).hostname or "").lower(),
                      "date": meta["date"] or headers.get("warc-date"), "title": meta["title"],
                      "warc_record_id": record_id},
            )


__all__ = ["WarcOptions", "iter_records", "validate_file", "make_extractor", "page_metadata", "normalise_lang",
           "paragraphs_of"]
