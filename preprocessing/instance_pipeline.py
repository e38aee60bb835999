"""The instances pipeline (Beam): document JSON lines -> BERT instances with K precomputed mask variants -> sorted
Arrow shards (the contract in preprocessing.shards). The second of the stage's two pipelines (preprocessing.pipeline
runs it after the tokenizer, or in one job with preprocessing.documents when the tokenizer is given).

    docs -> TokenizeDoc (token ids per sentence, packed, spilled to disk; language-sampling copies)
         -> group by random bucket
         -> BuildInstances (pairs or packed rows: preprocessing.instances, preprocessing.segments; dealt to
            pre-shards, spilled to disk as arrays) -> group by pre-shard
         -> DealAndMask (numbered in sort-key order, dealt round-robin to shards, masked in batches by the
            vectorised core, preprocessing.masking; spilled as Arrow record batches) -> group by shard
         -> WriteShardFn (the parts merged by key into the shard file) -> one summary line per shard

The plan (buckets, pre-shards, copy rates, language ids: preprocessing.planning) is a side input. Only spill
references, paths and counts go through the shuffles (a local runner keeps a shuffle in the driver and hands a worker
its whole share at once): the token ids, the rows and their sort keys are on disk, in the staging shards directory
(`<split>/.spill-*`, removed by preprocessing.instance_results), or in a bucket where the staging area is one: each
file made in the writer's scratch and uploaded whole before its reference goes on, downloaded by its reader
(preprocessing.exchange; no worker needs a disk another can see). The layout depends only on the keys, never on
bundles.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path
from typing import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import TaggedOutput
from tokenizers import Tokenizer

from bertfactory.io import AtomicFile

from . import exchange, hashing
from .config import PreprocessConfig
from .instances import iter_bucket_instances
from .masking import Masker
from .masking_policies import SPAN_BOUND_POLICIES
from .memory import release_freed_memory
from .segments import Row, RowBlock, build_rows, pack_sentences, rows_to_block, token_rows, unpack_sentences
from .shards import merge_runs, shard_batch, shard_schema, spill_batch_rows, spill_part
from .sinks import WriteSmallLines
from .text_spill import SpillReader, SpillRef, SpillWriter, decode_int32_arrays, encode_int32_arrays


class TokenizeDoc(beam.DoFn):
    """Document JSON -> ((split, bucket), (doc_id, token spill reference, language id)): the document's sentences
    as token ids, packed (segments.pack_sentences), are written once to a spill file of the bundle
    (token_spill_dir; load_tokens reads them back), so the ByBucket shuffle carries a reference of a few dozen
    bytes, not 4 bytes a token held by the driver (+45 MiB per copy of sotu, issue 19). A document whose every
    sentence tokenises to nothing (text made only of what the normalizer strips) goes to the `no_tokens` output,
    to be counted as dropped. With language sampling, a training document is emitted as many times as
    preprocessing.language_sampling.copies says (0 = left out), each copy with its own id so its instances and
    masks differ, all copies with the one reference; the `copies` output counts them per language. Buckets, copy
    rates and language ids come from the instance plan (a side input: instance_plan)."""

    def __init__(self, tokenizer_path: str, shard_dir: str, seed: int = 0):
        self.tokenizer_path = tokenizer_path
        self.shard_dir = shard_dir
        self.seed = seed
        self._writers: dict[str, SpillWriter] = {}

    def _copies(self, doc: dict, copy_rates: dict[str, float]) -> list[int]:
        lang = doc.get("lang") or "und"
        if doc["split"] != "train" or lang not in copy_rates:
            return [doc["doc_id"]]
        from .language_sampling import copies

        n = copies(str(doc["doc_id"]), lang, copy_rates, self.seed)
        return [doc["doc_id"] if c == 0 else hashing.hash64("copy", doc["doc_id"], c) for c in range(n)]

    def setup(self) -> None:
        self.tokenizer = Tokenizer.from_file(str(exchange.get(self.tokenizer_path)))

    def start_bundle(self) -> None:
        release_freed_memory()  # what the stages before this one freed (preprocessing.memory)
        self._writers = {}

    def finish_bundle(self) -> None:
        # the files are complete before ByBucket hands their references on
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def _spill(self, split: str, packed: tuple[np.ndarray, np.ndarray]) -> SpillRef:
        writer = self._writers.get(split)
        if writer is None:
            writer = self._writers[split] = SpillWriter(token_spill_dir(self.shard_dir, split), "tokens")
        return writer.write(encode_int32_arrays(packed))

    def process(self, line: str, plan: dict) -> Iterator:
        buckets, lang_ids = plan["buckets"], plan["lang_ids"]
        doc = json.loads(line)
        split = doc["split"]
        if doc.get("kind") == "pair":  # both sides, each with its language
            src, tgt = (e.ids for e in self.tokenizer.encode_batch_fast([doc["src"], doc["tgt"]],
                                                                         add_special_tokens=False))
            if src and tgt:
                langs = (lang_ids.get(doc["src_lang"], 0), lang_ids.get(doc["tgt_lang"], 0))
                yield ((split, hashing.bucket_of(doc["doc_id"], buckets[split])),
                       (doc["doc_id"], self._spill(split, pack_sentences([src, tgt])), langs))
            else:
                yield TaggedOutput("no_tokens", json.dumps({"split": split, "doc_id": doc["doc_id"], "title": doc["title"]}))
            return
        sentences = [s for paragraph in doc["paragraphs"] for s in paragraph]
        # the fast variant leaves out character offsets: making them (and their Python objects, one per
        # sentence, under the GIL) cost more than the tokenising itself
        encoded = self.tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
        yield from self._emit(doc, [e.ids for e in encoded if e.ids], plan)

    def _emit(self, doc: dict, ids: list[list[int]], plan: dict) -> Iterator:
        """A document's token ids (one list per sentence or paragraph) -> its keyed copies, or `no_tokens`."""
        buckets, copy_rates, lang_ids = plan["buckets"], plan["copy_rates"], plan["lang_ids"]
        split = doc["split"]
        if ids:
            lang = lang_ids.get(doc.get("lang") or "und", 0)
            copy_ids = self._copies(doc, copy_rates)
            if copy_rates:
                yield TaggedOutput("copies", json.dumps([doc.get("lang") or "und", len(copy_ids)]))
            ref = self._spill(split, pack_sentences(ids))
            for doc_id in copy_ids:
                yield (split, hashing.bucket_of(doc_id, buckets[split])), (doc_id, ref, lang)
        else:
            yield TaggedOutput("no_tokens", json.dumps({"split": split, "doc_id": doc["doc_id"], "title": doc["title"]}))


class TokenizeDocBatch(TokenizeDoc):
    """instances.packing tokens: a batch of document JSON lines (BatchElements, about TOKENIZE_BATCH_CHARS of
    them) -> what TokenizeDoc yields for each. Rows cut by tokens need no sentence ends, so every paragraph is one
    text (its sentences joined by a space) and the batch's paragraphs go to the tokenizer in one call, which
    spreads them over the cores (its Rust threads); each document's ids are the same whatever the batch."""

    def process(self, lines: list[str], plan: dict) -> Iterator:
        docs = [json.loads(line) for line in lines]
        texts = [[" ".join(paragraph) for paragraph in doc["paragraphs"]] for doc in docs]
        encoded = iter(self.tokenizer.encode_batch_fast([t for doc in texts for t in doc], add_special_tokens=False))
        for doc, paragraphs in zip(docs, texts):
            yield from self._emit(doc, [ids for ids in (next(encoded).ids for _ in paragraphs) if ids], plan)


# characters of document JSON per TokenizeDocBatch call (packing tokens): enough texts to keep every core busy, a
# bounded batch in memory
TOKENIZE_BATCH_CHARS = 4_000_000


def token_spill_dir(shard_dir: str | Path, split: str) -> str:
    """Where TokenizeDoc leaves a split's token ids for BuildInstances (in the staging shards directory, removed
    with the row and shard spills once the instances job has finished)."""
    return exchange.join(shard_dir, split, ".spill-tokens")


def load_tokens(docs, reader: SpillReader) -> list[tuple]:
    """A bucket's (doc_id, token spill reference, language) -> (doc_id, packed sentences, language), in the order
    given. The files are read in (file, offset) order, each reference once (language-sampling copies share theirs
    and get the same arrays)."""
    docs = list(docs)
    packed: dict[SpillRef, tuple[np.ndarray, np.ndarray]] = {}
    for ref in sorted({tuple(ref) for _doc_id, ref, _lang in docs}):
        ids, lengths = decode_int32_arrays(reader.read(ref), f"{ref[0]}: token record at byte {ref[1]}")
        packed[ref] = (ids, lengths)
    return [(doc_id, packed[tuple(ref)], lang) for doc_id, ref, lang in docs]


class BuildInstances(beam.DoFn):
    """One bucket of documents (sentences packed as arrays: segments.pack_sentences) -> its instances (see
    preprocessing.instances for the seeding), dealt to pre-shards: rows are turned into arrays ROWS_PER_ELEMENT at
    a time (their row keys hashed for the whole block: hashing.row_keys), and a pre-shard's rows, once about
    ROWS_PER_ELEMENT of them wait (or WAITING_ROWS rows in all), are appended to the bucket's spill file for that
    pre-shard (BucketSpill); only ((split, pre-shard), (spill file, rows)) goes through the shuffle. A local runner hands each worker its whole share of a stage's input at
    once, so rows in the shuffle made DealAndMask's workers hold half the corpus's instances (1.4 GB at 10x sotu)
    before the first pre-shard was dealt."""

    def __init__(self, cfg: PreprocessConfig, cls_id: int, sep_id: int, shard_dir: str):
        self.cfg = cfg
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.shard_dir = shard_dir

    def setup(self) -> None:
        self.reader = SpillReader()

    def start_bundle(self) -> None:
        release_freed_memory()

    def finish_bundle(self) -> None:
        self.reader.close()

    def teardown(self) -> None:
        self.reader.close()

    def _rows(self, split: str, bucket: int, docs: list) -> Iterator[Row]:
        inst = self.cfg.instances
        if inst.format not in ("nsp-pairs", "sop-pairs"):
            yield from build_rows(inst.format, docs, inst.max_seq_len, self.cls_id, self.sep_id)
            return
        rng = random.Random(hashing.seed_of(self.cfg.seed, "instances", split, bucket))
        langs = {doc_id: lang for doc_id, _ids, lang in docs}
        for doc_id, index, input_ids, len_a, nsp_label in iter_bucket_instances(
            [(doc_id, ids) for doc_id, ids, _lang in docs], rng, max_seq_len=inst.max_seq_len,
            short_seq_prob=inst.short_seq_prob, nsp_random_prob=inst.nsp_random_prob, dupe_factor=inst.dupe_factor,
            cls_id=self.cls_id, sep_id=self.sep_id, sentence_order=inst.format == "sop-pairs",
        ):
            # a NotNext B comes from another document, possibly of another language: its rows keep A's language
            lang = langs[doc_id]
            yield Row(doc_id, index, input_ids, len_a, nsp_label, lang, lang)

    def process(self, item, plan: dict) -> Iterator:
        (split, bucket), refs = item
        docs = load_tokens(refs, self.reader)
        preshards = plan["preshards"][split]
        waiting: dict[int, list[RowBlock]] = {}  # pre-shard -> its blocks not yet spilled
        spill = BucketSpill(self.shard_dir, split, bucket)
        if self.cfg.instances.packing == "tokens":  # rows cut from the token arrays as they came, no Row objects
            self._spill_token_rows(docs, preshards, waiting, spill)
        else:
            docs = [(doc_id, unpack_sentences(packed), lang) for doc_id, packed, lang in docs]
            rows: list[Row] = []
            for row in self._rows(split, bucket, docs):
                rows.append(row)
                if len(rows) == ROWS_PER_ELEMENT:
                    self._deal(rows_to_block(rows), preshards, waiting, spill)
                    rows = []
            if rows:
                self._route(rows_to_block(rows), preshards, waiting)
        for pre in sorted(waiting):
            spill.append(pre, waiting[pre])
        yield from spill.finish()

    def _spill_token_rows(self, docs: list, preshards: int, waiting: dict, spill: "BucketSpill") -> None:
        """instances.packing tokens: the bucket's rows in one go (segments.token_rows), dealt and spilled
        ROWS_PER_ELEMENT rows at a time like the other formats' rows."""
        block = token_rows([(doc_id, packed[0], lang) for doc_id, packed, lang in docs], self.cfg.instances.max_seq_len,
                           self.cls_id, self.sep_id)
        for start in range(0, len(block.lengths), ROWS_PER_ELEMENT):
            part = block.take(np.arange(start, min(start + ROWS_PER_ELEMENT, len(block.lengths))))[0]
            self._deal(part, preshards, waiting, spill)

    def _deal(self, block: RowBlock, preshards: int, waiting: dict, spill: "BucketSpill") -> None:
        """Route a block's rows to their pre-shards, then append every pre-shard holding ROWS_PER_ELEMENT rows to
        its spill file, or every pre-shard once WAITING_ROWS rows wait in all: with hundreds of pre-shards (a large
        corpus) each would otherwise keep up to ROWS_PER_ELEMENT rows here, a memory that grew with the corpus."""
        self._route(block, preshards, waiting)
        sizes = {pre: sum(len(b.lengths) for b in parts) for pre, parts in waiting.items()}
        full = sorted(waiting) if sum(sizes.values()) >= WAITING_ROWS else \
            sorted(pre for pre, n in sizes.items() if n >= ROWS_PER_ELEMENT)
        for pre in full:
            spill.append(pre, waiting.pop(pre))

    @staticmethod
    def _route(block: RowBlock, preshards: int, waiting: dict) -> None:
        """Deal a block's rows to their pre-shards (row key modulo the split's pre-shard count)."""
        pre_of = block.keys[:, 0] % np.uint64(preshards)
        order = np.argsort(pre_of, kind="stable")
        bounds = np.searchsorted(pre_of[order], np.arange(preshards + 1, dtype=np.uint64))
        for pre in range(preshards):
            if bounds[pre] < bounds[pre + 1]:
                waiting.setdefault(pre, []).append(block.take(order[bounds[pre]:bounds[pre + 1]])[0])


class BucketSpill:
    """One bucket's rows per pre-shard, appended block by block to one spill file per pre-shard (row_spill_path;
    each block as the four RowBlock arrays in .npy format, one after the other). The files have a temporary name
    while the bucket is built and their own when it is done (finish), so a retried bundle writes the same files
    with the same bytes and never appends to a failed attempt's; not synced: a crash reruns the job."""

    def __init__(self, shard_dir: str, split: str, bucket: int):
        self.shard_dir, self.split, self.bucket = shard_dir, split, bucket
        self.attempt = uuid.uuid4().hex
        self.rows: dict[int, int] = {}  # pre-shard -> rows appended

    def _tmp(self, pre: int) -> Path:
        final = exchange.local(row_spill_path(self.shard_dir, self.split, pre, self.bucket))
        return final.with_name(f".{final.name}.{self.attempt}.tmp")

    def append(self, pre: int, parts: list[RowBlock]) -> None:
        block = RowBlock.concat(parts)
        path = self._tmp(pre)
        if pre not in self.rows:
            path.parent.mkdir(parents=True, exist_ok=True)
        # opened per block, not kept open: hundreds of pre-shards would be as many open files
        with open(path, "ab") as f:
            for array in block:
                np.save(f, array, allow_pickle=False)
        self.rows[pre] = self.rows.get(pre, 0) + len(block.lengths)

    def finish(self) -> Iterator[tuple]:
        """Each pre-shard's file under its own name (uploaded, where the staging area is a bucket) ->
        ((split, pre-shard), (spill file, rows))."""
        for pre in sorted(self.rows):
            location = row_spill_path(self.shard_dir, self.split, pre, self.bucket)
            os.replace(self._tmp(pre), exchange.local(location))
            exchange.put(location, keep=False)
            yield (self.split, pre), (location, self.rows[pre])


def row_spill_path(shard_dir: str | Path, split: str, pre: int, bucket: int) -> str:
    """Where BuildInstances leaves a bucket's rows for a pre-shard, for DealAndMask (in the staging shards
    directory, removed with the shard spills once the instances job has finished)."""
    return exchange.join(shard_dir, split, ".spill-rows", f"{pre:05d}-{bucket:06d}.npy")


def load_row_spill(path: str) -> RowBlock:
    """A spill file of BuildInstances back as one RowBlock (plain arrays only: no pickled objects are read)."""
    blocks = []
    location, path = path, exchange.get(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        while f.tell() < size:
            try:
                blocks.append(RowBlock(*(np.load(f, allow_pickle=False) for _ in RowBlock._fields)))
            except (ValueError, EOFError) as e:
                raise ValueError(f"{path}: row spill file unreadable after byte {f.tell()} of {size} ({e}; the "
                                 "file was cut short or replaced while the job ran)") from None
    exchange.release(location)  # a retry downloads it again
    return RowBlock.concat(blocks)


# rows per block appended to a spill file of BuildInstances (about): few appends, bounded arrays in the worker
ROWS_PER_ELEMENT = 2048
# rows waiting in BuildInstances for their pre-shards at most (about 10 MB at 128 tokens a row), however many
WAITING_ROWS = 8 * ROWS_PER_ELEMENT


# rows masked and turned into one record batch at a time (bounds the masker's [rows * K, max_seq_len] arrays)
MASK_BATCH_ROWS = 4096


class DealAndMask(beam.DoFn):
    """One pre-shard's rows (BuildInstances' spill files) -> each numbered and dealt to its shard, masked, as
    record batches. The rows of a split are numbered in (pre-shard, sort key) order and dealt round-robin, so every
    shard holds N/S rows +-1 (ranks of a data-parallel job get equal work) and the layout depends only on the keys,
    never on bundles.
    Each shard's part of the pre-shard is masked by the vectorised core (Masker.variants_flat) in batches of
    MASK_BATCH_ROWS, written to a spill file (shards.spill_part) with its sort keys beside it (keys_path) and
    announced as ((split, shard), (pre-shard, first row, spill file, rows, (tokens, masked positions,
    NotNext/swapped rows))): the keys (24 bytes a row) no longer wait in the driver's ByShard buffer."""

    def __init__(self, cfg: PreprocessConfig, tokenizer_path: str, num_shards: dict[str, int], vocab_size: int,
                 shard_dir: str):
        self.cfg = cfg
        self.tokenizer_path = tokenizer_path
        self.num_shards = num_shards
        self.vocab_size = vocab_size
        self.shard_dir = shard_dir

    def setup(self) -> None:
        # special ids, word boundaries and (entity policy) token texts, all from the tokenizer itself
        self.masker = Masker.from_tokenizer(self.cfg.masking, self.cfg.seed,
                                            Tokenizer.from_file(str(exchange.get(self.tokenizer_path))),
                                            self.tokenizer_path)

    def start_bundle(self) -> None:
        release_freed_memory()

    def process(self, item, sizes: dict) -> Iterator:
        (split, pre), parts = item
        block = RowBlock.concat([load_row_spill(path) for path, _rows in sorted(parts)])
        # sorted by (row key, doc_id, index): numbered and dealt in that order whatever the bundles
        order = np.lexsort(block.keys.T[::-1])
        offset = sum(n for (s, p), n in sizes.items() if s == split and p < pre)
        shards = self.num_shards[split]
        # each pre-shard is a run of every shard's merge, which holds one spilled batch per run
        batch_rows = spill_batch_rows(sum(1 for s, _ in sizes if s == split))
        for shard in range(shards):
            mine = order[(shard - offset) % shards::shards]
            for start in range(0, len(mine), MASK_BATCH_ROWS):
                chunk, offsets = block.take(mine[start:start + MASK_BATCH_ROWS])
                batch, totals = self._batch(chunk, offsets)
                # the rows and their keys go to disk here, only the file through the shuffle: a local runner
                # hands a group to one worker whole, and a shard's group would otherwise be a fixed share of the
                # corpus
                location = exchange.join(spill_dir(self.shard_dir, split, shard), f"{pre}-{start}.arrow")
                path = exchange.writable(location)
                # a retried bundle rewrites the same bytes; not synced to disk: a crash reruns the job, and
                # WriteShardFn's shard file (synced) is what survives it
                with AtomicFile(path, durable=False) as tmp:
                    spill_part(tmp, batch, batch_rows)
                with AtomicFile(keys_path(path), durable=False) as tmp:
                    with open(tmp, "wb") as f:
                        np.save(f, np.ascontiguousarray(chunk.keys, dtype=np.uint64), allow_pickle=False)
                exchange.put(location, keep=False)
                exchange.put(keys_path(location), keep=False)
                yield (split, shard), (pre, start, location, len(chunk.lengths), totals)

    def _batch(self, rows: RowBlock, offsets: np.ndarray) -> tuple[pa.RecordBatch, tuple[int, int, int]]:
        values = rows.ids.astype(np.int64)
        doc_id, index = rows.keys[:, 1], rows.keys[:, 2]
        len_a, nsp_label, lang_a, lang_b, segment_index = rows.fields.T
        spans = (None, None)  # mask_spans: the span policy's bounds (docs/shards.md), absent for other policies
        if self.cfg.masking.dynamic:  # the loader masks at read time
            variants, counts, positions, tokens = 0, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
            if self.cfg.masking.policy in SPAN_BOUND_POLICIES:
                spans = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        else:
            masked = self.masker.variants_flat(offsets, values, doc_id, index)
            variants, counts, positions, tokens = masked.variants, masked.counts, masked.positions, masked.tokens
            if self.cfg.masking.policy in SPAN_BOUND_POLICIES:
                spans = (masked.unit_counts, masked.unit_lengths())
        batch = shard_batch(self.vocab_size, offsets, values, len_a, nsp_label, counts, positions, tokens, variants,
                            doc_id, lang_a, lang_b, segment_index, *spans)
        return batch, (int(offsets[-1]), len(positions), int(nsp_label.sum()))


def keys_path(part: str | Path) -> str | Path:
    """The sort keys ([rows, 3] uint64, .npy) of a masked part spilled by DealAndMask, next to it (a location
    for a location string, a Path for a Path)."""
    if isinstance(part, Path):
        return part.with_suffix(".keys.npy")
    return part[:-len(".arrow")] + ".keys.npy" if part.endswith(".arrow") else part + ".keys.npy"


def shard_name(index: int) -> str:
    return f"part-{index:05d}.arrow"


def spill_dir(shard_dir: str | Path, split: str, shard: int) -> str:
    """Where DealAndMask leaves a shard's masked parts for WriteShardFn to merge (inside the staging shards
    directory). The driver removes them after the instances job has finished, not WriteShardFn: a runner that
    retries a WriteShards bundle (Dataflow, Flink) must find its parts again."""
    return exchange.join(shard_dir, split, f".spill-{Path(shard_name(shard)).stem}")


class WriteShardFn(beam.DoFn):
    """All parts of one shard (their spill files; the sort keys beside them: keys_path) -> the shard file (rows
    sorted by their sort key) -> a summary line. Each part is sorted by key and a pre-shard's parts cover
    consecutive key ranges, so the pre-shards' runs are merged by key into the shard (shards.merge_runs): the
    worker holds a block of each run's sort keys and a few hundred rows per pre-shard, nothing per row of the
    shard."""

    def __init__(self, shard_dir: str, vocab_size: int, batch_rows: int, span_bounds: bool = False):
        self.shard_dir = shard_dir
        self.vocab_size = vocab_size
        self.batch_rows = batch_rows
        self.span_bounds = span_bounds  # the schema has the mask_spans column (masking policy span)

    def start_bundle(self) -> None:
        release_freed_memory()

    def process(self, item) -> Iterator[str]:
        (split, shard), parts = item
        location = exchange.join(self.shard_dir, split, shard_name(shard))
        runs: dict[int, list] = {}
        tokens = masked = nsp_random = 0
        fetched = []
        for pre, start, part, rows, (n_tokens, n_masked, n_random) in parts:
            exchange.get(keys_path(part))  # a URL: both files downloaded into this worker's scratch
            fetched.append(part)
            runs.setdefault(pre, []).append((start, exchange.get(part), rows))
            tokens, masked, nsp_random = tokens + n_tokens, masked + n_masked, nsp_random + n_random
        ordered = [sorted(runs[pre], key=lambda part: part[0]) for pre in sorted(runs)]
        # the keys are read by merge_runs itself (from the files), a block at a time
        info = merge_runs(exchange.writable(location), shard_schema(self.vocab_size, self.span_bounds),
                          [([(keys_path(p), rows) for _, p, rows in run], [p for _, p, _ in run]) for run in ordered],
                          self.batch_rows)
        exchange.put(location, keep=False)
        for part in fetched:  # read for good (a retry downloads them again)
            exchange.release(part)
            exchange.release(keys_path(part))
        yield json.dumps({"split": split, "shard": shard, "rows": info.rows, "sha256": info.sha256,
                          "tokens": tokens, "masked_tokens": masked, "nsp_random": nsp_random})


def _sum_pairs(pairs) -> tuple[int, int]:
    docs = copies = 0
    for d, c in pairs:
        docs += d
        copies += c
    return docs, copies


def build_instances_pipeline(docs, plan, cfg: PreprocessConfig, work: Path | str, tokenizer_path: Path | str,
                             shard_dir: Path | str, vocab_size: int, specials: dict[str, int]) -> None:
    """Document JSON lines (`docs`) -> shards, with `plan` a one-element PCollection holding instance_plan's dict
    (computed by the driver between two jobs, or inside the one job from the documents' tally)."""
    plan = beam.pvalue.AsSingleton(plan)
    if cfg.instances.packing == "tokens":  # whole documents in batches (TokenizeDocBatch)
        docs = docs | "BatchDocs" >> beam.BatchElements(
            min_batch_size=TOKENIZE_BATCH_CHARS, max_batch_size=TOKENIZE_BATCH_CHARS, element_size_fn=len)
        tokenize = TokenizeDocBatch(str(tokenizer_path), str(shard_dir), cfg.seed)
    else:
        tokenize = TokenizeDoc(str(tokenizer_path), str(shard_dir), cfg.seed)
    tokenized = (
        docs
        | "Tokenize" >> beam.ParDo(tokenize, plan).with_outputs("no_tokens", "copies", main="docs")
    )
    tokenized.no_tokens | "WriteNoTokens" >> WriteSmallLines(exchange.join(work, "no_tokens"))
    (
        tokenized.copies
        | "ParseCopies" >> beam.Map(lambda line: (json.loads(line)[0], (1, json.loads(line)[1])))
        | "SumCopies" >> beam.CombinePerKey(_sum_pairs)
        | "CopiesJson" >> beam.MapTuple(lambda lang, dc: json.dumps([lang, dc[0], dc[1]]))
        | "WriteCopies" >> WriteSmallLines(exchange.join(work, "copies"))
    )
    num_shards = {"train": cfg.shards.train_shards, "heldout": cfg.shards.heldout_shards}
    instances = (
        tokenized.docs
        | "ByBucket" >> beam.GroupByKey()
        | "Pairs" >> beam.ParDo(BuildInstances(cfg, specials["cls"], specials["sep"], str(shard_dir)), plan)
    )
    sizes = (
        instances
        | "PreshardSizes" >> beam.MapTuple(lambda pre, spill: (pre, spill[1]))
        | "SumPreshardSizes" >> beam.CombinePerKey(sum)
    )
    (
        instances
        | "ByPreshard" >> beam.GroupByKey()
        | "DealAndMask" >> beam.ParDo(DealAndMask(cfg, str(tokenizer_path), num_shards, vocab_size, str(shard_dir)),
                                      sizes=beam.pvalue.AsDict(sizes))
        | "ByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShardFn(str(shard_dir), vocab_size, cfg.shards.batch_rows,
                                                           cfg.masking.policy in SPAN_BOUND_POLICIES))
        | "WriteSummaries" >> WriteSmallLines(exchange.join(work, "shard_summaries"))
    )
