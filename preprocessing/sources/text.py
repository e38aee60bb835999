"""Plain-text and JSONL readers: local files or fsspec URLs, optionally compressed -> `Document`s.

    from preprocessing.sources.text import iter_records, validate_file, TextOptions
    for rec in iter_records("gs://bucket/news.jsonl.zst", source=0, fmt="jsonl", options=TextOptions()): ...

Formats:
- `text`: documents separated by blank (whitespace-only) lines; every non-empty line of a document is one
  paragraph. `Document(key="line N")`, N = the 1-based line number of the document's first line; `lang=None`,
  `meta={}`.
- `jsonl`: one JSON object per line. `text` (options.text_field, a string) is split into paragraphs at line breaks
  (blank lines and single newlines alike; empty lines dropped, each line stripped). `id` (options.id_field, a string
  or an integer) becomes the key and meta["id"] (absent: key "line N"). `lang` (options.lang_field) becomes
  `Document.lang` through `preprocessing.langcodes.normalise_lang_code` (`en-GB` -> `en`, `cmn` -> `zh`); a value
  that is not a language code leaves `lang=None` and is kept as meta["lang_given"]. `url`, `title`, `date` and
  every other field whose value is a JSON scalar (string, number, true/false, null) go to `meta` in file order
  (options.keep_fields limits which); objects and arrays are left out. With a kept `url`, meta["domain"] is its host.
  Blank lines are not records (skipped, not counted).

What each record becomes besides a `Document`:
- `Quarantined("too_long")` — a text document, or a JSONL line (the whole JSON line), of more than
  `max_record_chars` characters. A line of more than 4 x max_record_chars bytes (UTF-8 needs at most 4 bytes a
  character, so it is too long whatever it holds) is skipped in 1 MiB chunks without being read into memory.
- `Quarantined("invalid_utf8")` — bytes that do not decode (each line is decoded by the reader itself; the detail
  gives the byte offset in the decompressed file); with another `encoding`, `Quarantined("undecodable")`.
- JSONL only: `invalid_json` (also: a lone UTF-16 surrogate escape such as `\\ud800` in any string, which is no
  character), `not_an_object` (an array, a string, ...), `missing_text` (no text field, or not a string), `bad_id`
  (an id that is not a string or an integer).
- `Dropped("empty_text")` — a JSONL object whose text has no non-blank line: well-formed, nothing to train on
  (dropped and counted like WARC's too_short, not quarantined: it is not a defect of the file). Text documents
  cannot be empty by construction.

File-level problems raise `InputError` naming the file (see `preprocessing.sources.lines`): missing, 0 bytes, only
blank lines (before the job, by validate_file; iter_records too, for a direct caller),
corrupt or truncated gzip/bz2/xz/zstd (when reading reaches the damage, with the line count), UTF-16/32 files.

    python -m preprocessing.sources.text FILE [text|jsonl]     # one line per record
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from bertfactory.config import StrictModel
from bertfactory.errors import InputError

from ..langcodes import normalise_lang_code
from ..records import Document, Dropped, Quarantined, print_records
from .lines import LineReader, open_input

TextFormat = Literal["text", "jsonl"]
_MAX_BYTES_PER_CHAR = 4  # UTF-8; single-byte encodings need less, so the byte bound is safe for them too
_SNIFF_LINE_BYTES = 4 << 20
_SURROGATE = re.compile("[\ud800-\udfff]")


class TextOptions(StrictModel):
    """How text and JSONL inputs become documents."""

    max_record_chars: int = Field(1_000_000, ge=1, description="a text document or JSONL line with more characters "
                                  "is Quarantined(too_long); lines over 4x this many bytes are skipped unread")
    encoding: str = Field("utf-8", description="text encoding of the files (ASCII-compatible: utf-8, latin-1, "
                          "cp1252, ...); UTF-16/32 files are refused with the conversion to run")
    text_field: str = Field("text", min_length=1, description="JSONL: the field holding the document text")
    id_field: str = Field("id", min_length=1, description="JSONL: the field holding the document id (the key)")
    lang_field: str = Field("lang", min_length=1, description="JSONL: the field holding the language code")
    keep_fields: list[str] | None = Field(None, description="JSONL: fields copied to Document.meta when their value "
                                          "is a JSON scalar; null = every scalar field")

    @field_validator("encoding")
    @classmethod
    def _ascii_compatible(cls, value: str) -> str:
        try:
            name = codecs.lookup(value).name
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        if "\n".encode(name) != b"\n" or "a".encode(name) != b"a":
            raise ValueError(f"{value!r} is not ASCII-compatible (lines are split on the byte 0x0A); convert the "
                             f"files to UTF-8")
        return name


def validate_file(path: str | Path, fmt: TextFormat = "text", options: TextOptions | None = None) -> None:
    """Cheap up-front check: the file exists, is not empty, decompresses, is not UTF-16/32, has a non-blank line
    (read up to the first one), and (jsonl) that line is a JSON object (read in options.encoding; bytes that do not
    decode are the record's problem, quarantined by iter_records, not the file's). Raises InputError naming the
    file."""
    name = str(path)
    encoding = (options or TextOptions()).encoding
    with open_input(path, name) as stream:
        lines = LineReader(stream, name, _SNIFF_LINE_BYTES)
        for line in lines:
            if line.data is None or not line.data.strip():
                if line.data is None:
                    return  # a huge first line is a record problem, found by iter_records
                continue
            if fmt != "jsonl":
                return
            try:
                value = json.loads(line.data.decode(encoding, errors="replace"))
            except ValueError as e:
                raise InputError(f"{name}: line {line.number} is not JSON ({e}); expected JSON Lines (one object "
                                 f"per line) — is this a plain-text file (format: text)?") from None
            if not isinstance(value, dict):
                raise InputError(f"{name}: line {line.number} is a JSON {type(value).__name__}, not an object; "
                                 f"expected JSON Lines with one object per line")
            return
        raise InputError(f"{name}: no text: its {lines.lines_read} line(s) are all blank")


class _Decoder:
    def __init__(self, encoding: str):
        self.encoding = encoding
        self.reason = "invalid_utf8" if encoding == "utf-8" else "undecodable"

    def __call__(self, data: bytes, offset: int) -> tuple[str | None, str]:
        try:
            return data.decode(self.encoding), ""
        except UnicodeDecodeError as e:
            return None, (f"bytes {data[e.start:e.start + 4]!r} at byte offset {offset + e.start} are not valid "
                          f"{self.encoding} ({e.reason})")


def _text_documents(lines: LineReader, source: int, name: str,
                    options: TextOptions) -> Iterator[Document | Quarantined]:
    decode = _Decoder(options.encoding)
    ordinal = 0
    first: int | None = None  # line number of the current document's first line
    paragraphs: list[str] = []
    chars = 0
    problem: tuple[str, str] | None = None

    def finish() -> Document | Quarantined:
        key = f"line {first}"
        if problem is not None:
            return Quarantined(source, name, ordinal, key, problem[0], problem[1])
        return Document(source=source, ordinal=ordinal, key=key, paragraphs=paragraphs, lang=None, meta={})

    for line in lines:
        if line.data is None:
            if first is None:
                first = line.number
            if problem is None:
                problem = ("too_long", f"line {line.number} alone has {line.length} bytes, more than "
                           f"{_MAX_BYTES_PER_CHAR} x max_record_chars {options.max_record_chars}")
                paragraphs = []
            continue
        if problem is not None and line.data.strip():
            continue  # the document is already lost: skip to its end without decoding
        text, why = decode(line.data, line.offset)
        if text is None:
            if first is None:
                first = line.number
            problem, paragraphs = (decode.reason, f"line {line.number}: {why}"), []
            continue
        if not text.strip():
            if first is not None:
                yield finish()
                ordinal += 1
                first, paragraphs, chars, problem = None, [], 0, None
            continue
        if first is None:
            first = line.number
        chars += len(text)
        if chars > options.max_record_chars:
            problem, paragraphs = ("too_long", f"more than max_record_chars {options.max_record_chars} characters "
                                   f"by line {line.number}"), []
            continue
        paragraphs.append(text.strip())
    if first is not None:
        yield finish()


def _lone_surrogate(value: object, where: str = "the line") -> str | None:
    """Where a decoded JSON value holds a lone UTF-16 surrogate, None when nowhere. JSON lets a `\\ud800` escape
    without its pair through (RFC 8259 8.2), and Python's json decodes it to a code point that is no character: no
    UTF-8 can hold it, so the document would stop the job where it is first written."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return None if found is None else f"{where} holds the escape \\u{ord(found.group()):04x}, a lone UTF-16 " \
                                          f"surrogate (no character; not valid Unicode)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        inner = f"{where}[{key!r}]" if where != "the line" else f"field {key!r}"
        found = _lone_surrogate(key, f"a field name in {where}") if isinstance(key, str) else None
        if (found := found or _lone_surrogate(item, inner)) is not None:
            return found
    return None


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _json_documents(lines: LineReader, source: int, name: str,
                    options: TextOptions) -> Iterator[Document | Dropped | Quarantined]:
    decode = _Decoder(options.encoding)
    reserved = {options.text_field, options.id_field, options.lang_field}
    ordinal = -1
    for line in lines:
        key = f"line {line.number}"
        if line.data is not None and not line.data.strip():
            continue
        ordinal += 1

        def quarantined(reason: str, detail: str, record_key: str = key) -> Quarantined:
            return Quarantined(source, name, ordinal, record_key, reason, detail)

        if line.data is None:
            yield quarantined("too_long", f"line of {line.length} bytes, more than {_MAX_BYTES_PER_CHAR} x "
                              f"max_record_chars {options.max_record_chars}; skipped unread")
            continue
        raw, why = decode(line.data, line.offset)
        if raw is None:
            yield quarantined(decode.reason, why)
            continue
        if len(raw) > options.max_record_chars:
            yield quarantined("too_long", f"line of {len(raw)} characters > max_record_chars "
                              f"{options.max_record_chars}")
            continue
        try:  # a byte-order mark starts every file it was written with, also one concatenated (cat a b > all)
            obj = json.loads(raw.removeprefix("\ufeff"))
        except ValueError as e:
            yield quarantined("invalid_json", str(e))
            continue
        if not isinstance(obj, dict):
            yield quarantined("not_an_object", f"a JSON {type(obj).__name__}, expected an object")
            continue
        if "\\u" in raw and (where := _lone_surrogate(obj)) is not None:
            yield quarantined("invalid_json", where)
            continue
        record_id = obj.get(options.id_field)
        if record_id is not None and (isinstance(record_id, bool) or not isinstance(record_id, (str, int))):
            yield quarantined("bad_id", f"{options.id_field!r} is a {type(record_id).__name__}, expected a string "
                              f"or an integer")
            continue
        if record_id is not None:
            key = str(record_id)
        text = obj.get(options.text_field)
        if not isinstance(text, str):
            what = "absent" if options.text_field not in obj else f"a {type(text).__name__}, not a string"
            yield quarantined("missing_text", f"field {options.text_field!r} is {what}", key)
            continue
        paragraphs = [p.strip() for p in text.splitlines() if p.strip()]
        if not paragraphs:
            yield Dropped(source, ordinal, "empty_text")
            continue
        meta: dict = {}
        if record_id is not None:
            meta["id"] = record_id
        given = obj.get(options.lang_field)
        lang = normalise_lang_code(given) if isinstance(given, str) else None
        if given is not None and lang is None:
            meta["lang_given"] = given if _scalar(given) else json.dumps(given, sort_keys=True)
        for field, value in obj.items():
            if field in reserved or not _scalar(value):
                continue
            if options.keep_fields is None or field in options.keep_fields:
                meta[field] = value
        if isinstance(meta.get("url"), str) and "domain" not in meta:
            meta["domain"] = (urlsplit(meta["url"]).hostname or "").lower()
        yield Document(source=source, ordinal=ordinal, key=key, paragraphs=paragraphs, lang=lang, meta=meta)


def iter_records(path: str | Path, source: int, fmt: TextFormat = "text", options: TextOptions | None = None,
                 display_name: str | None = None) -> Iterator[Document | Dropped | Quarantined]:
    """Stream the records of one text or JSONL file, local or fsspec URL (see the module docstring)."""
    if fmt not in ("text", "jsonl"):
        raise ValueError(f"fmt must be 'text' or 'jsonl', got {fmt!r}")
    options = options or TextOptions()
    name = display_name or str(path)
    reader = _text_documents if fmt == "text" else _json_documents
    with open_input(path, name) as stream:
        lines = LineReader(stream, name, _MAX_BYTES_PER_CHAR * options.max_record_chars)
        records = 0
        for record in reader(lines, source, name, options):
            records += 1
            yield record
    if not records:  # only blank lines: as empty as a file of 0 bytes, refused like one
        raise InputError(f"{name}: no text: its {lines.lines_read} line(s) are all blank")


def _main(argv: list[str]) -> int:
    path, fmt = argv[0], (argv[1] if len(argv) > 1 else "text")
    return print_records(iter_records(path, 0, fmt),  # type: ignore[arg-type]
                         lambda doc: f"document\t{doc.key}\t{len(doc.paragraphs)} paragraphs\t{doc.lang}")


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

__all__ = ["TextOptions", "TextFormat", "iter_records", "validate_file"]
