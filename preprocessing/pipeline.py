"""The preprocessing stage: Wikipedia dump -> clean documents -> WordPiece tokenizer -> BERT instances with K
precomputed mask variants -> Arrow shards + manifest.json (the contract in preprocessing.shards, docs/shards.md).

Two Beam pipelines with the tokenizer training between them (it needs every training document):

  documents  read pages (streamed per file) -> Reshuffle (spread the wikitext parsing over the workers) ->
             clean + split sentences + hold out by title hash -> one record per doc_id (duplicates quarantined)
             -> docs JSONL, per-reason outcome counts, quarantine records
  tokenizer  (driver) WordPiece trained on the training documents only, deterministically (preprocessing.tokenizer)
  instances  tokenise -> group into random-document buckets -> BERT pairs (preprocessing.instances), as
             arrays per pre-shard (RowBlock) -> group by pre-shard -> deal to shards + K masks each, in batches of
             rows by the vectorised core (preprocessing.masking) as Arrow record batches -> group by shard -> write
             sorted shards

With a tokenizer given (preprocess.tokenizer.path, or a corpus version's parent's) there is nothing to train, and
the two pipelines run as one Beam job (_one_job): the instances part plans its buckets and pre-shards from a tally
of the kept documents made inside the job, so the outputs are byte for byte those of two jobs.

Everything is written into RUN/.preprocess-staging first and published (renamed) into RUN/tokenizer and
RUN/shards at the end, so a crash never leaves half a stage behind and a rerun replaces the outputs cleanly.
Same inputs + config + seed -> byte-identical tokenizer, shards and manifest, whatever the bundle order or
worker count (RUN/shards/stats.json holds the timings, which are not part of that contract).

    python -m preprocessing.pipeline configs/local.yaml RUN_DIR
"""

from __future__ import annotations

import glob
import json
import logging
import math
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io import ReadFromText
from apache_beam.pvalue import TaggedOutput
from tokenizers import Tokenizer
from tqdm import tqdm

from bertfactory import __version__
from bertfactory.errors import ConfigError, InputError
from bertfactory.io import AtomicFile, atomic_write_json, atomic_write_text, content_hash, publish_dir, sha256_file

from . import hashing
from .config import CorpusConfig, PreprocessConfig
from .documents import build_documents_pipeline
from .instances import iter_bucket_instances
from .segments import Row, RowBlock, build_rows, pack_sentences, rows_to_block, unpack_sentences
from .sinks import WriteSmallLines
from .masking import SPAN_BOUND_POLICIES, Masker
from .memory import release_freed_memory
from .runners import describe, run_pipeline
from .shards import (SCHEMA_VERSION, SPLITS, Manifest, ShardInfo, SourceInfo, SplitInfo, TokenizerInfo, merge_runs,
                     SPAN_COLUMN, shard_batch, shard_schema, spill_part, write_manifest, write_shard)
from .inputs import expand_inputs
from .lineage import plan_increment
from .sources import validate_file
from .tokenizer import adopt_tokenizer, save_tokenizer, special_ids, train_tokenizer

logger = logging.getLogger(__name__)

STAGING = ".preprocess-staging"
QUARANTINE_FILE = "quarantine.jsonl"
DUPLICATES_FILE = "duplicates.jsonl"
STATS_FILE = "stats.json"


def input_files(corpus: CorpusConfig) -> list[Path]:
    """The corpus's local files, resolved and expanded (preprocessing.inputs); URLs are left out (the stage's
    cache key holds them through the config)."""
    return [f.local_path for f in expand_inputs(corpus) if f.local_path is not None]


# --------------------------------------------------------------------------------------- instances pipeline


def language_copy_rates(cfg: PreprocessConfig, counts: dict) -> dict[str, float]:
    """Expected copies of a training document per language under exponential smoothing (empty: no resampling).
    Shares are measured in characters of the training documents, the unit known before tokenising."""
    sampling = cfg.language_sampling
    if not sampling.enabled:
        return {}
    from .language_sampling import copy_rates

    languages = counts["languages"]
    taking_part = {lang: info.get("train_chars", 0) for lang, info in languages.items()
                   if (lang in sampling.languages if sampling.languages is not None
                       else info.get("train_docs", 0) >= sampling.min_docs) and info.get("train_chars", 0) > 0}
    if len(taking_part) < 2:
        return {}
    return copy_rates(taking_part, sampling.alpha)


class TokenizeDoc(beam.DoFn):
    """Document JSON -> ((split, bucket), (doc_id, sentences as token ids)). A document whose every sentence
    tokenises to nothing (text made only of what the normalizer strips) goes to the `no_tokens` output, to be
    counted as dropped. With language sampling, a training document is emitted as many times as
    preprocessing.language_sampling.copies says (0 = left out), each copy with its own id so its instances and
    masks differ; the `copies` output counts them per language. Buckets, copy rates and language ids come from
    the instance plan (a side input: instance_plan)."""

    def __init__(self, tokenizer_path: str, seed: int = 0):
        self.tokenizer_path = tokenizer_path
        self.seed = seed

    def _copies(self, doc: dict, copy_rates: dict[str, float]) -> list[int]:
        lang = doc.get("lang") or "und"
        if doc["split"] != "train" or lang not in copy_rates:
            return [doc["doc_id"]]
        from .language_sampling import copies

        n = copies(str(doc["doc_id"]), lang, copy_rates, self.seed)
        return [doc["doc_id"] if c == 0 else hashing.hash64("copy", doc["doc_id"], c) for c in range(n)]

    def setup(self) -> None:
        self.tokenizer = Tokenizer.from_file(self.tokenizer_path)

    def start_bundle(self) -> None:
        release_freed_memory()  # what the stages before this one freed (preprocessing.memory)

    def process(self, line: str, plan: dict) -> Iterator:
        buckets, copy_rates, lang_ids = plan["buckets"], plan["copy_rates"], plan["lang_ids"]
        doc = json.loads(line)
        split = doc["split"]
        if doc.get("kind") == "pair":  # both sides, each with its language
            src, tgt = (e.ids for e in self.tokenizer.encode_batch_fast([doc["src"], doc["tgt"]],
                                                                         add_special_tokens=False))
            if src and tgt:
                langs = (lang_ids.get(doc["src_lang"], 0), lang_ids.get(doc["tgt_lang"], 0))
                yield ((split, hashing.bucket_of(doc["doc_id"], buckets[split])),
                       (doc["doc_id"], pack_sentences([src, tgt]), langs))
            else:
                yield TaggedOutput("no_tokens", json.dumps({"split": split, "doc_id": doc["doc_id"], "title": doc["title"]}))
            return
        sentences = [s for paragraph in doc["paragraphs"] for s in paragraph]
        # the fast variant leaves out character offsets: making them (and their Python objects, one per
        # sentence, under the GIL) cost more than the tokenising itself
        encoded = self.tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
        ids = [e.ids for e in encoded if e.ids]
        if ids:
            lang = lang_ids.get(doc.get("lang") or "und", 0)
            copy_ids = self._copies(doc, copy_rates)
            if copy_rates:
                yield TaggedOutput("copies", json.dumps([doc.get("lang") or "und", len(copy_ids)]))
            packed = pack_sentences(ids)
            for doc_id in copy_ids:
                yield (split, hashing.bucket_of(doc_id, buckets[split])), (doc_id, packed, lang)
        else:
            yield TaggedOutput("no_tokens", json.dumps({"split": split, "doc_id": doc["doc_id"], "title": doc["title"]}))


class BuildInstances(beam.DoFn):
    """One bucket of documents (sentences packed as arrays: segments.pack_sentences) -> its instances (see
    preprocessing.instances for the seeding), dealt to pre-shards: rows are turned into arrays ROWS_PER_ELEMENT at
    a time (their row keys hashed for the whole block: hashing.row_keys), and a pre-shard's rows, once about
    ROWS_PER_ELEMENT of them wait, are written to a spill file (row_spill_path); only ((split, pre-shard), (spill
    file, rows)) goes through the shuffle. A local runner hands each worker its whole share of a stage's input at
    once, so rows in the shuffle made DealAndMask's workers hold half the corpus's instances (1.4 GB at 10x sotu)
    before the first pre-shard was dealt."""

    def __init__(self, cfg: PreprocessConfig, cls_id: int, sep_id: int, shard_dir: str):
        self.cfg = cfg
        self.cls_id = cls_id
        self.sep_id = sep_id
        self.shard_dir = shard_dir

    def start_bundle(self) -> None:
        release_freed_memory()

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
        (split, bucket), docs = item
        preshards = plan["preshards"][split]
        docs = [(doc_id, unpack_sentences(packed), lang) for doc_id, packed, lang in docs]
        waiting: dict[int, list[RowBlock]] = {}  # pre-shard -> its blocks not yet spilled
        spilled: dict[int, int] = {}  # pre-shard -> spill files written for it from this bucket
        rows: list[Row] = []
        for row in self._rows(split, bucket, docs):
            rows.append(row)
            if len(rows) == ROWS_PER_ELEMENT:
                self._route(rows_to_block(rows), preshards, waiting)
                rows = []
                full = [pre for pre, parts in waiting.items() if sum(len(b.lengths) for b in parts) >= ROWS_PER_ELEMENT]
                for pre in sorted(full):
                    yield self._spill(split, bucket, pre, waiting.pop(pre), spilled)
        if rows:
            self._route(rows_to_block(rows), preshards, waiting)
        for pre in sorted(waiting):
            yield self._spill(split, bucket, pre, waiting[pre], spilled)

    @staticmethod
    def _route(block: RowBlock, preshards: int, waiting: dict) -> None:
        """Deal a block's rows to their pre-shards (row key modulo the split's pre-shard count)."""
        pre_of = block.keys[:, 0] % np.uint64(preshards)
        order = np.argsort(pre_of, kind="stable")
        bounds = np.searchsorted(pre_of[order], np.arange(preshards + 1, dtype=np.uint64))
        for pre in range(preshards):
            if bounds[pre] < bounds[pre + 1]:
                waiting.setdefault(pre, []).append(block.take(order[bounds[pre]:bounds[pre + 1]])[0])

    def _spill(self, split: str, bucket: int, pre: int, parts: list[RowBlock], spilled: dict) -> tuple:
        block = RowBlock.concat(parts)
        sequence = spilled[pre] = spilled.get(pre, -1) + 1
        path = row_spill_path(self.shard_dir, split, pre, bucket, sequence)
        path.parent.mkdir(parents=True, exist_ok=True)
        # named by what it holds (a bucket's n-th block for a pre-shard), so a retried bundle rewrites the same
        # file with the same bytes; not synced: a crash reruns the job
        with AtomicFile(path, durable=False) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **block._asdict())
        return (split, pre), (str(path), len(block.lengths))


def row_spill_path(shard_dir: str | Path, split: str, pre: int, bucket: int, sequence: int) -> Path:
    """Where BuildInstances leaves a block of a pre-shard's rows for DealAndMask (in the staging shards directory,
    removed with the shard spills once the instances job has finished)."""
    return Path(shard_dir) / split / ".spill-rows" / f"{pre:05d}-{bucket:06d}-{sequence:04d}.npz"


def load_row_spill(path: str) -> RowBlock:
    """A spill file of BuildInstances back as a RowBlock (plain arrays only: no pickled objects are read)."""
    with np.load(path, allow_pickle=False) as arrays:
        return RowBlock(*(arrays[field] for field in RowBlock._fields))


# rows per spill file of BuildInstances (about): few files and elements, bounded arrays in the worker
ROWS_PER_ELEMENT = 2048


# rows masked and turned into one record batch at a time (bounds the masker's [rows * K, max_seq_len] arrays)
MASK_BATCH_ROWS = 4096


class DealAndMask(beam.DoFn):
    """One pre-shard's rows (BuildInstances' spill files) -> each numbered and dealt to its shard, masked, as
    record batches. The rows of a split are numbered in (pre-shard, sort key) order and dealt round-robin, so every
    shard holds N/S rows +-1 (ranks of a data-parallel job get equal work) and the layout depends only on the keys,
    never on bundles.
    Each shard's part of the pre-shard is masked by the vectorised core (Masker.variants_flat) in batches of
    MASK_BATCH_ROWS, written to a spill file (shards.spill_part) and announced as ((split, shard), (pre-shard,
    first row, sort keys [n, 3] uint64, spill file, (tokens, masked positions, NotNext/swapped rows)))."""

    def __init__(self, cfg: PreprocessConfig, tokenizer_path: str, num_shards: dict[str, int], vocab_size: int,
                 shard_dir: str):
        self.cfg = cfg
        self.tokenizer_path = tokenizer_path
        self.num_shards = num_shards
        self.vocab_size = vocab_size
        self.shard_dir = shard_dir

    def setup(self) -> None:
        # special ids, word boundaries and (entity policy) token texts, all from the tokenizer itself
        self.masker = Masker.from_tokenizer(self.cfg.masking, self.cfg.seed, Tokenizer.from_file(self.tokenizer_path),
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
        for shard in range(shards):
            mine = order[(shard - offset) % shards::shards]
            for start in range(0, len(mine), MASK_BATCH_ROWS):
                chunk, offsets = block.take(mine[start:start + MASK_BATCH_ROWS])
                batch, totals = self._batch(chunk, offsets)
                # the rows go to disk here, only their keys and file through the shuffle: a local runner hands a
                # group to one worker whole, and a shard's group would otherwise be a fixed share of the corpus
                path = spill_dir(self.shard_dir, split, shard) / f"{pre}-{start}.arrow"
                path.parent.mkdir(parents=True, exist_ok=True)
                # a retried bundle rewrites the same bytes; not synced to disk: a crash reruns the job, and
                # WriteShardFn's shard file (synced) is what survives it
                with AtomicFile(path, durable=False) as tmp:
                    spill_part(tmp, batch)
                yield (split, shard), (pre, start, chunk.keys, str(path), totals)

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


def shard_name(index: int) -> str:
    return f"part-{index:05d}.arrow"


def spill_dir(shard_dir: str | Path, split: str, shard: int) -> Path:
    """Where DealAndMask leaves a shard's masked parts for WriteShardFn to merge (inside the staging shards
    directory). The driver removes them after the instances job has finished, not WriteShardFn: a runner that
    retries a WriteShards bundle (Dataflow, Flink) must find its parts again."""
    return Path(shard_dir) / split / f".spill-{Path(shard_name(shard)).stem}"


class WriteShardFn(beam.DoFn):
    """All parts of one shard (their keys and spill files) -> the shard file (rows sorted by their sort key) -> a
    summary line. Each part is sorted by key and a pre-shard's parts cover consecutive key ranges, so the
    pre-shards' runs are merged by key into the shard (shards.merge_runs): the worker holds the sort keys and a
    few hundred rows per pre-shard, not the shard."""

    def __init__(self, shard_dir: str, vocab_size: int, batch_rows: int, span_bounds: bool = False):
        self.shard_dir = shard_dir
        self.vocab_size = vocab_size
        self.batch_rows = batch_rows
        self.span_bounds = span_bounds  # the schema has the mask_spans column (masking policy span)

    def start_bundle(self) -> None:
        release_freed_memory()

    def process(self, item) -> Iterator[str]:
        (split, shard), parts = item
        path = Path(self.shard_dir) / split / shard_name(shard)
        runs: dict[int, list] = {}
        tokens = masked = nsp_random = 0
        for pre, start, keys, part, (n_tokens, n_masked, n_random) in parts:
            runs.setdefault(pre, []).append((start, keys, Path(part)))
            tokens, masked, nsp_random = tokens + n_tokens, masked + n_masked, nsp_random + n_random
        ordered = [sorted(runs[pre], key=lambda part: part[0]) for pre in sorted(runs)]
        info = merge_runs(path, shard_schema(self.vocab_size, self.span_bounds),
                          [(np.concatenate([k.reshape(-1, 3) for _, k, _ in run]), [p for _, _, p in run])
                           for run in ordered], self.batch_rows)
        yield json.dumps({"split": split, "shard": shard, "rows": info.rows, "sha256": info.sha256,
                          "tokens": tokens, "masked_tokens": masked, "nsp_random": nsp_random})


def _sum_pairs(pairs) -> tuple[int, int]:
    docs = copies = 0
    for d, c in pairs:
        docs += d
        copies += c
    return docs, copies


def build_instances_pipeline(docs, plan, cfg: PreprocessConfig, work: Path, tokenizer_path: Path, shard_dir: Path,
                             vocab_size: int, specials: dict[str, int]) -> None:
    """Document JSON lines (`docs`) -> shards, with `plan` a one-element PCollection holding instance_plan's dict
    (computed by the driver between two jobs, or inside the one job from the documents' tally)."""
    plan = beam.pvalue.AsSingleton(plan)
    tokenized = (
        docs
        | "Tokenize" >> beam.ParDo(TokenizeDoc(str(tokenizer_path), cfg.seed), plan)
        .with_outputs("no_tokens", "copies", main="docs")
    )
    tokenized.no_tokens | "WriteNoTokens" >> WriteSmallLines(work / "no_tokens")
    (
        tokenized.copies
        | "ParseCopies" >> beam.Map(lambda line: (json.loads(line)[0], (1, json.loads(line)[1])))
        | "SumCopies" >> beam.CombinePerKey(_sum_pairs)
        | "CopiesJson" >> beam.MapTuple(lambda lang, dc: json.dumps([lang, dc[0], dc[1]]))
        | "WriteCopies" >> WriteSmallLines(work / "copies")
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
        | "WriteSummaries" >> WriteSmallLines(work / "shard_summaries")
    )


# ------------------------------------------------------------------------------------------------- driver


def _read_lines(pattern: str) -> Iterator[str]:
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield line


def _docs(work: Path) -> Iterator[dict]:
    for line in _read_lines(str(work / "docs" / "part*.jsonl")):
        yield json.loads(line)


@dataclass
class _Staging:
    """The directories of one run before they are published."""

    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer" / "tokenizer.json"

    def create(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        for d in (self.work, self.shards, self.tokenizer.parent):
            d.mkdir(parents=True)


def _empty_corpus_error(files: list[str], corpus: CorpusConfig, counts: dict) -> InputError:
    why = {
        "namespace": f"namespace not in {corpus.namespaces}",
        "redirect": "redirect page",
        "empty": "no text left after removing markup",
        "too_short": f"shorter than min_doc_chars={corpus.min_doc_chars} or min_doc_sentences={corpus.min_doc_sentences}",
    }
    lines = [f"no training documents left after filtering {', '.join(files)}: {counts['docs_read']} records read, "
             f"{counts['docs_kept']} kept ({counts['docs'].get('heldout', 0)} of them held out)"]
    lines += [f"  dropped {reason} ({why.get(reason, reason)}): {n}" for reason, n in counts["docs_dropped"].items()]
    lines += [f"  quarantined {reason}: {n}" for reason, n in counts["quarantined"].items()]
    lines += [f"  duplicates removed ({kind}): {n}" for kind, n in counts["duplicates_removed"].items() if n]
    return InputError("\n".join(lines))


def _outcome_counts(outcomes: Counter) -> dict:
    """{"read": n, "kept": n, "docs_dropped": {reason: n}, "quarantined": {reason: n}, "duplicates": {kind: n}}"""
    def by(prefix: str) -> dict:
        return {k.split(":", 1)[1]: v for k, v in sorted(outcomes.items()) if k.startswith(prefix + ":")}

    return {"docs_read": outcomes.get("read", 0), "docs_dropped": by("dropped"), "quarantined": by("quarantined"),
            "duplicates_removed": by("duplicate")}


class DocTally:
    """What the kept document records say in sum: documents per split, per language (and split), training
    characters per language, sentences, pairs, documents per source. The driver tallies the docs files with it;
    inside a single job (TallyDocs) it gives the instance plan the same figures before any document is tokenised."""

    def __init__(self) -> None:
        self.split_docs: Counter = Counter()
        self.lang_docs: dict[str, Counter] = {}
        self.lang_chars: Counter = Counter()
        self.kept_by_source: Counter = Counter()
        self.sentences = self.pairs = 0

    def add(self, doc: dict) -> None:
        self.split_docs[doc["split"]] += 1
        self.kept_by_source[doc["source"]] += 1
        if doc.get("kind") == "pair":
            self.pairs += 1
            lang = f"{doc['src_lang']}-{doc['tgt_lang']}"
        else:
            self.sentences += sum(len(p) for p in doc["paragraphs"])
            lang = doc.get("lang") or "und"
            if doc["split"] == "train":
                self.lang_chars[lang] += sum(len(s) for p in doc["paragraphs"] for s in p)
        self.lang_docs.setdefault(lang, Counter())[doc["split"]] += 1

    def merge(self, other: "DocTally") -> "DocTally":
        self.split_docs += other.split_docs
        for lang, c in other.lang_docs.items():
            self.lang_docs.setdefault(lang, Counter()).update(c)
        self.lang_chars += other.lang_chars
        self.kept_by_source += other.kept_by_source
        self.sentences += other.sentences
        self.pairs += other.pairs
        return self

    def counts(self) -> dict:
        """The manifest's `docs` and `languages` counts (what instance_plan reads)."""
        return {
            "docs": {s: self.split_docs[s] for s in SPLITS},
            "languages": {lang: {"docs": sum(c.values()), "train_docs": c["train"],
                                 **({"train_chars": self.lang_chars[lang]} if lang in self.lang_chars else {})}
                          for lang, c in sorted(self.lang_docs.items())},
        }


class TallyDocs(beam.CombineFn):
    """Document JSON lines -> DocTally.counts() over all of them."""

    def create_accumulator(self) -> DocTally:
        return DocTally()

    def add_input(self, tally: DocTally, line: str) -> DocTally:
        tally.add(json.loads(line))
        return tally

    def merge_accumulators(self, tallies) -> DocTally:
        merged = DocTally()
        for tally in tallies:
            merged.merge(tally)
        return merged

    def extract_output(self, tally: DocTally) -> dict:
        return tally.counts()


def _documents_stage(corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], staging: _Staging,
                     prior_index: str | None = None) -> dict:
    """Run the documents pipeline; write quarantine.jsonl and duplicates.jsonl; return the document counts."""
    run_pipeline(lambda p: build_documents_pipeline(p, corpus, cfg.heldout_fraction, files, staging.work, prior_index),
                 cfg.runner, "documents")
    return _document_counts(files, staging)


def _document_counts(files: list[str], staging: _Staging) -> dict:
    """The documents pipeline's outputs -> the document counts; quarantine.jsonl and duplicates.jsonl written."""
    total: Counter = Counter()
    per_source: dict[int, Counter] = {}
    for line in _read_lines(str(staging.work / "outcomes" / "part*.jsonl")):
        (source, what), n = json.loads(line)
        total[what] += n
        per_source.setdefault(source, Counter())[what] += n
    tally = DocTally()
    for doc in _docs(staging.work):
        tally.add(doc)
    quarantine = sorted(_read_lines(str(staging.work / "quarantine" / "part*.jsonl")))
    atomic_write_text(staging.shards / QUARANTINE_FILE, "".join(quarantine))
    duplicates = sorted(_read_lines(str(staging.work / "duplicates" / "part*.jsonl")))
    atomic_write_text(staging.shards / DUPLICATES_FILE, "".join(duplicates))
    counts = _outcome_counts(total)
    kept = sum(tally.split_docs.values())
    removed = sum(counts["duplicates_removed"].values())
    tallied = tally.counts()
    counts.update({
        "docs_kept": kept,
        "docs": tallied["docs"],
        "sentences": tally.sentences,
        "dedup_rate": round(removed / max(1, kept + removed), 6),
        "languages": tallied["languages"],
        "sources": [{"file": Path(f).name, **_outcome_counts(per_source.get(i, Counter())),
                     "docs_kept": tally.kept_by_source[i]} for i, f in enumerate(files)],
    })
    if tally.pairs:
        counts["pairs"] = tally.pairs
    return counts


DEDUP_INDEX_FILE = "dedup_index.arrow"


def _dedup_index(staging: "_Staging", parent_index: Path | None, cfg) -> ShardInfo:
    """Merge the kept documents' dedup entries (and the parent version's) into RUN/shards/dedup_index.arrow: the
    index the next corpus version deduplicates against."""
    from .dedup import merge_dedup_index

    parts = sorted(Path(p) for p in glob.glob(str(staging.work / "dedup_index" / "part-*.arrow")))
    info = merge_dedup_index(parts, parent_index, staging.shards / DEDUP_INDEX_FILE, cfg)
    return ShardInfo(path=DEDUP_INDEX_FILE, rows=info["rows"], sha256=info["sha256"])


def _doc_texts(doc: dict) -> list[str]:
    """The text of a document record as paragraphs (a sentence pair: its two sides)."""
    if doc.get("kind") == "pair":
        return [doc["src"], doc["tgt"]]
    return [" ".join(paragraph) for paragraph in doc["paragraphs"]]


def _doc_lang(doc: dict) -> str:
    return (f"{doc['src_lang']}-{doc['tgt_lang']}" if doc.get("kind") == "pair" else doc.get("lang")) or "und"


def _tokenizer_sample(cfg: PreprocessConfig, work: Path):
    """The language-balanced, deterministic sample of training documents the tokenizer learns from
    (preprocessing.tokenizer_sample: q_i ~ p_i^alpha of sample_max_chars, documents chosen by a stable hash)."""
    from .tokenizer_sample import plan_sample

    t = cfg.tokenizer
    return plan_sample(((_doc_lang(d), str(d["doc_id"]), sum(map(len, _doc_texts(d))))
                        for d in _docs(work) if d["split"] == "train"), t.sample_max_chars, t.sample_alpha, cfg.seed)


def _train_texts(work: Path, plan, total: int, desc: str) -> Iterator[str]:
    """The paragraphs of the sampled training documents (file order: the trained vocabulary does not depend on
    it)."""
    for doc in tqdm(_docs(work), total=total, desc=desc, unit="doc", disable=None, leave=False):
        if doc["split"] == "train" and plan.copies(_doc_lang(doc), str(doc["doc_id"])):
            yield from _doc_texts(doc)


# the sample the manifest's fertility table is measured on, per language: the first FERTILITY_DOCS documents in
# rank order (held-out first), cut at FERTILITY_CHARS characters of text. Bounded so that the driver's second
# tokenisation stays a fixed cost (it was 4-9 s of a 2.2 M-token corpus); a ratio of ~200 k tokens is stable to
# well under 1 %
FERTILITY_DOCS = 200
FERTILITY_CHARS = 1_000_000


def _fertility(tokenizer: Tokenizer, work: Path, seed: int) -> dict:
    """Tokens per character / word and unknown rate per language, with the tokenizer just made, on a deterministic
    bounded sample of each language: up to FERTILITY_DOCS documents (held-out first, then training; chosen by a
    stable hash), their text cut at FERTILITY_CHARS characters."""
    from .fertility import fertility, first_chars

    import heapq

    kept: dict[str, list] = {}  # per language a heap of the FERTILITY_DOCS smallest ranks (negated: a max-heap)
    for doc in _docs(work):
        rank = (int(doc["split"] != "heldout"), hashing.hash64("fertility", seed, doc["doc_id"]))
        heap = kept.setdefault(_doc_lang(doc), [])
        item = (-rank[0], -rank[1], _doc_texts(doc))
        if len(heap) < FERTILITY_DOCS:
            heapq.heappush(heap, item)
        elif item[:2] > heap[0][:2]:
            heapq.heapreplace(heap, item)
    texts = {lang: first_chars([t for *_r, ts in sorted(heap, key=lambda d: (-d[0], -d[1])) for t in ts],
                                FERTILITY_CHARS) for lang, heap in kept.items()}
    return fertility(tokenizer, texts)


def _given_tokenizer(cfg: PreprocessConfig, increment) -> Path | None:
    """The tokenizer to adopt rather than train: an incremental version's parent's (it keeps its token ids), else
    preprocess.tokenizer.path; None when one is to be trained."""
    if increment is not None:
        return increment.tokenizer_path
    return Path(cfg.tokenizer.path).expanduser() if cfg.tokenizer.path else None


def _train_tokenizer_stage(cfg: PreprocessConfig, counts: dict, staging: _Staging) -> Tokenizer:
    total = sum(counts["docs"].values())
    plan = _tokenizer_sample(cfg, staging.work)
    counts["tokenizer_sample_chars"] = dict(sorted(plan.chars.items()))
    passes = iter(["tokenizer: counting words", "tokenizer: training", "tokenizer: training"])
    tokenizer = train_tokenizer(lambda: _train_texts(staging.work, plan, total, next(passes)), cfg.tokenizer)
    save_tokenizer(tokenizer, staging.tokenizer)
    return tokenizer


def corpus_languages(counts: dict) -> list[str]:
    """The languages of the corpus in id order (the manifest's instance_format.languages): sorted codes, pairs
    split into their two languages."""
    return sorted({code for lang in counts["languages"] for code in lang.split("-")})


def split_chars(counts: dict) -> dict[str, int]:
    """Characters of text per split: the training documents' (counted per language by the documents stage), the
    held-out split's estimated from its share of documents."""
    train = sum(info.get("train_chars", 0) for info in counts["languages"].values())
    per_doc = train / max(1, counts["docs"]["train"])
    return {"train": train, "heldout": round(per_doc * counts["docs"]["heldout"])}


# instance text (characters x dupe_factor) per pre-shard at most: what DealAndMask sorts in one worker at a time
PRESHARD_CHARS = 16_000_000


def preshard_counts(cfg: PreprocessConfig, chars: dict[str, int]) -> dict[str, int]:
    """Pre-shards per split: a multiple of the split's shard count, growing with its text, so a pre-shard holds
    about PRESHARD_CHARS of instance text at most whatever the corpus size (peak memory stays flat)."""
    shards = {"train": cfg.shards.train_shards, "heldout": cfg.shards.heldout_shards}
    return {s: shards[s] * max(1, math.ceil(chars[s] * cfg.instances.dupe_factor / (PRESHARD_CHARS * shards[s])))
            for s in SPLITS}


def instance_plan(cfg: PreprocessConfig, counts: dict) -> dict:
    """What the instances pipeline needs to know of the whole corpus before it starts, from the document counts
    (`docs` and `languages`: DocTally.counts()): random buckets and pre-shards per split, language copy rates
    (language sampling) and language ids."""
    chars = split_chars(counts)
    return {
        "buckets": {s: max(1, math.ceil(counts["docs"][s] / cfg.instances.docs_per_bucket),
                           math.ceil(chars[s] / cfg.instances.max_bucket_chars)) for s in SPLITS},
        "copy_rates": language_copy_rates(cfg, counts),
        "lang_ids": {lang: i for i, lang in enumerate(corpus_languages(counts))},
        "preshards": preshard_counts(cfg, chars),
    }


def _instances_stage(cfg: PreprocessConfig, counts: dict, staging: _Staging, vocab_size: int,
                     specials: dict[str, int]) -> tuple[dict[str, SplitInfo], dict]:
    """Run the instances pipeline on the documents pipeline's docs files (a second Beam job); see
    _instance_results for what it returns."""
    plan = instance_plan(cfg, counts)
    run_pipeline(
        lambda p: build_instances_pipeline(p | "ReadDocs" >> ReadFromText(str(staging.work / "docs" / "part*.jsonl")),
                                           p | "Plan" >> beam.Create([plan]), cfg, staging.work, staging.tokenizer,
                                           staging.shards, vocab_size, specials),
        cfg.runner, "instances",
    )
    return _instance_results(cfg, counts, staging, vocab_size)


def _one_job(corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], staging: _Staging,
             prior_index: str | None, vocab_size: int, specials: dict[str, int]) -> None:
    """Both pipelines as one Beam job (the tokenizer is given, so nothing has to happen between them): the kept
    documents go on to the instances pipeline, whose plan is computed inside the job from their tally (TallyDocs,
    the same figures the driver would compute), saving a second job's start-up (~5 s of worker processes on the
    local runner)."""
    def build(p):
        docs = build_documents_pipeline(p, corpus, cfg.heldout_fraction, files, staging.work, prior_index)
        plan = (docs
                | "TallyDocs" >> beam.CombineGlobally(TallyDocs())
                | "InstancePlan" >> beam.Map(lambda counts: instance_plan(cfg, counts)))
        build_instances_pipeline(docs, plan, cfg, staging.work, staging.tokenizer, staging.shards, vocab_size, specials)

    run_pipeline(build, cfg.runner, "documents+instances")


def _instance_results(cfg: PreprocessConfig, counts: dict, staging: _Staging,
                      vocab_size: int) -> tuple[dict[str, SplitInfo], dict]:
    """The instances pipeline's outputs -> the splits and the instance counts; empty shards filled in, spill files
    removed, documents without tokens moved from kept to dropped in `counts`."""
    plan = instance_plan(cfg, counts)  # the counts the job planned with: the buckets and copy rates it used
    buckets, rates = plan["buckets"], plan["copy_rates"]
    for spilled in sorted(staging.shards.glob("*/.spill-*")):  # merged into their shards; never published
        shutil.rmtree(spilled)
    if rates:
        copies = {lang: {"docs": d, "copies": c, "rate": round(rates.get(lang, 1.0), 6)}
                  for lang, d, c in sorted(map(json.loads, _read_lines(str(staging.work / "copies" / "part*.jsonl"))))}
        counts["language_sampling"] = {"alpha": cfg.language_sampling.alpha, "languages": copies}
    for doc in map(json.loads, _read_lines(str(staging.work / "no_tokens" / "part*.jsonl"))):
        counts["docs_kept"] -= 1
        counts["docs"][doc["split"]] -= 1
        counts["docs_dropped"]["no_tokens"] = counts["docs_dropped"].get("no_tokens", 0) + 1
    summaries = {(s["split"], s["shard"]): s for s in map(json.loads, _read_lines(str(staging.work / "shard_summaries" / "part*.jsonl")))}
    splits: dict[str, SplitInfo] = {}
    tokens, masked, nsp_random = Counter(), Counter(), Counter()
    for split, n_shards in (("train", cfg.shards.train_shards), ("heldout", cfg.shards.heldout_shards)):
        infos = []
        for shard in range(n_shards):
            summary = summaries.get((split, shard))
            if summary is None:  # no instance hashed to this shard: an empty shard keeps the layout regular
                info = write_shard(staging.shards / split / shard_name(shard), [], vocab_size, cfg.shards.batch_rows,
                                   cfg.masking.policy in SPAN_BOUND_POLICIES)
                summary = {"rows": 0, "sha256": info.sha256, "tokens": 0, "masked_tokens": 0, "nsp_random": 0}
            infos.append(ShardInfo(path=f"{split}/{shard_name(shard)}", rows=summary["rows"], sha256=summary["sha256"]))
            tokens[split] += summary["tokens"]
            masked[split] += summary["masked_tokens"]
            nsp_random[split] += summary["nsp_random"]
        splits[split] = SplitInfo(rows=sum(i.rows for i in infos), tokens=tokens[split], shards=infos)
    instance_counts = {
        "instances": {s: splits[s].rows for s in SPLITS},
        "nsp_random": {s: nsp_random[s] for s in SPLITS},
        "tokens": sum(splits[s].tokens for s in SPLITS),
        "masked_tokens": sum(masked.values()),
    }
    return splits, {"random_buckets": buckets, **instance_counts}


def config_hash(corpus: CorpusConfig, cfg: PreprocessConfig) -> str:
    """Hash of everything that decides the outputs (the runner section does not, so it is left out)."""
    return content_hash({"corpus": corpus.model_dump(mode="json"),
                         "preprocess": cfg.model_dump(mode="json", exclude={"runner"})})


def _is_lowercase(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases, asked of the normalizer itself: an adopted tokenizer may
    lowercase with a `Lowercase` step inside a `Sequence` rather than with BertNormalizer(lowercase=True)."""
    normalizer = tokenizer.normalizer
    return normalizer is not None and normalizer.normalize_str("ABC") == "abc"


# what the rows of each instance format hold (the manifest's instance_format; docs/shards.md)
_NO_LABEL = {"0": "unused"}
FORMAT_LAYOUTS = {
    "nsp-pairs": {"segments": "sentences", "layout": "[CLS] A [SEP] B [SEP]",
                  "nsp_label": {"0": "IsNext", "1": "NotNext"}},
    "sop-pairs": {"segments": "sentences", "layout": "[CLS] A [SEP] B [SEP]",
                  "nsp_label": {"0": "in order", "1": "swapped"}},
    "full-sentences": {"segments": "packed sentences across documents ([SEP] between documents)",
                       "layout": "[CLS] text [SEP]", "nsp_label": _NO_LABEL},
    "doc-sentences": {"segments": "packed sentences of one document", "layout": "[CLS] text [SEP]",
                      "nsp_label": _NO_LABEL},
    "single-segment": {"segments": "a contiguous span of one document", "layout": "[CLS] text [SEP]",
                       "nsp_label": _NO_LABEL},
    "clm": {"segments": "consecutive fixed-length segments of one document (segment_index)", "layout": "text",
            "nsp_label": _NO_LABEL},
    "tlm-pairs": {"segments": "an aligned sentence pair (lang_a, lang_b; positions restart at the target)",
                  "layout": "[CLS] source [SEP] target [SEP]", "nsp_label": _NO_LABEL},
}


def _manifest(corpus: CorpusConfig, cfg: PreprocessConfig, tokenizer: Tokenizer, tokenizer_sha256: str,
              specials: dict[str, int], counts: dict, buckets: dict, splits: dict[str, SplitInfo],
              sources: list[SourceInfo]) -> Manifest:
    languages = corpus_languages(counts)
    inst, masking = cfg.instances, cfg.masking
    return Manifest(
        schema_version=SCHEMA_VERSION,
        created_by=f"bertfactory {__version__} preprocessing.pipeline",
        tokenizer=TokenizerInfo(path="../tokenizer/tokenizer.json", sha256=tokenizer_sha256,
                                vocab_size=tokenizer.get_vocab_size(with_added_tokens=True), special_ids=specials,
                                lowercase=_is_lowercase(tokenizer)),
        instance_format={
            "name": inst.format, "max_seq_len": inst.max_seq_len, "short_seq_prob": inst.short_seq_prob,
            "nsp_random_prob": inst.nsp_random_prob, "dupe_factor": inst.dupe_factor,
            "docs_per_bucket": inst.docs_per_bucket, "random_buckets": buckets,
            **FORMAT_LAYOUTS[inst.format],
            "languages": languages,
        },
        masking={**masking.model_dump(mode="json"),
                 "keep_prob": round(1.0 - masking.mask_token_prob - masking.random_token_prob, 10),
                 "seeding": "counter-hash v2: splitmix64 keys of variant_seeds(seed, doc_id, instance_index)[variant] "
                            "(preprocessing.masking)",
                 # only span shards say it (every other manifest keeps its bytes)
                 **({"span_bounds": f"{SPAN_COLUMN}: per variant, each masked span's length in mask_positions "
                                    "order" + (" (dynamic: made at read time)" if masking.dynamic else "")}
                    if masking.policy in SPAN_BOUND_POLICIES else {})},
        seed=cfg.seed,
        config_hash=config_hash(corpus, cfg),
        counts=counts,
        splits=splits,
        sources=sources,
        runner=describe(cfg.runner),
    )


def check_recipe(corpus: CorpusConfig, cfg: PreprocessConfig) -> None:
    """Settings of the two sections that only make sense together (ConfigError naming both)."""
    pairs = corpus.format == "parallel"
    if pairs != (cfg.instances.format == "tlm-pairs"):
        raise ConfigError(f"corpus.format {corpus.format!r} with preprocess.instances.format "
                          f"{cfg.instances.format!r}: sentence pairs (format parallel) make tlm-pairs instances and "
                          "tlm-pairs need sentence pairs; set both or neither")


def _documents_done(counts: dict, seconds: float, files: list[str], corpus: CorpusConfig) -> None:
    """Log the document counts; refuse a corpus left without training documents."""
    logger.info("documents: %d pages read, %d kept %s, %d sentences; dropped %s; quarantined %s (%.1f s)",
                counts["docs_read"], counts["docs_kept"], counts["docs"], counts["sentences"],
                counts["docs_dropped"], counts["quarantined"], seconds)
    if counts["docs"]["train"] == 0:
        raise _empty_corpus_error(files, corpus, counts)


def run_preprocess(corpus: CorpusConfig, cfg: PreprocessConfig, run_dir: Path) -> dict:
    """Run the whole stage into RUN/tokenizer and RUN/shards; return the manifest as a dict."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    check_recipe(corpus, cfg)
    inputs = expand_inputs(corpus)
    increment = plan_increment(corpus.parent, inputs) if corpus.parent else None
    if increment is not None:
        inputs = increment.new_files
    files = [f.location for f in inputs]
    for f in inputs:
        validate_file(corpus, f.location)
    shas = increment.input_sha256 if increment is not None else {f: f.sha256() for f in inputs}
    sources = [SourceInfo(path=f.name, sha256=shas[f], bytes=f.size()) for f in inputs]
    staging = _Staging(run_dir / STAGING)
    staging.create()
    timings = {"validate": time.perf_counter() - t_start}
    try:
        prior = increment.dedup_index_path if increment is not None else None
        prior = str(prior) if prior else None
        given = _given_tokenizer(cfg, increment)
        if given is None:  # the tokenizer learns from the clean documents: two jobs, the training between them
            t0 = time.perf_counter()
            counts = _documents_stage(corpus, cfg, files, staging, prior)
            timings["documents"] = time.perf_counter() - t0
            _documents_done(counts, timings["documents"], files, corpus)
            t0 = time.perf_counter()
            tokenizer = _train_tokenizer_stage(cfg, counts, staging)
            specials = special_ids(tokenizer, str(staging.tokenizer))
            counts["fertility"] = _fertility(tokenizer, staging.work, cfg.seed)
            timings["tokenizer"] = time.perf_counter() - t0
            logger.info("tokenizer: %d tokens (%.1f s)", tokenizer.get_vocab_size(), timings["tokenizer"])
            t0 = time.perf_counter()
            vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
            splits, instance_counts = _instances_stage(cfg, counts, staging, vocab_size, specials)
            timings["instances"] = time.perf_counter() - t0
        else:  # nothing to learn between the pipelines: one job
            t0 = time.perf_counter()
            tokenizer = adopt_tokenizer(given, staging.tokenizer)
            specials = special_ids(tokenizer, str(cfg.tokenizer.path or staging.tokenizer))
            vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
            timings["tokenizer"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            _one_job(corpus, cfg, files, staging, prior, vocab_size, specials)
            counts = _document_counts(files, staging)
            timings["documents+instances"] = time.perf_counter() - t0
            _documents_done(counts, timings["documents+instances"], files, corpus)
            t0 = time.perf_counter()
            counts["fertility"] = _fertility(tokenizer, staging.work, cfg.seed)
            timings["tokenizer"] += time.perf_counter() - t0
            splits, instance_counts = _instance_results(cfg, counts, staging, vocab_size)
        buckets = instance_counts.pop("random_buckets")
        counts.update(instance_counts)
        logger.info("instances: %s, %d tokens, %d masked positions over %d variants", counts["instances"],
                    counts["tokens"], counts["masked_tokens"], cfg.masking.variants)

        manifest = _manifest(corpus, cfg, tokenizer, sha256_file(staging.tokenizer), specials, counts, buckets,
                             splits, sources)
        manifest.dedup_index = _dedup_index(staging, increment.dedup_index_path if increment is not None else None,
                                            corpus.dedup)
        if increment is not None:
            manifest.corpus_version = increment.version
            manifest.parent = increment.parent_info(corpus.parent)
            manifest.inputs_seen = increment.inputs_seen()
        else:
            manifest.inputs_seen = sorted({s.sha256 for s in sources})
        write_manifest(staging.shards, manifest)
        timings["total"] = time.perf_counter() - t_start
        one_job = timings.get("documents+instances", 0.0)
        atomic_write_json(staging.shards / STATS_FILE, {
            "timings_s": {k: round(v, 3) for k, v in timings.items()},
            "pages_per_s": round(counts["docs_read"] / max(timings.get("documents", one_job), 1e-9), 1),
            "instances_per_s": round(sum(counts["instances"].values()) / max(timings.get("instances", one_job), 1e-9), 1),
            "counts": counts,
            "runner": describe(cfg.runner),
        })
        # publish: the tokenizer first, then the shards whose manifest points at it
        shutil.rmtree(staging.work)
        publish_dir(staging.tokenizer.parent, run_dir / "tokenizer")
        publish_dir(staging.shards, run_dir / "shards")
    finally:
        # after a failure the previous run's published outputs stay untouched; no staging is left behind
        shutil.rmtree(staging.root, ignore_errors=True)
    logger.info("preprocess: done in %.1f s -> %s", time.perf_counter() - t_start, run_dir / "shards")
    return manifest.model_dump(mode="json")


if __name__ == "__main__":
    from bertfactory.config import apply_overrides, load_yaml, validate

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    recipe = apply_overrides(load_yaml(sys.argv[1]), sys.argv[3:])
    corpus_cfg = validate(CorpusConfig, recipe.get("corpus") or {}, f"{sys.argv[1]}: corpus")
    preprocess_cfg = validate(PreprocessConfig, recipe.get("preprocess") or {}, f"{sys.argv[1]}: preprocess")
    print(json.dumps(run_preprocess(corpus_cfg, preprocess_cfg, Path(sys.argv[2]))["counts"], indent=1))
