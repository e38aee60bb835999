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

MinHash is own numpy rather than datasketch (2.0.0). Measured on the same 127 real documents (418k shingles,
benchmarks/cleaning.py): the same speed within noise (ours/datasketch 0.87x-0.98x over two runs, ~210 docs/s on
one core), the same Jaccard estimates (mean |error| vs the true shingle Jaccard 0.029 vs 0.028 over 200 pairs);
ours wins on what matters for an index kept across corpus versions: exact arithmetic, coefficients that do not
depend on a library version, plain uint32 arrays straight into Arrow, and no extra dependency. A signature is one
vectorised pass — stable 64-bit shingle
hashes (blake2b of each distinct token, combined by a rolling hash), then (a*x + b) mod 2^61-1 for all permutations
and shingles at once with exact 61-bit modular arithmetic (datasketch lets a*x overflow 64 bits), min over
shingles, top 32 bits kept. The permutation coefficients come from blake2b of (seed, i), not from a numpy RNG whose
stream may change between numpy versions: an index written today must match signatures computed by a later
version. Speed and agreement with datasketch: benchmarks/cleaning.py (RESULTS.md).
"""

from __future__ import annotations

import hashlib
import json
import sys
import typing
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import TaggedOutput
from pydantic import Field, model_validator

from bertfactory.config import StrictModel
from bertfactory.errors import InputError
from bertfactory.io import AtomicFile, sha256_file

from .filters import has_unsegmented, strip_punctuation_table, tokenize
from .hashing import hash64

INDEX_FORMAT_VERSION = 1
INDEX_METADATA_KEY = b"bertfactory.dedup_index"
BATCH_ROWS = 8192
MERSENNE_61 = (1 << 61) - 1
_P = np.uint64(MERSENNE_61)
_LOW30 = np.uint64((1 << 30) - 1)
_LOW31 = np.uint64((1 << 31) - 1)
_U1, _U29, _U30, _U31, _U61 = np.uint64(1), np.uint64(29), np.uint64(30), np.uint64(31), np.uint64(61)
NO_SIGNATURE = 0xFFFFFFFF  # every position: a record without shingles (empty text, sentence pairs)


class DedupConfig(StrictModel):
    """Exact and near-duplicate removal (preprocessing.dedup; docs/cleaning.md)."""

    exact: bool = Field(
        True, description="remove documents whose normalised text (case-folded, Unicode punctuation removed, "
        "whitespace collapsed) has the same 64-bit hash as a kept one (sentence pairs: src TAB tgt)")
    near: bool = Field(
        True, description="remove near-duplicates: MinHash + LSH candidates confirmed by estimated Jaccard >= "
        "threshold (Broder 1997; Leskovec, Rajaraman & Ullman, Mining of Massive Datasets, ch. 3)")
    shingle_size: int = Field(
        5, ge=1, description="shingles are this many consecutive words; in scripts without spaces (Han, kana, "
        "Thai, Myanmar, Khmer, ...) every character is a word, so these are 5-character shingles")
    num_perm: int = Field(128, ge=1, le=4096, description="MinHash permutations = signature length (uint32 each)")
    bands: int = Field(16, ge=1, description="LSH bands; a pair becomes a candidate when one band agrees entirely")
    rows: int = Field(8, ge=1, description="signature positions per band (bands * rows == num_perm)")
    threshold: float = Field(
        0.8, gt=0, le=1, description="estimated Jaccard similarity of 5-word shingle sets at which a candidate is "
        "a near-duplicate")
    seed: int = Field(1, ge=0, description="seed of the MinHash permutations (an index is only comparable with "
                                           "signatures of the same seed, num_perm and shingle_size)")

    @model_validator(mode="after")
    def _bands_cover_signature(self) -> "DedupConfig":
        if self.bands * self.rows != self.num_perm:
            raise ValueError(f"bands * rows must equal num_perm: {self.bands} * {self.rows} != {self.num_perm}")
        return self

    def index_params(self) -> dict:
        """What a signature depends on (stored in the index file and checked when it is read)."""
        return {"num_perm": self.num_perm, "seed": self.seed, "shingle_size": self.shingle_size}


# -------------------------------------------------------------------------------------------- text and hashes


def document_text(doc: dict) -> str:
    """The text a record is compared on: paragraphs of sentences, or a sentence pair as src TAB tgt."""
    if "paragraphs" in doc:
        return "\n".join(" ".join(sentences) for sentences in doc["paragraphs"])
    return f"{doc['src']}\t{doc['tgt']}"


def normalise_for_dedup(text: str) -> str:
    """Case-folded (str.casefold: ß = SS = ss), every Unicode punctuation character (category P*) removed,
    whitespace runs -> one space."""
    return " ".join(_normalised_words(text))


def _normalised_words(text: str) -> list[str]:
    """The whitespace-separated words of normalise_for_dedup(text)."""
    return text.casefold().translate(strip_punctuation_table()).split()


def exact_hash(normalised: str) -> int:
    return hash64("dedup-exact", normalised)


# token -> its blake2b hash, kept across the documents of a process: a corpus repeats its vocabulary (sotu: 32k
# distinct tokens among the 400k distinct per document), and blake2b costs a microsecond a token. Emptied when a
# document's new tokens would overflow it: bounded memory (~8 MB, or one document's distinct tokens where they alone
# are more), and the values never depend on what is cached.
_TOKEN_HASH_CACHE: dict[str, int] = {}
_TOKEN_HASH_CACHE_SIZE = 1 << 16


def _token_hashes(tokens: list[str]) -> np.ndarray:
    """A stable 64-bit hash per token (blake2b of each distinct token, once per process while cached)."""
    cache = _TOKEN_HASH_CACHE
    distinct = set(tokens)
    new = distinct.difference(cache)  # in C: a set smaller than the dict is checked against it element by element
    if len(cache) + len(new) > _TOKEN_HASH_CACHE_SIZE:
        cache.clear()
        new = distinct
    for token in new:
        cache[token] = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
    return np.fromiter(map(cache.__getitem__, tokens), dtype=np.uint64, count=len(tokens))


_ROLL = np.uint64(0x100000001B3)


def shingle_hashes(tokens: list[str], size: int) -> np.ndarray:
    """The distinct 61-bit hashes (values < 2^61 - 1) of all `size`-token shingles, sorted; a text shorter than
    `size` is one shingle; no tokens, no shingles."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    codes = _token_hashes(tokens)
    size = min(size, len(tokens))
    hashes = codes[: len(codes) - size + 1].copy()
    for k in range(1, size):
        hashes = hashes * _ROLL + codes[k: len(codes) - size + 1 + k]  # rolling hash, uint64 wraps around
    # hashes % (2^61 - 1) without a 64-bit division: 2^61 = 1 (mod 2^61 - 1), so h = q 2^61 + r -> q + r <= p + 7,
    # then one conditional subtraction (r - p wraps around to a huge value where r < p)
    folded = (hashes & _P) + (hashes >> _U61)
    folded = np.minimum(folded, folded - _P)
    # np.unique as a sort and a neighbour test (np.unique's hash table costs more than the sort here)
    ordered = np.sort(folded)
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


class MinHasher:
    """MinHash signatures under `num_perm` universal hash functions h_i(x) = (a_i x + b_i) mod (2^61 - 1)."""

    def __init__(self, num_perm: int, seed: int, chunk: int = 512):
        a = [hash64("minhash-a", seed, i) % (MERSENNE_61 - 1) + 1 for i in range(num_perm)]
        b = [hash64("minhash-b", seed, i) % MERSENNE_61 for i in range(num_perm)]
        self.a = np.array(a, dtype=np.uint64)
        self.b = np.array(b, dtype=np.uint64)[:, None]
        # a = a_hi 2^31 + a_lo; a_hi doubled in advance (a_hi x_hi 2^62 = 2 a_hi x_hi)
        self.a_hi2 = ((self.a >> _U31) << _U1)[:, None]
        self.a_hi = (self.a >> _U31)[:, None]
        self.a_lo = (self.a & _LOW31)[:, None]
        self.num_perm = num_perm
        self.chunk = chunk

    def _folded(self, x: np.ndarray) -> np.ndarray:
        """[num_perm, len(x)] values v_ij <= 2^61 + 4 with v_ij = (a_i x_j + b_i) mod (2^61 - 1) or that plus 2^61 - 1.
        Exact: a = a_hi 2^31 + a_lo and x = x_hi 2^31 + x_lo (hi < 2^30, lo < 2^31), so
        a x = a_hi x_hi 2^62 + (a_hi x_lo + a_lo x_hi) 2^31 + a_lo x_lo, with 2^61 = 1 and so 2^62 = 2 (mod 2^61 - 1);
        every product < 2^62, and no sum overflows 64 bits. 16 array operations (the 32-bit split took 21)."""
        x_hi = (x >> _U31)[None, :]
        x_lo = (x & _LOW31)[None, :]
        # in place: each full-size temporary costs as much as the arithmetic
        total = self.a_hi2 * x_hi  # 2 a_hi x_hi < 2^61
        mid = self.a_hi * x_lo
        tmp = self.a_lo * x_hi
        mid += tmp  # < 2^62; mid 2^31 = (mid >> 30) 2^61 + (mid & (2^30 - 1)) 2^31 = (mid >> 30) + ... (mod p)
        np.bitwise_and(mid, _LOW30, out=tmp)
        tmp <<= _U31  # < 2^61
        total += tmp
        mid >>= _U30  # < 2^32
        total += mid
        np.multiply(self.a_lo, x_lo, out=tmp)  # < 2^62
        total += tmp
        total += self.b  # < 2^61 + 2^61 + 2^32 + 2^62 + 2^61 < 2^63.4
        np.right_shift(total, _U61, out=tmp)  # <= 5
        total &= _P
        total += tmp  # <= 2^61 - 1 + 5
        return total

    def permute(self, x: np.ndarray) -> np.ndarray:
        """(a_i x_j + b_i) mod (2^61 - 1) for every permutation i and value x_j < 2^61 - 1: [num_perm, len(x)]."""
        total = self._folded(x)
        tmp = total - _P  # wraps around to a huge value where total < p
        return np.minimum(total, tmp, out=total)

    def _chunk_minimum(self, x: np.ndarray) -> np.ndarray:
        """permute(x).min(axis=1) without reducing every value: a folded value is >= p only when the true one is
        < 5 (about 5 in 2^61 of them), and only then does the chunk need the exact reduction."""
        total = self._folded(x)
        if total.max() < _P:
            return total.min(axis=1)
        tmp = total - _P
        return np.minimum(total, tmp, out=total).min(axis=1)

    def signature(self, shingles: np.ndarray) -> np.ndarray | None:
        """uint32[num_perm]: the top 32 bits of the minimum of each permutation over the shingles; None without
        shingles."""
        if len(shingles) == 0:
            return None
        low = np.full(self.num_perm, _P, dtype=np.uint64)
        # chunks of shingles: bounded memory, and [num_perm, 512] uint64 temporaries stay in the CPU cache (3x faster
        # than chunks of 2048)
        for start in range(0, len(shingles), self.chunk):
            np.minimum(low, self._chunk_minimum(shingles[start: start + self.chunk]), out=low)
        return (low >> np.uint64(29)).astype(np.uint32)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[tuple[int, int]]:
    """(band, hash of the band's rows) for every band: documents sharing one are LSH candidates."""
    data = signature.astype("<u4").tobytes()
    width = rows * 4
    return [(band, int.from_bytes(hashlib.blake2b(data[band * width: (band + 1) * width], digest_size=8,
                                                  person=b"lsh-band").digest(), "little"))
            for band in range(bands)]


def lsh_candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """The S-curve: probability that a pair of Jaccard similarity s shares at least one band, 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - similarity ** rows) ** bands


# -------------------------------------------------------------------------------------------- Beam transform


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


class _Features(beam.DoFn):
    """(doc_id, doc) -> (doc_id, Member): exact hash and (for documents, when near is on) the MinHash signature."""

    def __init__(self, cfg: DedupConfig):
        self.cfg = cfg

    def setup(self) -> None:
        self.hasher = MinHasher(self.cfg.num_perm, self.cfg.seed)

    def process(self, item) -> Iterator:
        doc_id, doc = item
        words = _normalised_words(document_text(doc))
        normalised = " ".join(words)
        signature = None
        if self.cfg.near and "paragraphs" in doc:
            # tokenize(normalised) is the words themselves unless a script without spaces needs cutting
            tokens = tokenize(normalised) if has_unsegmented(normalised) else words
            sig = self.hasher.signature(shingle_hashes(tokens, self.cfg.shingle_size))
            signature = None if sig is None else sig.astype("<u4").tobytes()
        yield doc_id, Member((1, doc["source"], doc["ordinal"], doc_id), doc_id, doc["source"], doc["ordinal"],
                             doc["key"], exact_hash(normalised), signature)


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
    (read_prior_index); its documents always win and are never output."""

    def __init__(self, cfg: DedupConfig, prior: beam.PCollection | None = None):
        super().__init__()
        self.cfg = cfg
        self.prior = prior
        info = getattr(prior, "dedup_index_info", None)
        if info is not None:
            check_index_params(info["path"], info["params"], cfg)

    def expand(self, docs):
        cfg = self.cfg
        members = docs | "Features" >> beam.ParDo(_Features(cfg))
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


# -------------------------------------------------------------------------------------------- the index file


def index_schema(num_perm: int, params: dict | None = None) -> pa.Schema:
    meta = {"format_version": INDEX_FORMAT_VERSION, "num_perm": num_perm, **(params or {})}
    return pa.schema(
        [
            pa.field("doc_id", pa.uint64(), nullable=False),
            pa.field("exact", pa.uint64(), nullable=False),
            pa.field("minhash", pa.list_(pa.uint32(), num_perm), nullable=False),
        ],
        metadata={INDEX_METADATA_KEY: json.dumps(meta, sort_keys=True).encode()},
    )


def _write_table(table: pa.Table, path: Path, schema: pa.Schema) -> dict:
    with AtomicFile(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            # batch boundaries depend on the row count only, not on how the entries arrived
            for batch in table.combine_chunks().to_batches(max_chunksize=BATCH_ROWS):
                writer.write_batch(batch)
    return {"path": Path(path).name, "rows": table.num_rows, "sha256": sha256_file(path)}


def _entries_table(entries: Iterable, num_perm: int | None) -> tuple[pa.Table, int]:
    doc_ids, exacts, signatures = [], [], []
    for doc_id, exact, signature in entries:
        doc_ids.append(int(doc_id))
        exacts.append(int(exact))
        array = (np.frombuffer(signature, dtype="<u4") if isinstance(signature, bytes)
                 else np.asarray(signature, dtype=np.uint32))
        if num_perm is None:
            num_perm = array.size
        if array.size != num_perm:
            raise ValueError(f"dedup index entry {doc_id}: {array.size} MinHash values, expected {num_perm}")
        signatures.append(array)
    num_perm = num_perm if num_perm is not None else DedupConfig().num_perm
    flat = np.concatenate(signatures).astype(np.uint32) if signatures else np.zeros(0, dtype=np.uint32)
    table = pa.table({
        "doc_id": pa.array(doc_ids, type=pa.uint64()),
        "exact": pa.array(exacts, type=pa.uint64()),
        "minhash": pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.uint32()), num_perm),
    })
    return table, num_perm


def write_dedup_index(entries: Iterable, path: Path, cfg: DedupConfig | None = None) -> dict:
    """Write (doc_id, exact hash, signature) entries, in the order given, to one Arrow IPC file, atomically:
    doc_id uint64, exact uint64, minhash fixed_size_list<uint32>[num_perm] (a record without a signature: every
    value 0xFFFFFFFF). `cfg` records seed and shingle size in the schema metadata. Returns {path (name), rows,
    sha256}."""
    table, num_perm = _entries_table(entries, cfg.num_perm if cfg is not None else None)
    schema = index_schema(num_perm, cfg.index_params() if cfg is not None else None)
    return _write_table(table.cast(schema), Path(path), schema)


def _open_index(path: Path | str) -> pa.ipc.RecordBatchFileReader:
    try:
        import fsspec

        handle = fsspec.open(str(path), "rb").open()
        return pa.ipc.open_file(handle)
    except FileNotFoundError:
        raise InputError(f"dedup index {path} does not exist") from None
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"dedup index {path} is not a readable Arrow IPC file: {err}") from None


def index_info(path: Path | str) -> dict:
    """{"num_perm", "rows", "batches", and the parameters recorded when it was written} of an index file; an
    InputError naming the file when it is not a dedup index."""
    reader = _open_index(path)
    schema = reader.schema
    names = schema.names
    if names != ["doc_id", "exact", "minhash"] or not pa.types.is_fixed_size_list(schema.field("minhash").type):
        raise InputError(f"dedup index {path}: columns {names} are not doc_id, exact, minhash "
                         "(fixed_size_list<uint32>); not a bertfactory dedup index")
    params = json.loads((schema.metadata or {}).get(INDEX_METADATA_KEY, b"{}"))
    params["num_perm"] = schema.field("minhash").type.list_size
    params.pop("format_version", None)
    rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    return {"path": str(path), "params": params, "rows": rows, "batches": reader.num_record_batches}


def check_index_params(path: str, params: dict, cfg: DedupConfig) -> None:
    """An InputError naming the index file when its signatures cannot be compared with this config's."""
    wanted = cfg.index_params()
    for name, value in params.items():
        if name in wanted and wanted[name] != value:
            raise InputError(f"dedup index {path} was built with {name}={value}, but dedup.{name} is {wanted[name]}; "
                             f"signatures are only comparable with the same {', '.join(wanted)}")


def _read_table(path: Path, info: dict, num_perm: int | None) -> pa.Table:
    if num_perm is not None and info["params"]["num_perm"] != num_perm:
        raise InputError(f"dedup index {path} has {info['params']['num_perm']} MinHash values per document, "
                         f"expected {num_perm} (like the other parts)")
    return _open_index(path).read_all()


def merge_dedup_index(parts: list[Path], parent: Path | None, out: Path, cfg: DedupConfig | None = None) -> dict:
    """The parent version's entries + the parts', sorted by (doc_id, exact) — a stable sort, so the same entries
    give a byte-identical file — written atomically to `out`. Returns {path (name), rows, sha256}."""
    sources = ([Path(parent)] if parent is not None else []) + [Path(p) for p in parts]
    num_perm = cfg.num_perm if cfg is not None else None
    params = cfg.index_params() if cfg is not None else None
    tables = []
    for path in sources:
        info = index_info(path)
        if cfg is not None:
            check_index_params(str(path), info["params"], cfg)
        table = _read_table(path, info, num_perm)
        num_perm = info["params"]["num_perm"]
        if params is None:
            params = info["params"]
        tables.append(table)
    num_perm = num_perm if num_perm is not None else DedupConfig().num_perm
    schema = index_schema(num_perm, {k: v for k, v in (params or {}).items() if k != "num_perm"})
    if tables:
        merged = pa.concat_tables([t.cast(schema) for t in tables])
        order = pa.compute.sort_indices(merged, sort_keys=[("doc_id", "ascending"), ("exact", "ascending")])
        merged = merged.take(order)
    else:
        merged = schema.empty_table()
    return _write_table(merged, Path(out), schema)


class _ReadIndexBatch(beam.DoFn):
    def __init__(self, path: str):
        self.path = path

    def process(self, batch: int) -> Iterator:
        record_batch = _open_index(self.path).get_batch(batch)
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
