"""The preprocessing stage: Wikipedia dump -> clean documents -> WordPiece tokenizer -> BERT instances with K
precomputed mask variants -> Arrow shards + manifest.json (the contract in preprocessing.shards, docs/shards.md).

Two Beam pipelines with the tokenizer training between them (it needs every training document):

  documents  read pages (streamed per file) -> Reshuffle (spread the wikitext parsing over the workers) ->
             clean + split sentences + hold out by title hash -> one record per doc_id (duplicates quarantined)
             -> docs JSONL, per-reason outcome counts, quarantine records
  tokenizer  (driver) WordPiece trained on the training documents only, deterministically (preprocessing.tokenizer)
  instances  tokenise -> group into random-document buckets -> BERT pairs (preprocessing.instances) ->
             Reshuffle -> K masks each (preprocessing.masking) -> group by shard -> write sorted shards

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
from apache_beam.io import ReadFromText, WriteToText
from apache_beam.pvalue import TaggedOutput
from tokenizers import Tokenizer
from tqdm import tqdm

from bertfactory import __version__
from bertfactory.errors import InputError
from bertfactory.io import atomic_write_json, atomic_write_text, content_hash, publish_dir, sha256_file
from bertfactory.samples import resolve_input

from . import hashing
from .clean import wikitext_to_paragraphs
from .config import CorpusConfig, PreprocessConfig
from .instances import build_bucket_instances
from .masking import Masker, continuation_ids
from .runners import describe, run_pipeline
from .sentences import split_sentences
from .shards import SCHEMA_VERSION, SPLITS, Manifest, ShardInfo, SourceInfo, SplitInfo, TokenizerInfo, write_manifest, write_shard
from .sources.wikipedia import Page, Quarantined, iter_pages, validate_dump
from .tokenizer import adopt_tokenizer, save_tokenizer, special_ids, train_tokenizer
from .worker_errors import worker_input_error

logger = logging.getLogger(__name__)

STAGING = ".preprocess-staging"
QUARANTINE_FILE = "quarantine.jsonl"
STATS_FILE = "stats.json"


def input_files(corpus: CorpusConfig) -> list[Path]:
    """The corpus files, resolved (`sample:<name>` -> the cached sample). InputError if one is missing."""
    paths = []
    for spec in corpus.inputs:
        path = resolve_input(spec)
        if not path.is_file():
            raise InputError(f"{path}: input file not found (corpus.inputs entry {spec!r})")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------- documents pipeline


class ReadPages(beam.DoFn):
    """(source index, path) -> every page of the file; malformed pages go to the `quarantine` output."""

    def process(self, item: tuple[int, str]) -> Iterator:
        source, path = item
        try:
            for record in iter_pages(Path(path), source):
                yield TaggedOutput("outcome", "read")
                if isinstance(record, Quarantined):
                    yield TaggedOutput("outcome", f"quarantined:{record.reason}")
                    yield TaggedOutput("quarantine", json.dumps(record.to_json(), sort_keys=True))
                else:
                    yield record
        except InputError as err:
            raise worker_input_error(str(err)) from None


class CleanPage(beam.DoFn):
    """Page -> a clean document (split into paragraphs of sentences), or a counted drop / quarantine."""

    def __init__(self, corpus: CorpusConfig, heldout_fraction: float, files: list[str]):
        self.corpus = corpus
        self.heldout_fraction = heldout_fraction
        self.files = files

    def process(self, page: Page) -> Iterator:
        c = self.corpus
        if page.namespace not in c.namespaces:
            yield TaggedOutput("outcome", "dropped:namespace")
            return
        if page.redirect:
            yield TaggedOutput("outcome", "dropped:redirect")
            return
        try:
            paragraphs = wikitext_to_paragraphs(page.text, c.drop_sections, c.keep_lists, c.min_paragraph_chars)
        except Exception as err:  # mwparserfromhell failing on one page must not stop the corpus
            record = Quarantined(page.source, self.files[page.source], page.ordinal, f"id={page.page_id}",
                                 "wikitext_error", f"{type(err).__name__}: {err}")
            yield TaggedOutput("outcome", "quarantined:wikitext_error")
            yield TaggedOutput("quarantine", json.dumps(record.to_json(), sort_keys=True))
            return
        sentences = [s for s in (split_sentences(p) for p in paragraphs) if s]
        if not sentences:
            yield TaggedOutput("outcome", "dropped:empty")
            return
        n_chars = sum(len(p) for p in paragraphs)
        n_sentences = sum(len(p) for p in sentences)
        if n_chars < c.min_doc_chars or n_sentences < c.min_doc_sentences:
            yield TaggedOutput("outcome", "dropped:too_short")
            return
        doc = hashing.doc_id(page.namespace, page.title)
        split = "heldout" if hashing.is_heldout(page.title, self.heldout_fraction) else "train"
        yield (doc, {"doc_id": doc, "title": page.title, "page_id": page.page_id, "source": page.source,
                     "ordinal": page.ordinal, "split": split, "paragraphs": sentences})


class KeepFirstOfTitle(beam.DoFn):
    """One document per doc_id (namespace + title): the first in input order; the others are quarantined."""

    def __init__(self, files: list[str]):
        self.files = files

    def process(self, item: tuple[int, list[dict]]) -> Iterator:
        _doc, docs = item
        docs = sorted(docs, key=lambda d: (d["source"], d["ordinal"]))
        keep = docs[0]
        for dup in docs[1:]:
            record = Quarantined(dup["source"], self.files[dup["source"]], dup["ordinal"], f"id={dup['page_id']}",
                                 "duplicate_title", f"title {dup['title']!r} already read as page id={keep['page_id']}")
            yield TaggedOutput("outcome", "quarantined:duplicate_title")
            yield TaggedOutput("quarantine", json.dumps(record.to_json(), sort_keys=True))
        yield TaggedOutput("outcome", "kept")
        yield json.dumps(keep, sort_keys=True, ensure_ascii=False)


def build_documents_pipeline(pipeline, corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], work: Path) -> None:
    pages = (
        pipeline
        | "Files" >> beam.Create(list(enumerate(files)))
        | "ReadPages" >> beam.ParDo(ReadPages()).with_outputs("outcome", "quarantine", main="pages")
    )
    cleaned = (
        pages.pages
        | "SpreadPages" >> beam.Reshuffle()
        | "Clean" >> beam.ParDo(CleanPage(corpus, cfg.heldout_fraction, files)).with_outputs("outcome", "quarantine", main="docs")
    )
    unique = (
        cleaned.docs
        | "ByDocId" >> beam.GroupByKey()
        | "Dedupe" >> beam.ParDo(KeepFirstOfTitle(files)).with_outputs("outcome", "quarantine", main="docs")
    )
    unique.docs | "WriteDocs" >> WriteToText(str(work / "docs" / "part"), file_name_suffix=".jsonl")
    (
        (pages.outcome, cleaned.outcome, unique.outcome)
        | "Outcomes" >> beam.Flatten()
        | "CountOutcomes" >> beam.combiners.Count.PerElement()
        | "FormatCounts" >> beam.MapTuple(lambda reason, n: json.dumps([reason, n]))
        | "WriteCounts" >> WriteToText(str(work / "outcomes" / "part"), file_name_suffix=".jsonl")
    )
    (
        (pages.quarantine, cleaned.quarantine, unique.quarantine)
        | "Quarantine" >> beam.Flatten()
        | "WriteQuarantine" >> WriteToText(str(work / "quarantine" / "part"), file_name_suffix=".jsonl")
    )


# --------------------------------------------------------------------------------------- instances pipeline


class TokenizeDoc(beam.DoFn):
    """Document JSON -> ((split, bucket), (doc_id, sentences as token ids)). A document whose every sentence
    tokenises to nothing (text made only of what the normalizer strips) goes to the `no_tokens` output, to be
    counted as dropped."""

    def __init__(self, tokenizer_path: str, buckets: dict[str, int]):
        self.tokenizer_path = tokenizer_path
        self.buckets = buckets

    def setup(self) -> None:
        self.tokenizer = Tokenizer.from_file(self.tokenizer_path)

    def process(self, line: str) -> Iterator:
        doc = json.loads(line)
        sentences = [s for paragraph in doc["paragraphs"] for s in paragraph]
        encoded = self.tokenizer.encode_batch(sentences, add_special_tokens=False)
        ids = [e.ids for e in encoded if e.ids]
        split = doc["split"]
        if ids:
            yield (split, hashing.bucket_of(doc["doc_id"], self.buckets[split])), (doc["doc_id"], ids)
        else:
            yield TaggedOutput("no_tokens", json.dumps({"split": split, "doc_id": doc["doc_id"], "title": doc["title"]}))


class BuildInstances(beam.DoFn):
    """One bucket of documents -> its BERT instances (see preprocessing.instances for the seeding)."""

    def __init__(self, cfg: PreprocessConfig, cls_id: int, sep_id: int):
        self.cfg = cfg
        self.cls_id = cls_id
        self.sep_id = sep_id

    def process(self, item) -> Iterator:
        (split, bucket), docs = item
        inst = self.cfg.instances
        rng = random.Random(hashing.seed_of(self.cfg.seed, "instances", split, bucket))
        for instance in build_bucket_instances(
            list(docs), rng, max_seq_len=inst.max_seq_len, short_seq_prob=inst.short_seq_prob,
            nsp_random_prob=inst.nsp_random_prob, dupe_factor=inst.dupe_factor, cls_id=self.cls_id, sep_id=self.sep_id,
            sentence_order=inst.format == "sop-pairs",
        ):
            yield split, instance


class MaskInstance(beam.DoFn):
    """(split, instance) -> ((split, shard), (sort key, row)) with K mask variants."""

    def __init__(self, cfg: PreprocessConfig, vocab_size: int, specials: dict[str, int],
                 continuation: frozenset[int] = frozenset()):
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.specials = specials
        self.continuation = continuation

    def setup(self) -> None:
        self.masker = Masker(self.cfg.masking, self.cfg.seed, self.vocab_size, self.specials["mask"],
                             frozenset(self.specials.values()), self.continuation)
        self.num_shards = {"train": self.cfg.shards.train_shards, "heldout": self.cfg.shards.heldout_shards}

    def process(self, item) -> Iterator:
        split, inst = item
        positions, tokens = self.masker.variants(inst.input_ids, inst.doc_id, inst.index)
        key = hashing.row_key(inst.doc_id, inst.index)
        row = {"input_ids": inst.input_ids, "len_a": inst.len_a, "nsp_label": inst.nsp_label,
               "mask_positions": positions, "mask_tokens": tokens, "doc_id": inst.doc_id}
        yield (split, key % self.num_shards[split]), ((key, inst.doc_id, inst.index), row)


def shard_name(index: int) -> str:
    return f"part-{index:05d}.arrow"


class WriteShardFn(beam.DoFn):
    """All rows of one shard -> the shard file (rows sorted by their key) -> a summary line."""

    def __init__(self, shard_dir: str, vocab_size: int, batch_rows: int):
        self.shard_dir = shard_dir
        self.vocab_size = vocab_size
        self.batch_rows = batch_rows

    def process(self, item) -> Iterator[str]:
        (split, shard), keyed = item
        rows = [row for _key, row in sorted(keyed, key=lambda kr: kr[0])]
        info = write_shard(Path(self.shard_dir) / split / shard_name(shard), rows, self.vocab_size, self.batch_rows)
        yield json.dumps({
            "split": split, "shard": shard, "rows": info.rows, "sha256": info.sha256,
            "tokens": sum(len(r["input_ids"]) for r in rows),
            "masked_tokens": sum(len(p) for r in rows for p in r["mask_positions"]),
            "nsp_random": sum(r["nsp_label"] for r in rows),
        })


def build_instances_pipeline(pipeline, cfg: PreprocessConfig, work: Path, tokenizer_path: Path, shard_dir: Path,
                             buckets: dict[str, int], vocab_size: int, specials: dict[str, int]) -> None:
    tokenized = (
        pipeline
        | "ReadDocs" >> ReadFromText(str(work / "docs" / "part*.jsonl"))
        | "Tokenize" >> beam.ParDo(TokenizeDoc(str(tokenizer_path), buckets)).with_outputs("no_tokens", main="docs")
    )
    tokenized.no_tokens | "WriteNoTokens" >> WriteToText(str(work / "no_tokens" / "part"), file_name_suffix=".jsonl")
    (
        tokenized.docs
        | "ByBucket" >> beam.GroupByKey()
        | "Pairs" >> beam.ParDo(BuildInstances(cfg, specials["cls"], specials["sep"]))
        | "SpreadInstances" >> beam.Reshuffle()
        | "Mask" >> beam.ParDo(MaskInstance(cfg, vocab_size, specials,
                                            continuation_ids(Tokenizer.from_file(str(tokenizer_path)).get_vocab())))
        | "ByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShardFn(str(shard_dir), vocab_size, cfg.shards.batch_rows))
        | "WriteSummaries" >> WriteToText(str(work / "shard_summaries" / "part"), file_name_suffix=".jsonl")
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
    lines = [f"no training documents left after filtering {', '.join(files)}: {counts['docs_read']} pages read, "
             f"{counts['docs_kept']} kept ({counts['docs'].get('heldout', 0)} of them held out)"]
    lines += [f"  dropped {reason} ({why.get(reason, reason)}): {n}" for reason, n in counts["docs_dropped"].items()]
    lines += [f"  quarantined {reason}: {n}" for reason, n in counts["quarantined"].items()]
    return InputError("\n".join(lines))


def _documents_stage(corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], staging: _Staging) -> dict:
    """Run the documents pipeline; write quarantine.jsonl; return the document counts."""
    run_pipeline(lambda p: build_documents_pipeline(p, corpus, cfg, files, staging.work), cfg.runner, "documents")
    raw = dict(json.loads(line) for line in _read_lines(str(staging.work / "outcomes" / "part*.jsonl")))
    split_docs: Counter = Counter()
    sentences = 0
    for doc in _docs(staging.work):
        split_docs[doc["split"]] += 1
        sentences += sum(len(p) for p in doc["paragraphs"])
    quarantine = sorted(_read_lines(str(staging.work / "quarantine" / "part*.jsonl")))
    atomic_write_text(staging.shards / QUARANTINE_FILE, "".join(quarantine))
    return {
        "docs_read": raw.get("read", 0),
        "docs_kept": raw.get("kept", 0),
        "docs_dropped": {k.split(":", 1)[1]: v for k, v in sorted(raw.items()) if k.startswith("dropped:")},
        "quarantined": {k.split(":", 1)[1]: v for k, v in sorted(raw.items()) if k.startswith("quarantined:")},
        "docs": {s: split_docs[s] for s in SPLITS},
        "sentences": sentences,
    }


def _train_texts(work: Path, total: int, desc: str) -> Iterator[str]:
    """Every paragraph of every training document (file order: the trained vocabulary does not depend on it)."""
    for doc in tqdm(_docs(work), total=total, desc=desc, unit="doc", disable=None, leave=False):
        if doc["split"] == "train":
            for paragraph in doc["paragraphs"]:
                yield " ".join(paragraph)


def _tokenizer_stage(cfg: PreprocessConfig, counts: dict, staging: _Staging) -> Tokenizer:
    if cfg.tokenizer.path:
        return adopt_tokenizer(Path(cfg.tokenizer.path).expanduser(), staging.tokenizer)
    total = sum(counts["docs"].values())
    passes = iter(["tokenizer: counting words", "tokenizer: training"])
    tokenizer = train_tokenizer(lambda: _train_texts(staging.work, total, next(passes)), cfg.tokenizer)
    save_tokenizer(tokenizer, staging.tokenizer)
    return tokenizer


def _instances_stage(cfg: PreprocessConfig, counts: dict, staging: _Staging, vocab_size: int,
                     specials: dict[str, int]) -> tuple[dict[str, SplitInfo], dict]:
    """Run the instances pipeline; fill in empty shards; return the splits and the instance counts (and move
    documents without tokens from kept to dropped in `counts`)."""
    buckets = {s: max(1, math.ceil(counts["docs"][s] / cfg.instances.docs_per_bucket)) for s in SPLITS}
    run_pipeline(
        lambda p: build_instances_pipeline(p, cfg, staging.work, staging.tokenizer, staging.shards, buckets,
                                           vocab_size, specials),
        cfg.runner, "instances",
    )
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
                info = write_shard(staging.shards / split / shard_name(shard), [], vocab_size, cfg.shards.batch_rows)
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


def _manifest(corpus: CorpusConfig, cfg: PreprocessConfig, tokenizer: Tokenizer, tokenizer_sha256: str,
              specials: dict[str, int], counts: dict, buckets: dict, splits: dict[str, SplitInfo],
              sources: list[SourceInfo]) -> Manifest:
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
            "segments": "sentences", "layout": "[CLS] A [SEP] B [SEP]",
            "nsp_label": ({"0": "in order", "1": "swapped"} if inst.format == "sop-pairs"
                          else {"0": "IsNext", "1": "NotNext"}),
        },
        masking={**masking.model_dump(mode="json"),
                 "keep_prob": round(1.0 - masking.mask_token_prob - masking.random_token_prob, 10),
                 "seeding": "random.Random(seed_of(seed, doc_id, instance_index, variant))"},
        seed=cfg.seed,
        config_hash=config_hash(corpus, cfg),
        counts=counts,
        splits=splits,
        sources=sources,
        runner=describe(cfg.runner),
    )


def run_preprocess(corpus: CorpusConfig, cfg: PreprocessConfig, run_dir: Path) -> dict:
    """Run the whole stage into RUN/tokenizer and RUN/shards; return the manifest as a dict."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    paths = input_files(corpus)
    files = [str(p) for p in paths]
    for path in paths:
        validate_dump(path)
    sources = [SourceInfo(path=spec, sha256=sha256_file(p), bytes=p.stat().st_size) for spec, p in zip(corpus.inputs, paths)]
    staging = _Staging(run_dir / STAGING)
    staging.create()
    timings = {"validate": time.perf_counter() - t_start}
    try:
        t0 = time.perf_counter()
        counts = _documents_stage(corpus, cfg, files, staging)
        timings["documents"] = time.perf_counter() - t0
        logger.info("documents: %d pages read, %d kept %s, %d sentences; dropped %s; quarantined %s (%.1f s)",
                    counts["docs_read"], counts["docs_kept"], counts["docs"], counts["sentences"],
                    counts["docs_dropped"], counts["quarantined"], timings["documents"])
        if counts["docs"]["train"] == 0:
            raise _empty_corpus_error(files, corpus, counts)

        t0 = time.perf_counter()
        tokenizer = _tokenizer_stage(cfg, counts, staging)
        specials = special_ids(tokenizer, str(cfg.tokenizer.path or staging.tokenizer))
        timings["tokenizer"] = time.perf_counter() - t0
        logger.info("tokenizer: %d tokens (%.1f s)", tokenizer.get_vocab_size(), timings["tokenizer"])

        t0 = time.perf_counter()
        vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        splits, instance_counts = _instances_stage(cfg, counts, staging, vocab_size, specials)
        buckets = instance_counts.pop("random_buckets")
        counts.update(instance_counts)
        timings["instances"] = time.perf_counter() - t0
        logger.info("instances: %s, %d tokens, %d masked positions over %d variants (%.1f s)", counts["instances"],
                    counts["tokens"], counts["masked_tokens"], cfg.masking.variants, timings["instances"])

        manifest = _manifest(corpus, cfg, tokenizer, sha256_file(staging.tokenizer), specials, counts, buckets,
                             splits, sources)
        write_manifest(staging.shards, manifest)
        timings["total"] = time.perf_counter() - t_start
        atomic_write_json(staging.shards / STATS_FILE, {
            "timings_s": {k: round(v, 3) for k, v in timings.items()},
            "pages_per_s": round(counts["docs_read"] / max(timings["documents"], 1e-9), 1),
            "instances_per_s": round(sum(counts["instances"].values()) / max(timings["instances"], 1e-9), 1),
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
