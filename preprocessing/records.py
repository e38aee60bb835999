"""The records every source reader yields, whatever the input format: `Document` (monolingual text, already out
of its markup), `SentencePair` (an aligned translation pair, for TLM), `Dropped` (a well-formed record that is not a document by
design — a WARC request record, an HTTP 404, a fuzzy .po entry — counted by reason) and `Quarantined` (a
malformed record that could not be used, with where it came from and why).

A reader is a function `iter_records(path, source, display_name=None, **options)` that streams these records in
file order (bounded memory), raises `InputError` naming the file for file-level problems (unreadable, wrong
encoding, truncated compression) and yields `Quarantined` for record-level ones. The pipeline cleans, filters,
deduplicates and splits every `Document` the same way, whichever reader made it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .sources.wikipedia import Quarantined

__all__ = ["Document", "SentencePair", "Dropped", "Quarantined", "print_records"]


@dataclass
class Document:
    """One document of plain text, as read from its source (not yet normalised or filtered)."""

    source: int  # index of the input file in corpus.inputs
    ordinal: int  # record number within that file (0-based, file order)
    key: str  # stable identity inside the source: wiki title, WARC target URI, "line 17", a JSONL "id"
    paragraphs: list[str]  # plain-text paragraphs
    lang: str | None = None  # language code given by the source; None = unknown (detected later)
    meta: dict[str, Any] = field(default_factory=dict)  # JSON-able: url, domain, date, title, ...


@dataclass
class SentencePair:
    """A sentence (or short passage) and its translation, aligned by the source."""

    source: int
    ordinal: int
    key: str
    src_text: str
    tgt_text: str
    src_lang: str
    tgt_lang: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dropped:
    """A well-formed record that is deliberately not used (counted in the manifest as docs_dropped[reason])."""

    source: int
    ordinal: int
    reason: str  # snake_case, e.g. "not_response", "http_status", "not_html", "fuzzy"


def print_records(records: Iterable[Document | SentencePair | Dropped | Quarantined],
                  describe: Callable[[Any], str]) -> int:
    """A reader's records as its debug command prints them (`python -m preprocessing.sources.text FILE`): one
    tab-separated line each, the ordinal then `describe(record)` for a document or pair, `dropped REASON` or
    `quarantined ID REASON DETAIL`. Returns 0, the command's exit status."""
    for rec in records:
        if isinstance(rec, Dropped):
            print(f"{rec.ordinal}\tdropped\t{rec.reason}")
        elif isinstance(rec, Quarantined):
            print(f"{rec.ordinal}\tquarantined\t{rec.record_id}\t{rec.reason}\t{rec.detail}")
        else:
            print(f"{rec.ordinal}\t{describe(rec)}")
    return 0
