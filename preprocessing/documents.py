"""The documents pipeline (Beam): every input file of any format -> clean, filtered, deduplicated documents split
into sentences (or clean sentence pairs, for parallel corpora), one JSON line each, plus outcome counts and the
quarantine. The first of the stage's two pipelines (preprocessing.pipeline runs it, then trains the tokenizer).

    files -> work items (a file, or a chunk of a multistream dump) -> Reshuffle
          -> ReadRecords (one reader per format, preprocessing.sources; streamed per item; each record spilled)
          -> Reshuffle of the records' references (spread the expensive part over the workers) -> LoadRecords
          -> ToDocument (format-specific: wikitext -> paragraphs for Wikipedia; nothing for the others)
          -> CleanDocument (preprocessing.filters: normalise, boilerplate and quality rules; language from the
             source, else detected (preprocessing.langid); sentence splitting per language; held-out split)
          -> SpillDocs (the record's JSON line written to a spill file; on goes a stub: identity, spill reference,
             tally entry and dedup features)
          -> one stub per doc_id (a second record of the same identity is quarantined: duplicate_key)
          -> Deduplicate (preprocessing.dedup: exact + MinHash LSH near-duplicates, deterministic keeper)
          -> ReadDocs (the kept documents' lines back from the spill files) -> docs JSONL

Document text crosses no shuffle (preprocessing.text_spill): a local runner keeps every shuffled PCollection in the
driver and hands a worker its whole share of a stage's input at once, so text in the groups made both grow with
the corpus. Only references and stubs (a few hundred bytes a document) go through the Reshuffle, the doc_id groups
and the dedup join.

corpus.documents raw (comparisons on equal work with tools that tokenise text as it is): CleanDocument applies
none of the filters (no normalisation, boilerplate or quality rule, language detection or minimum size) and the
Deduplicate step is left out of the graph (no dedup index, no duplicates); reading, sentence splitting, the
held-out split, dropping empty documents and the one-record-per-identity rule stay. Raw documents whose rows are
packed by tokens (preprocess.instances.packing tokens, which cuts rows wherever they are full) are not split into
sentences either (`sentence_ends_needed`): each paragraph is one segment, its text as read with the whitespace at
its edges removed.

Every record read is counted exactly once as kept, dropped (by reason) or quarantined (by reason), per source
file; the counts land in the manifest. Nothing depends on bundle order or worker count: the kept document of a
duplicate group is the one with the smallest (source, ordinal).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Iterator

import apache_beam as beam
from apache_beam.io import WriteToText
from apache_beam.pvalue import TaggedOutput

from . import exchange, hashing
from .config import CorpusConfig
from .dedup_config import DedupConfig
from .records import Document, Dropped, Quarantined, SentencePair
from .sentences import split_sentences
from .sinks import WriteBundleParts, WriteSmallLines
from .text_spill import SpillReader, SpillWriter
from .worker_errors import worker_input_error

# outcome strings: "read", "kept", "dropped:<reason>", "quarantined:<reason>", "duplicate:<kind>"
READ, KEPT = "read", "kept"


def _outcome(source: int, what: str) -> TaggedOutput:
    return TaggedOutput("outcome", json.dumps([source, what]))


def _quarantine(record: Quarantined) -> TaggedOutput:
    return TaggedOutput("quarantine", json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False))


def sentence_ends_needed(corpus: CorpusConfig, packing: str) -> bool:
    """Whether the documents stage splits paragraphs into sentences for a job whose instances are packed by
    `packing` (preprocess.instances.packing). Raw documents packed by tokens never use a sentence end (rows are cut
    by count, and raw mode applies no minimum sentence count), so there every paragraph stays one segment; the
    split costs ~0.2 CPU-s per 10 MB of English text. Cleaned documents are always split: min_doc_sentences
    counts sentences whatever the packing."""
    return not (corpus.documents == "raw" and packing == "tokens")


def spill_dir(work: Path | str) -> str:
    """Where the documents pipeline spills records and documents (preprocessing.text_spill): inside the staging
    work directory (a path or a URL: preprocessing.exchange), removed with it."""
    return exchange.join(work, ".spill-documents")


class ReadRecords(beam.DoFn):
    """(source index, path, chunk) -> every record of the file (or of that chunk of it). Documents and pairs are
    pickled into a spill file and go on as their reference (preprocessing.text_spill); drops and quarantined
    records are counted (and quarantined records written out) here."""

    def __init__(self, corpus: CorpusConfig, spill_to: str):
        self.corpus = corpus
        self.spill_to = spill_to

    def setup(self) -> None:
        self.spill = SpillWriter(self.spill_to, "records")

    def finish_bundle(self) -> None:
        self.spill.close()  # complete before the stage after the Reshuffle reads it

    def process(self, item: tuple[int, str, list[int] | None]) -> Iterator:
        from .sources import read_records
        from .sources.corrupt import CorruptInput
        from bertfactory.errors import InputError

        source, path, chunk = item
        try:
            for record in read_records(self.corpus, path, source, chunk):
                yield _outcome(source, READ)
                if isinstance(record, Quarantined):
                    yield _outcome(source, f"quarantined:{record.reason}")
                    yield _quarantine(record)
                elif isinstance(record, Dropped):
                    yield _outcome(source, f"dropped:{record.reason}")
                else:  # written by this job into its own staging directory, read back by LoadRecords only
                    yield self.spill.write(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        except CorruptInput as err:
            # the file broke part way: its unreadable rest is one record, read and quarantined (so docs_read = kept
            # + dropped + quarantined still holds); the records read before the break went on above. The driver
            # fails the job past corpus.max_bad_inputs (preprocessing.bad_inputs)
            yield _outcome(source, READ)
            yield _outcome(source, f"quarantined:{err.reason}")
            yield _quarantine(Quarantined(**err.to_quarantine(source)))
        except InputError as err:
            raise worker_input_error(str(err)) from None


class LoadRecords(beam.DoFn):
    """A record's spill reference (ReadRecords) -> the record."""

    def setup(self) -> None:
        self.reader = SpillReader()

    def finish_bundle(self) -> None:
        self.reader.close()

    def process(self, ref) -> Iterator:
        yield pickle.loads(self.reader.read(ref))


class ToDocument(beam.DoFn):
    """Format-specific conversion into a Document: MediaWiki pages become paragraphs of plain text here (the
    expensive part of reading a dump, so it runs after the Reshuffle); other readers already yield Documents."""

    def __init__(self, corpus: CorpusConfig, files: list[str]):
        self.corpus = corpus
        self.files = files

    def process(self, record) -> Iterator:
        from .sources.wikipedia import Page

        if not isinstance(record, Page):
            yield record
            return
        c = self.corpus
        if record.namespace not in c.namespaces:
            yield _outcome(record.source, "dropped:namespace")
            return
        if record.redirect:
            yield _outcome(record.source, "dropped:redirect")
            return
        from .clean import wikitext_to_paragraphs

        try:
            paragraphs = wikitext_to_paragraphs(record.text, c.drop_sections, c.keep_lists, c.min_paragraph_chars)
        except Exception as err:  # mwparserfromhell failing on one page must not stop the corpus
            bad = Quarantined(record.source, self.files[record.source], record.ordinal, f"id={record.page_id}",
                              "wikitext_error", f"{type(err).__name__}: {err}")
            yield _outcome(record.source, "quarantined:wikitext_error")
            yield _quarantine(bad)
            return
        yield Document(source=record.source, ordinal=record.ordinal, key=record.title, paragraphs=paragraphs,
                       lang=c.lang if c.lang not in (None, "auto") else None,
                       meta={"title": record.title, "page_id": record.page_id, "namespace": record.namespace})


def document_id(corpus: CorpusConfig, doc: Document | SentencePair, files: list[str]) -> int:
    """The stable identity of a document. Wikipedia: namespace + title (unique in a wiki, unchanged across
    dumps); WARC: the URL; JSONL with an `id`: that id; anything else: the file's name + the record's key (a line
    number means nothing across files)."""
    if corpus.format == "wikipedia":
        return hashing.doc_id(doc.meta.get("namespace", 0), doc.key)
    if corpus.format == "warc" or doc.meta.get("id") is not None:
        return hashing.hash64("doc", corpus.format, doc.key)
    return hashing.hash64("doc", corpus.format, Path(files[doc.source]).name, doc.key)


class CleanDocument(beam.DoFn):
    """Document -> a clean document record (paragraphs of sentences, language, held-out split), or a counted
    drop. SentencePair -> a clean pair record. With `sentence_ends` False (sentence_ends_needed) a paragraph is
    not split: it is one segment, its text with the whitespace at its edges removed."""

    def __init__(self, corpus: CorpusConfig, heldout_fraction: float, files: list[str], sentence_ends: bool = True):
        self.corpus = corpus
        self.heldout_fraction = heldout_fraction
        self.files = files
        self.sentence_ends = sentence_ends

    def setup(self) -> None:
        from .filters import clean_document, normalise_text
        from .langid import LanguageIdentifier

        self.clean_document = clean_document
        self.normalise_text = normalise_text
        self.raw = self.corpus.documents == "raw"
        detect = self.corpus.lang == "auto" and not self.raw
        self.identifier = LanguageIdentifier(self.corpus.langid) if detect else None

    def _language(self, text: str, given: str | None) -> tuple[str | None, float | None]:
        from .langcodes import normalise_lang_code

        if given:  # one code per language whatever the source wrote (eng, en-US, cmn_hans ...), as detection gives
            return normalise_lang_code(given) or given, None
        if self.corpus.lang not in (None, "auto"):
            return normalise_lang_code(self.corpus.lang) or self.corpus.lang, None
        if self.identifier is None or not text.strip():
            return None, None
        return self.identifier.detect(text)

    def process(self, record) -> Iterator:
        if isinstance(record, SentencePair):
            yield from self._pair(record)
            return
        doc: Document = record
        c = self.corpus
        if not any(p.strip() for p in doc.paragraphs):
            yield _outcome(doc.source, "dropped:empty")
            return
        sample = "\n".join(doc.paragraphs)[: c.langid.max_chars]
        lang, lang_prob = self._language(sample, doc.lang)
        if self.raw:
            paragraphs, reason = doc.paragraphs, None
        else:
            paragraphs, reason = self.clean_document(doc.paragraphs, lang, c.filters, lang_prob)
        if reason is not None:
            yield _outcome(doc.source, f"dropped:{reason}")
            if getattr(reason, "rule", None):  # the setting that applied (filters.DropReason)
                yield _outcome(doc.source, f"rule:{reason}:{reason.rule}")
            return
        if self.sentence_ends:
            sentences = [s for s in (split_sentences(p, lang) for p in paragraphs) if s]
        else:  # one segment a paragraph (raw documents packed by tokens)
            sentences = [[text] for text in (p.strip() for p in paragraphs) if text]
        if not sentences:
            yield _outcome(doc.source, "dropped:empty")
            return
        n_chars = sum(len(p) for p in paragraphs)
        n_sentences = sum(len(p) for p in sentences)
        if not self.raw and (n_chars < c.min_doc_chars or n_sentences < c.min_doc_sentences):
            yield _outcome(doc.source, "dropped:too_short")
            rule = (f"corpus.min_doc_chars={c.min_doc_chars}" if n_chars < c.min_doc_chars
                    else f"corpus.min_doc_sentences={c.min_doc_sentences}")
            yield _outcome(doc.source, f"rule:too_short:{rule}")
            return
        doc_id = document_id(c, doc, self.files)
        # Wikipedia: by title (the held-out set stays put across dumps); else by the document's identity (a key
        # like "line 1" repeats in every file)
        split_key = doc.key if c.format == "wikipedia" else f"doc:{doc_id}"
        split = "heldout" if hashing.is_heldout(split_key, self.heldout_fraction) else "train"
        yield doc_id, {"doc_id": doc_id, "key": doc.key, "title": doc.meta.get("title") or doc.key,
                       "source": doc.source, "ordinal": doc.ordinal, "split": split, "lang": lang,
                       "meta": doc.meta, "paragraphs": sentences}

    def _pair(self, pair: SentencePair) -> Iterator:
        src, tgt = pair.src_text, pair.tgt_text
        if not self.raw:
            src = self.normalise_text(src, self.corpus.filters)
            tgt = self.normalise_text(tgt, self.corpus.filters)
        if not src.strip() or not tgt.strip():
            yield _outcome(pair.source, "dropped:empty")
            return
        doc_id = hashing.hash64("pair", Path(self.files[pair.source]).name, pair.key, pair.src_lang, pair.tgt_lang)
        split = "heldout" if hashing.is_heldout(f"pair:{doc_id}", self.heldout_fraction) else "train"
        yield doc_id, {"kind": "pair", "doc_id": doc_id, "key": pair.key, "title": pair.key, "source": pair.source,
                       "ordinal": pair.ordinal, "split": split, "src": src, "tgt": tgt,
                       "src_lang": pair.src_lang, "tgt_lang": pair.tgt_lang, "meta": pair.meta}


class KeepFirstOfKey(beam.DoFn):
    """One record per doc_id: the first in input order (source, ordinal); the others are quarantined."""

    def __init__(self, files: list[str]):
        self.files = files

    def process(self, item: tuple[int, list[dict]]) -> Iterator:
        doc_id, docs = item
        docs = sorted(docs, key=lambda d: (d["source"], d["ordinal"]))
        keep = docs[0]
        for dup in docs[1:]:
            what = f"id={dup['meta']['page_id']}" if "page_id" in dup["meta"] else dup["key"]
            record = Quarantined(dup["source"], self.files[dup["source"]], dup["ordinal"], what, "duplicate_key",
                                 f"{dup['key']!r} already read as record {keep['ordinal']} of {self.files[keep['source']]}")
            yield _outcome(dup["source"], "quarantined:duplicate_key")
            yield _quarantine(record)
        yield doc_id, keep


class SpillDocs(beam.DoFn):
    """(doc_id, clean record) -> (doc_id, stub): the record's JSON line (the docs file's line, byte for byte) goes
    to a spill file; the stub holds what the steps before the docs file need: the identity KeepFirstOfKey reports
    (source, ordinal, key, page_id), the spill reference, the record's tally entry (document_results.tally_entry)
    and, when `dedup` is given, its dedup Member (computed here, where the text is)."""

    def __init__(self, spill_to: str, dedup: DedupConfig | None):
        self.spill_to = spill_to
        self.dedup = dedup

    def setup(self) -> None:
        self.spill = SpillWriter(self.spill_to, "docs")
        self.hasher = None
        if self.dedup is not None:
            from .minhash import MinHasher

            self.hasher = MinHasher(self.dedup.num_perm, self.dedup.seed)

    def finish_bundle(self) -> None:
        self.spill.close()

    def process(self, item) -> Iterator:
        from .dedup import document_member
        from .document_results import tally_entry

        doc_id, doc = item
        line = json.dumps(doc, sort_keys=True, ensure_ascii=False)
        meta = {"page_id": doc["meta"]["page_id"]} if "page_id" in doc["meta"] else {}
        yield doc_id, {"source": doc["source"], "ordinal": doc["ordinal"], "key": doc["key"], "meta": meta,
                       "text": self.spill.write(line.encode("utf-8")), "tally": tally_entry(doc),
                       "member": (document_member(doc_id, doc, self.dedup, self.hasher)
                                  if self.dedup is not None else None)}


class ReadDocs(beam.DoFn):
    """A kept document's stub (SpillDocs) -> its JSON line, read back from the spill file. Extra arguments are
    ignored: pipeline._one_job passes the instance plan as a side input only to keep this read out of the stage
    that makes the stubs, so that the local runner buffers the stubs between the stages, not the text."""

    def setup(self) -> None:
        self.reader = SpillReader()

    def finish_bundle(self) -> None:
        self.reader.close()

    def process(self, item, *after) -> Iterator[str]:
        _doc_id, stub = item
        yield self.reader.read(stub["text"]).decode("utf-8")


# Parts the kept documents' dedup entries are written in (merged and sorted by the driver afterwards).
INDEX_PARTS = 16


def _write_index_part(part: int, entries, directory: str, cfg) -> str:
    from .dedup_index import write_dedup_index

    location = exchange.join(directory, f"part-{part:05d}.arrow")
    write_dedup_index(sorted(entries, key=lambda e: int(e[0])), exchange.writable(location), cfg)
    exchange.put(location, keep=False)
    return location


def _line_sink(work: str, name: str):
    """The sink of a large line output (documents, quarantine, duplicates) into work/name: WriteToText on a
    shared disk, WriteBundleParts into a bucket (preprocessing.sinks says why)."""
    if exchange.is_remote(work):
        return WriteBundleParts(exchange.join(work, name))
    return WriteToText(str(Path(work) / name / "part"), file_name_suffix=".jsonl")


def build_documents_pipeline(pipeline, corpus: CorpusConfig, heldout_fraction: float, files: list[str],
                             work: Path | str, prior_index: str | None = None, sentence_ends: bool = True):
    """Documents -> work/docs/part*.jsonl, work/outcomes (per-source counts), work/quarantine, and
    work/duplicates (which document each removed duplicate duplicated); `sentence_ends` False keeps every
    paragraph one segment (sentence_ends_needed). Returns the kept documents as (doc_id,
    stub) (SpillDocs; ReadDocs gives their JSON lines, the lines of work/docs): what the instances pipeline reads,
    when both run as one job."""
    from .dedup import Deduplicate, StubMember, read_prior_index

    from .sources import work_items

    items = [item for source, path in enumerate(files) for item in work_items(corpus, path, source)]
    records = (
        pipeline
        | "WorkItems" >> beam.Create(items)
        | "SpreadWork" >> beam.Reshuffle()
        | "ReadRecords" >> beam.ParDo(ReadRecords(corpus, str(spill_dir(work)))).with_outputs(
            "outcome", "quarantine", main="records")
    )
    documents = (
        records.records
        | "SpreadRecords" >> beam.Reshuffle()
        | "LoadRecords" >> beam.ParDo(LoadRecords())
        | "ToDocument" >> beam.ParDo(ToDocument(corpus, files)).with_outputs("outcome", "quarantine", main="docs")
    )
    cleaned = (
        documents.docs
        | "Clean" >> beam.ParDo(CleanDocument(corpus, heldout_fraction, files, sentence_ends)).with_outputs(
            "outcome", main="docs")
    )
    raw = corpus.documents == "raw"
    unique = (
        cleaned.docs
        | "SpillDocs" >> beam.ParDo(SpillDocs(str(spill_dir(work)), None if raw else corpus.dedup))
        | "ByDocId" >> beam.GroupByKey()
        | "OnePerKey" >> beam.ParDo(KeepFirstOfKey(files)).with_outputs("outcome", "quarantine", main="docs")
    )
    outcomes = [records.outcome, documents.outcome, cleaned.outcome, unique.outcome]
    if raw:  # nothing deduplicated: the driver finds no index parts and no duplicates
        kept = unique.docs
    else:
        prior = read_prior_index(pipeline, prior_index) if prior_index else None
        deduped = unique.docs | "Deduplicate" >> Deduplicate(corpus.dedup, prior=prior, features=StubMember())
        kept = deduped.kept
        outcomes.append(deduped.outcome)
        (
            deduped.index
            | "IndexByPart" >> beam.Map(lambda entry: (int(entry[0]) % INDEX_PARTS, entry))
            | "GroupIndexParts" >> beam.GroupByKey()
            | "WriteIndexParts" >> beam.Map(
                lambda kv: _write_index_part(kv[0], kv[1], exchange.join(work, "dedup_index"), corpus.dedup))
        )
        (
            deduped.duplicates
            | "DuplicatesJson" >> beam.Map(lambda d: json.dumps(d, sort_keys=True))
            | "WriteDuplicates" >> _line_sink(work, "duplicates")
        )
    kept | "ReadDocs" >> beam.ParDo(ReadDocs()) | "WriteDocs" >> _line_sink(work, "docs")
    (
        tuple(outcomes)
        | "Outcomes" >> beam.Flatten()
        | "CountOutcomes" >> beam.combiners.Count.PerElement()
        | "FormatCounts" >> beam.MapTuple(lambda what, n: json.dumps([json.loads(what), n]))
        # a line per source and outcome: small, so one stage (sinks.py) rather than WriteToText's four or five
        | "WriteCounts" >> WriteSmallLines(exchange.join(work, "outcomes"))
    )
    (
        (records.quarantine, documents.quarantine, unique.quarantine)
        | "Quarantine" >> beam.Flatten()
        | "WriteQuarantine" >> _line_sink(work, "quarantine")
    )
    return kept
