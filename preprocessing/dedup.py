"""Deduplication of documents as a Beam transform: exact duplicates (hash of the normalised text), then
near-duplicates (MinHash signatures, LSH banding, candidates confirmed by their estimated Jaccard similarity), also
against the index of an earlier corpus version. docs/cleaning.md describes the method and the measured figures.

    deduped = docs | Deduplicate(DedupConfig(), prior=read_prior_index(pipeline, "v1/shards/dedup_index.arrow"))
    deduped.kept        # the (doc_id, doc) elements that survive, unchanged
    deduped.duplicates  # {"doc_id", "source", "ordinal", "key", "kind", "duplicate_of", ["jaccard"]} per removed doc
    deduped.outcome     # json.dumps([source, "duplicate:exact" | "duplicate:near"]) per removed doc
    deduped.index       # (doc_id, exact hash, MinHash signature) of every kept doc: write_dedup_index / merge

    python -m preprocessing.dedup INDEX.arrow      # rows, num_perm and parameters of a dedup index

Which document is kept: the prior index's documents always win; among new ones, the one with the smallest
(source, ordinal) — input file index, then record number — whatever the bundles, workers or input order. A new
document is removed when its normalised text equals that of a winning document (kind "exact"), or, among the exact
survivors, when an earlier or prior document sharing one of its LSH buckets has a signature agreeing in at least
`threshold` of the positions (kind "near"). This is not a transitive closure: C is removed for being similar to B
even when B itself is removed for being similar to A.

The text side (normalisation, shingles, MinHash, LSH bands) is preprocessing.minhash, the index file
preprocessing.dedup_index, the settings preprocessing.dedup_config; only this module needs Beam.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import TaggedOutput

from .dedup_config import DedupConfig
from .dedup_index import NO_SIGNATURE, check_index_params, index_info, open_index
from .filters import has_unsegmented, tokenize
from .minhash import MinHasher, band_keys, document_text, exact_hash, normalised_words, shingle_hashes


class Member(NamedTuple):
    """What the dedup stages shuffle about a document (never its text)."""

    rank: tuple  # (0, 0, 0, doc_id) for the prior index, (1, source, ordinal, doc_id) for new documents
    doc_id: int
    source: int | None
    ordinal: int | None
    key: str | None
    exact: int
    signature: bytes | None  # uint32[num_perm], little-endian

    @property
    def prior(self) -> bool:
        return self.rank[0] == 0

    def reference(self) -> dict:
        if self.prior:
            return {"doc_id": self.doc_id, "prior": True}
        return {"doc_id": self.doc_id, "source": self.source, "ordinal": self.ordinal, "key": self.key}


def _signature_bytes(signature) -> bytes | None:
    if signature is None:
        return None
    array = np.frombuffer(signature, dtype="<u4") if isinstance(signature, bytes) else np.asarray(signature)
    if array.size and bool(np.all(array == NO_SIGNATURE)):
        return None
    return array.astype("<u4").tobytes()


def prior_member(entry) -> Member:
    doc_id, exact, signature = entry
    return Member((0, 0, 0, int(doc_id)), int(doc_id), None, None, None, int(exact), _signature_bytes(signature))


def document_member(doc_id: int, doc: dict, cfg: DedupConfig, hasher: MinHasher) -> Member:
    """A document record's Member: exact hash and (for documents, when near is on) the MinHash signature."""
    words = normalised_words(document_text(doc))
    normalised = " ".join(words)
    signature = None
    if cfg.near and "paragraphs" in doc:
        # tokenize(normalised) is the words themselves unless a script without spaces needs cutting
        tokens = tokenize(normalised) if has_unsegmented(normalised) else words
        sig = hasher.signature(shingle_hashes(tokens, cfg.shingle_size))
        signature = None if sig is None else sig.astype("<u4").tobytes()
    return Member((1, doc["source"], doc["ordinal"], doc_id), doc_id, doc["source"], doc["ordinal"], doc["key"],
                  exact_hash(normalised), signature)


class _Features(beam.DoFn):
    """(doc_id, doc) -> (doc_id, Member), from the document's text (document_member)."""

    def __init__(self, cfg: DedupConfig):
        self.cfg = cfg

    def setup(self) -> None:
        self.hasher = MinHasher(self.cfg.num_perm, self.cfg.seed)

    def process(self, item) -> Iterator:
        doc_id, doc = item
        yield doc_id, document_member(doc_id, doc, self.cfg, self.hasher)


class StubMember(beam.DoFn):
    """(doc_id, stub) -> (doc_id, Member) for documents whose text is not in the element: the stub's "member",
    computed with document_member where the text was (documents.SpillDocs)."""

    def process(self, item) -> Iterator:
        doc_id, stub = item
        yield doc_id, stub["member"]


class _ExactGroups(beam.DoFn):
    """All members with one exact hash -> the winner survives (new documents go on to near dedup); every other
    new document is removed as an exact duplicate of the winner (tagged 'removed')."""

    def process(self, item) -> Iterator:
        _, members = item
        members = sorted(members, key=lambda m: m.rank)
        winner = members[0]
        if not winner.prior:
            yield winner
        for member in members[1:]:
            if not member.prior:
                yield TaggedOutput("removed", (member.doc_id, (winner.rank, "exact", winner.reference(), None)))


class _ConfirmBucket(beam.DoFn):
    """All members of one LSH bucket -> for every new member, the earliest earlier member whose signature agrees
    in >= threshold of the positions: (doc_id, (its rank, "near", reference, jaccard))."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def process(self, item) -> Iterator:
        _, members = item
        # a GroupByKey value is an iterable, not always a list (Beam's _ConcatSequence when the bucket mixes
        # the prior index and new documents)
        members = sorted(members, key=lambda m: m.rank)
        if len(members) < 2:
            return
        signatures = np.stack([np.frombuffer(m.signature, dtype="<u4") for m in members])
        for k in range(1, len(members)):
            if members[k].prior:
                continue
            agree = np.count_nonzero(signatures[:k] == signatures[k], axis=1) / signatures.shape[1]
            hits = np.flatnonzero(agree >= self.threshold)
            if len(hits):
                j = int(hits[0])
                yield members[k].doc_id, (members[j].rank, "near", members[j].reference(), float(agree[j]))


def _earliest(verdicts: Iterable[tuple]) -> tuple:
    return min(verdicts, key=lambda v: v[0])


def _band_members(member: Member, bands: int, rows: int) -> Iterator:
    if member.signature is not None:
        signature = np.frombuffer(member.signature, dtype="<u4")
        for key in band_keys(signature, bands, rows):
            yield key, member


class _Emit(beam.DoFn):
    """doc_id -> {doc, member, verdict}: the kept document and its index entry, or the duplicate record and
    its outcome."""

    def __init__(self, num_perm: int):
        self.num_perm = num_perm

    def process(self, item) -> Iterator:
        doc_id, grouped = item
        docs, members, verdicts = list(grouped["doc"]), list(grouped["member"]), list(grouped["verdict"])
        if len(docs) != 1 or len(members) != 1:
            raise ValueError(f"Deduplicate: doc_id {doc_id} occurs {len(docs)} times in its input; ids must be unique")
        doc, member = docs[0], members[0]
        if not verdicts:
            yield doc_id, doc
            signature = (np.frombuffer(member.signature, dtype="<u4") if member.signature is not None
                         else np.full(self.num_perm, NO_SIGNATURE, dtype=np.uint32))
            yield TaggedOutput("index", (doc_id, member.exact, signature))
            return
        _, kind, reference, jaccard = _earliest(verdicts)
        record = {"doc_id": doc_id, "source": member.source, "ordinal": member.ordinal, "key": member.key,
                  "kind": kind, "duplicate_of": reference}
        if jaccard is not None:
            record["jaccard"] = round(jaccard, 6)
        yield TaggedOutput("duplicates", record)
        yield TaggedOutput("outcome", json.dumps([member.source, f"duplicate:{kind}"]))


class DedupOutputs(NamedTuple):
    kept: beam.PCollection
    duplicates: beam.PCollection
    outcome: beam.PCollection
    index: beam.PCollection


class Deduplicate(beam.PTransform):
    """PCollection of (doc_id, doc) -> DedupOutputs (kept, duplicates, outcome, index); see the module docstring.
    `doc` has "source", "ordinal", "key" and "paragraphs" (list of lists of sentences) or "src" and "tgt" (a
    sentence pair: exact dedup only). doc_ids must be unique. `prior`: entries of an earlier version's index
    (read_prior_index); its documents always win and are never output. `features`: the DoFn giving each
    (doc_id, doc) its (doc_id, Member); by default computed from the text, StubMember for stubs that carry it
    (then `doc` need not hold its text: only the Members and the docs' stubs go through the groups)."""

    def __init__(self, cfg: DedupConfig, prior: beam.PCollection | None = None, features: beam.DoFn | None = None):
        super().__init__()
        self.cfg = cfg
        self.prior = prior
        self.features = features
        info = getattr(prior, "dedup_index_info", None)
        if info is not None:
            check_index_params(info["path"], info["params"], cfg)

    def expand(self, docs):
        cfg = self.cfg
        members = docs | "Features" >> beam.ParDo(self.features or _Features(cfg))
        candidates = members | "Members" >> beam.Values()
        # Any: the `-> Member` annotation would otherwise make Beam pick a schema (Row) coder for a NamedTuple
        prior = (self.prior | "PriorMembers" >> beam.Map(prior_member).with_output_types(typing.Any)
                 if self.prior is not None else None)
        removed = []
        if cfg.exact:
            exact_inputs = [candidates] + ([prior] if prior is not None else [])
            exact = (
                exact_inputs
                | "ExactInputs" >> beam.Flatten()
                | "ByExactHash" >> beam.Map(lambda m: (m.exact, m))
                | "GroupExact" >> beam.GroupByKey()
                | "ExactWinners" >> beam.ParDo(_ExactGroups()).with_outputs("removed", main="survivors")
            )
            candidates = exact.survivors
            removed.append(exact.removed)
        if cfg.near:
            near_inputs = [candidates] + ([prior] if prior is not None else [])
            near = (
                near_inputs
                | "NearInputs" >> beam.Flatten()
                | "BandKeys" >> beam.FlatMap(_band_members, cfg.bands, cfg.rows)
                | "GroupBuckets" >> beam.GroupByKey()
                | "ConfirmCandidates" >> beam.ParDo(_ConfirmBucket(cfg.threshold))
                | "EarliestMatch" >> beam.CombinePerKey(_earliest)
            )
            removed.append(near)
        verdicts = (removed | "Verdicts" >> beam.Flatten()) if removed else (
            docs.pipeline | "NoVerdicts" >> beam.Create([]))
        out = (
            {"doc": docs, "member": members, "verdict": verdicts}
            | "JoinVerdicts" >> beam.CoGroupByKey()
            | "Emit" >> beam.ParDo(_Emit(cfg.num_perm)).with_outputs("duplicates", "outcome", "index", main="kept")
        )
        return DedupOutputs(out.kept, out.duplicates, out.outcome, out.index)


class _ReadIndexBatch(beam.DoFn):
    def __init__(self, path: str):
        self.path = path

    def process(self, batch: int) -> Iterator:
        record_batch = open_index(self.path).get_batch(batch)
        num_perm = record_batch.schema.field("minhash").type.list_size
        doc_ids = record_batch.column("doc_id").to_numpy()
        exacts = record_batch.column("exact").to_numpy()
        signatures = record_batch.column("minhash").flatten().to_numpy().reshape(-1, num_perm)
        for doc_id, exact, signature in zip(doc_ids, exacts, signatures):
            yield int(doc_id), int(exact), signature.copy()


def read_prior_index(pipeline: beam.Pipeline, path: str) -> beam.PCollection:
    """The entries (doc_id, exact, uint32 signature) of an index file as a PCollection, read batch by batch on
    the workers. The file is checked here (InputError naming it); Deduplicate checks its num_perm, seed and
    shingle size against the config."""
    info = index_info(path)
    entries = (
        pipeline
        | f"PriorIndexBatches {Path(path).name}" >> beam.Create(list(range(info["batches"])))
        | f"SpreadPriorIndex {Path(path).name}" >> beam.Reshuffle()
        | f"ReadPriorIndex {Path(path).name}" >> beam.ParDo(_ReadIndexBatch(str(path)))
    )
    entries.dedup_index_info = info
    return entries


def main(argv: list[str]) -> int:
    for path in argv:
        print(json.dumps(index_info(path), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
