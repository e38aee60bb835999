"""The preprocessing stage, composed: any corpus format (preprocessing.sources) -> clean documents -> a tokenizer
(trained, or given) -> BERT-family instances with K precomputed mask variants (or none: dynamic masking) -> Arrow
shards + manifest.json (the contract in preprocessing.shards, docs/shards.md). This module only wires the stages;
each stage graph lives in its own module:

  documents  preprocessing.documents          Beam: read, clean, filter, split sentences, hold out, deduplicate
             preprocessing.document_results   driver: outcome counts, DocTally, quarantine, dedup index
  tokenizer  preprocessing.tokenizer_stage    driver: trained on a sample of the training documents only
                                              (deterministic), or adopted; the fertility table
  instances  preprocessing.planning           the plan: buckets, pre-shards, copy rates, language ids
             preprocessing.instance_pipeline  Beam: tokenise -> instances -> deal, mask -> sorted shards
             preprocessing.instance_results   driver: splits, instance counts, empty shards
  manifest   preprocessing.manifest           manifest.json assembled from the above

With no tokenizer given the two Beam pipelines run as two jobs with the tokenizer training between them (it needs
every training document). With a tokenizer given (preprocess.tokenizer.path, or a corpus version's parent's) there
is nothing to train, and they run as one Beam job (_one_job): the instances part plans its buckets and pre-shards
from a tally of the kept documents made inside the job, so the outputs are byte for byte those of two jobs.

A small input (below preprocess.runner.in_process_below_mib; compressed files count 5x) runs its jobs in this
process rather than on the local preset's worker subprocesses, whose start-up would cost more than its work; so
do raw documents packed by tokens of any size, whose work is the tokenizer's threads (runners.runner_for_input).

Everything is written into RUN/.preprocess-staging first (preprocessing.staging) and published (renamed) into
RUN/tokenizer and RUN/shards at the end, so a crash never leaves half a stage behind and a rerun replaces the
outputs cleanly. Where the workers share no disk with the driver (preprocess.runner.exchange bucket: a run
directory on s3:// or gs:// with the portable, Dataflow, Flink or Spark preset) the jobs write into
RUN_URL/.preprocess-staging/<attempt> instead, each worker through its own scratch (preprocessing.exchange), and
the driver reads their outputs back from there (staging.JobArea). Same inputs + config + seed -> byte-identical tokenizer, shards and manifest, whatever the bundle
order or worker count (RUN/shards/stats.json holds the timings, which are not part of that contract).

    python -m preprocessing.pipeline configs/local.yaml RUN_DIR [section.key=value ...]
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import apache_beam as beam
from apache_beam.io import ReadFromText

from bertfactory.errors import ConfigError
from bertfactory.io import atomic_write_json, publish_dir, sha256_file
from bertfactory.portable_paths import portable_name
from bertfactory.run_location import origin_of, remote_of
from bertfactory.storage import StorageError

from .bad_inputs import check_bad_inputs
from .config import CorpusConfig, PreprocessConfig, RunnerConfig
from .document_results import TallyDocs, document_counts, empty_corpus_error, merge_dedup_entries
from .documents import ReadDocs, build_documents_pipeline, sentence_ends_needed, spill_dir
from .exchange import is_remote
from .inputs import expand_inputs, refuse_shared_names
from .instance_pipeline import build_instances_pipeline
from .instance_results import collect_instance_results
from .lineage import plan_increment
from .manifest import build_manifest
from .planning import instance_plan
from .runners import describe, input_size, run_pipeline, runner_for_input
from .shards import SourceInfo, SplitInfo, write_manifest
from .sources import validate_file
from .staging import STAGING, JobArea, Staging
from .tokenizer import adopt_tokenizer, special_ids
from .tokenizer_check import check_unk_rate, warn_unknown_languages
from .tokenizer_stage import corpus_fertility, given_tokenizer, train_tokenizer_stage

logger = logging.getLogger(__name__)

STATS_FILE = "stats.json"


def input_files(corpus: CorpusConfig) -> list[Path]:
    """The corpus's local files, resolved and expanded (preprocessing.inputs); URLs are left out (the stage's
    cache key holds them through the config)."""
    return [f.local_path for f in expand_inputs(corpus) if f.local_path is not None]


def _documents_stage(corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], area: JobArea,
                     runner: RunnerConfig, prior_index: str | None = None) -> dict:
    """Run the documents pipeline; write quarantine.jsonl and duplicates.jsonl; return the document counts."""
    sentence_ends = sentence_ends_needed(corpus, cfg.instances.packing)
    run_pipeline(lambda p: build_documents_pipeline(p, corpus, cfg.heldout_fraction, files, area.work, prior_index,
                                                    sentence_ends),
                 runner, "documents")
    area.drop_spills(spill_dir(area.work))  # the text is in work/docs now
    area.collect()
    return document_counts(files, area.staging)


def _read_doc_parts(p, area: JobArea):
    """The documents job's docs lines as a PCollection: ReadFromText on a shared disk; from a bucket, each part
    downloaded and read by one worker (no Beam filesystem package needed for the bucket)."""
    if not area.remote:
        return p | "ReadDocs" >> ReadFromText(str(area.staging.work / "docs" / "part*.jsonl"))
    from . import exchange

    def lines(location: str):
        with open(exchange.get(location), encoding="utf-8") as f:
            yield from (line.rstrip("\n") for line in f if line.strip())

    return (p | "DocParts" >> beam.Create(area.doc_parts()) | "SpreadDocParts" >> beam.Reshuffle()
            | "ReadDocs" >> beam.FlatMap(lines))


def _instances_stage(cfg: PreprocessConfig, counts: dict, area: JobArea, vocab_size: int,
                     specials: dict[str, int], runner: RunnerConfig) -> tuple[dict[str, SplitInfo], dict]:
    """Run the instances pipeline on the documents pipeline's docs files (a second Beam job); see
    collect_instance_results for what it returns."""
    plan = instance_plan(cfg, counts)
    area.share_tokenizer()
    run_pipeline(
        lambda p: build_instances_pipeline(_read_doc_parts(p, area), p | "Plan" >> beam.Create([plan]), cfg,
                                           area.work, area.tokenizer, area.shards, vocab_size, specials),
        runner, "instances",
    )
    area.collect()
    return collect_instance_results(cfg, counts, area.staging, vocab_size)


def _one_job(corpus: CorpusConfig, cfg: PreprocessConfig, files: list[str], area: JobArea,
             prior_index: str | None, vocab_size: int, specials: dict[str, int], runner: RunnerConfig) -> None:
    """Both pipelines as one Beam job (the tokenizer is given, so nothing has to happen between them): the kept
    documents go on to the instances pipeline, whose plan is computed inside the job from their tally (TallyDocs,
    the same figures the driver would compute), saving a second job's start-up (~5 s of worker processes on the
    local runner)."""
    def build(p):
        kept = build_documents_pipeline(p, corpus, cfg.heldout_fraction, files, area.work, prior_index,
                                        sentence_ends_needed(corpus, cfg.instances.packing))
        plan = (kept
                | "TallyDocs" >> beam.CombineGlobally(TallyDocs())
                | "InstancePlan" >> beam.Map(lambda counts: instance_plan(cfg, counts)))
        # the plan as a side input keeps the read out of the stage that makes `kept`: the local runner buffers
        # the kept documents' stubs until the plan exists, not their text
        docs = kept | "ReadKeptDocs" >> beam.ParDo(ReadDocs(), beam.pvalue.AsSingleton(plan))
        build_instances_pipeline(docs, plan, cfg, area.work, area.tokenizer, area.shards, vocab_size, specials)

    area.share_tokenizer()
    run_pipeline(build, runner, "documents+instances")
    area.collect()


# input files on object storage checked at once: each check is a few requests whose latency, not CPU, is the cost
REMOTE_CHECK_THREADS = 16


def _check_inputs(corpus: CorpusConfig, inputs: list, known_sha256: dict | None) -> tuple[dict, dict]:
    """Validate every input file (the first failure, in input order, raised) and take its sha256 (unless known)
    and size. Local files one after the other; with URLs among them, REMOTE_CHECK_THREADS files at a time."""
    def facts(f):
        validate_file(corpus, f.location)
        return (known_sha256[f] if known_sha256 is not None else f.sha256()), f.size()

    if not any(is_remote(f.location) for f in inputs):
        results = [facts(f) for f in inputs]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(REMOTE_CHECK_THREADS) as pool:
            futures = [pool.submit(facts, f) for f in inputs]
        results = [future.result() for future in futures]  # the first failure in input order
    return ({f: sha for f, (sha, _size) in zip(inputs, results)},
            {f: size for f, (_sha, size) in zip(inputs, results)})


def bucket_exchange(runner: RunnerConfig, run_dir: Path, files: list[str],
                    prior_index: str | None) -> tuple[str | None, list[str]]:
    """(the run location's URL, the input files as the job's workers read them) when the workers exchange their
    files through its bucket (preprocess.runner.exchange: bucket, or auto with a cluster preset and a URL run
    directory), else (None, files). Such workers share no disk with the driver: a local input inside the run's
    working copy that the run location holds too (a tapt recipe's task corpus, pushed by the tapt stage) is read at
    its URL there; any other local input, or a parent corpus's dedup index on the driver's disk, is refused
    (ConfigError naming it)."""
    run_url = origin_of(run_dir)
    wanted = runner.exchange == "bucket" or (runner.exchange == "auto" and run_url is not None
                                             and runner.preset in CLUSTER_PRESETS)
    if not wanted:
        return None, files
    if run_url is None:
        raise ConfigError(f"preprocess.runner.exchange bucket needs a run directory on object storage (s3:// or "
                          f"gs://), not {run_dir}; or set preprocess.runner.exchange=disk")
    shared = [f if is_remote(f) else _in_run_location(f) for f in files]
    for f, url in zip(files, shared):
        if url is None:
            raise ConfigError(f"{f}: a local input file, but the job's workers share no disk with this machine "
                              f"(preprocess.runner.exchange bucket, run directory {run_url}); put the input in a "
                              "bucket and list its URL in corpus.inputs, or set preprocess.runner.exchange=disk")
    if prior_index is not None and remote_of(prior_index) is None:
        raise ConfigError(f"{prior_index}: the parent corpus's dedup index is on this machine's disk only; with "
                          "preprocess.runner.exchange bucket the parent must be a run location URL (corpus.parent)")
    return run_url, shared


def _in_run_location(path: str) -> str | None:
    """The URL of a local file in a run's working copy when the run location holds it with the same size (what a
    stage pushed there), else None."""
    from bertfactory import storage

    url = remote_of(path)
    if url is None:
        return None
    parent, name = url.rsplit("/", 1)
    listed = storage.list_files(parent)
    return url if listed.get(name) == Path(path).stat().st_size else None


# presets whose workers need not share the driver's disk (local and in_process always do)
CLUSTER_PRESETS = ("portable", "dataflow", "flink", "spark")


def check_recipe(corpus: CorpusConfig, cfg: PreprocessConfig) -> None:
    """Settings of the two sections that only make sense together (ConfigError naming both)."""
    pairs = corpus.format == "parallel"
    if pairs != (cfg.instances.format == "tlm-pairs"):
        raise ConfigError(f"corpus.format {corpus.format!r} with preprocess.instances.format "
                          f"{cfg.instances.format!r}: sentence pairs (format parallel) make tlm-pairs instances and "
                          "tlm-pairs need sentence pairs; set both or neither")


def _documents_done(counts: dict, seconds: float, files: list[str], corpus: CorpusConfig) -> None:
    """Log the document counts; refuse more broken input files than corpus.max_bad_inputs allows, and a corpus
    left without training documents."""
    logger.info("documents: %d pages read, %d kept %s, %d sentences; dropped %s; quarantined %s (%.1f s)",
                counts["docs_read"], counts["docs_kept"], counts["docs"], counts["sentences"],
                counts["docs_dropped"], counts["quarantined"], seconds)
    check_bad_inputs(counts.get("bad_inputs", []), len(files), corpus.max_bad_inputs)
    for entry in counts.get("bad_inputs", []):  # tolerated: said once here, listed in the manifest
        logger.warning("quarantined input file %s: %s", entry["file"], entry["detail"])
    if counts["docs"]["train"] == 0:
        raise empty_corpus_error(files, corpus, counts)


def _warn_empty_heldout(cfg: PreprocessConfig, counts: dict) -> None:
    """A held-out fraction was asked for but no instance came out held out: a small corpus can hold out no document
    (each is held out by a hash of its key). Not an error, since pretraining needs only the train split, but the
    evaluation's held-out scores are skipped then: said once here, with the setting that fixes it."""
    if cfg.heldout_fraction <= 0 or counts["instances"].get("heldout", 0) > 0:
        return
    docs = counts["docs"]
    total = sum(docs.values())
    suggested = min(0.5, max(2 * cfg.heldout_fraction, 3 / max(total, 1)))
    logger.warning("the held-out split is empty: %d of %d documents held out at preprocess.heldout_fraction=%g, "
                   "no held-out instances; evaluate will skip the held-out scores. Preprocess more documents or set "
                   "a larger fraction (e.g. --set preprocess.heldout_fraction=%.2g)", docs.get("heldout", 0), total,
                   cfg.heldout_fraction, suggested)


@contextmanager
def _long_lived_objects_frozen():
    """The objects alive when a job starts (modules, Beam's classes, the configs: ~150 k tracked ones once Beam is
    imported) outlive it: gc.freeze keeps them out of every collection during the job, so a full one (Python's
    own, or memory.release_freed_memory's in a job run in this process) walks only what the job made: ~0.07-0.1
    CPU-s less each, ~0.25 CPU-s of a 1x sotu job in process. gc.unfreeze afterwards gives them back to the collector,
    so a long-lived caller (a flow running many stages) leaks nothing."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_preprocess(corpus: CorpusConfig, cfg: PreprocessConfig, run_dir: Path) -> dict:
    """Run the whole stage into RUN/tokenizer and RUN/shards; return the manifest as a dict."""
    with _long_lived_objects_frozen():
        return _run_preprocess(corpus, cfg, Path(run_dir))


def _run_preprocess(corpus: CorpusConfig, cfg: PreprocessConfig, run_dir: Path) -> dict:
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    check_recipe(corpus, cfg)
    inputs = expand_inputs(corpus)
    refuse_shared_names(corpus.format, inputs)
    increment = plan_increment(corpus.parent, inputs) if corpus.parent else None
    if increment is not None:
        inputs = increment.new_files
    files = [f.location for f in inputs]
    shas, sizes = _check_inputs(corpus, inputs, increment.input_sha256 if increment is not None else None)
    # named without this machine's paths (RUN/..., SAMPLES/...): two machines write the same manifest
    sources = [SourceInfo(path=portable_name(f.name, run_dir), sha256=shas[f], bytes=sizes[f]) for f in inputs]
    input_bytes = input_size([(f.location, s.bytes) for f, s in zip(inputs, sources)])
    # raw documents packed by tokens: the tokenizer's threads do the work, on every core from this process
    # the jobs that need no sentence ends (raw documents packed by tokens) are the tokenizer-bound ones
    tokenizer_bound = not sentence_ends_needed(corpus, cfg.instances.packing)
    runner = runner_for_input(cfg.runner, input_bytes, tokenizer_bound)  # or a small input: no workers to start
    prior = increment.dedup_index_path if increment is not None else None
    prior = str(prior) if prior else None
    run_url, files = bucket_exchange(cfg.runner, run_dir, files, prior)
    if run_url is not None and prior is not None:
        prior = remote_of(prior)
    staging = Staging(run_dir / STAGING)
    staging.create()
    area = JobArea.in_bucket(staging, run_url) if run_url is not None else JobArea(staging)
    if area.remote:
        logger.info("preprocess: the workers exchange their files through %s (no shared disk needed)", area.remote)
    timings = {"validate": time.perf_counter() - t_start}
    try:
        given = given_tokenizer(cfg, increment)
        if given is None:  # the tokenizer learns from the clean documents: two jobs, the training between them
            t0 = time.perf_counter()
            counts = _documents_stage(corpus, cfg, files, area, runner, prior)
            timings["documents"] = time.perf_counter() - t0
            _documents_done(counts, timings["documents"], files, corpus)
            t0 = time.perf_counter()
            tokenizer = train_tokenizer_stage(cfg, counts, staging)
            specials = special_ids(tokenizer, str(staging.tokenizer))
            counts["fertility"] = corpus_fertility(tokenizer, staging.work, cfg.seed)
            timings["tokenizer"] = time.perf_counter() - t0
            logger.info("tokenizer: %d tokens (%.1f s)", tokenizer.get_vocab_size(), timings["tokenizer"])
            t0 = time.perf_counter()
            vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
            splits, instance_counts = _instances_stage(cfg, counts, area, vocab_size, specials, runner)
            timings["instances"] = time.perf_counter() - t0
        else:  # nothing to learn between the pipelines: one job
            t0 = time.perf_counter()
            tokenizer = adopt_tokenizer(given, staging.tokenizer, cfg.tokenizer)
            specials = special_ids(tokenizer, str(cfg.tokenizer.path or staging.tokenizer))
            check_unk_rate(tokenizer, corpus, files, cfg.tokenizer, str(given))  # a foreign one: refused before the job
            vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
            timings["tokenizer"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            _one_job(corpus, cfg, files, area, prior, vocab_size, specials, runner)
            counts = document_counts(files, staging)
            timings["documents+instances"] = time.perf_counter() - t0
            _documents_done(counts, timings["documents+instances"], files, corpus)
            t0 = time.perf_counter()
            counts["fertility"] = corpus_fertility(tokenizer, staging.work, cfg.seed)
            timings["tokenizer"] += time.perf_counter() - t0
            splits, instance_counts = collect_instance_results(cfg, counts, staging, vocab_size)
        buckets = instance_counts.pop("random_buckets")
        counts.update(instance_counts)
        logger.info("instances: %s, %d tokens, %d masked positions over %d variants", counts["instances"],
                    counts["tokens"], counts["masked_tokens"], cfg.masking.variants)
        _warn_empty_heldout(cfg, counts)
        warn_unknown_languages(counts["fertility"], cfg.tokenizer, str(given) if given is not None else None,
                               inherited=increment is not None)

        manifest = build_manifest(corpus, cfg, tokenizer, sha256_file(staging.tokenizer), specials, counts, buckets,
                                  splits, sources, run_dir)
        manifest.dedup_index = merge_dedup_entries(staging, increment.dedup_index_path if increment is not None else None,
                                            corpus.dedup)
        if increment is not None:
            manifest.corpus_version = increment.version
            manifest.parent = increment.parent_info(corpus.parent)
            manifest.inputs_seen = increment.inputs_seen()
        else:
            manifest.inputs_seen = sorted({s.sha256 for s in sources})
        manifest.runner = describe(cfg.runner, input_bytes, tokenizer_bound)  # as configured; ran in process?
        write_manifest(staging.shards, manifest)
        timings["total"] = time.perf_counter() - t_start
        one_job = timings.get("documents+instances", 0.0)
        atomic_write_json(staging.shards / STATS_FILE, {
            "timings_s": {k: round(v, 3) for k, v in timings.items()},
            "pages_per_s": round(counts["docs_read"] / max(timings.get("documents", one_job), 1e-9), 1),
            "instances_per_s": round(sum(counts["instances"].values()) / max(timings.get("instances", one_job), 1e-9), 1),
            "counts": counts,
            "runner": describe(cfg.runner, input_bytes, tokenizer_bound),
        })
        # publish: the tokenizer first, then the shards whose manifest points at it
        shutil.rmtree(staging.work)
        publish_dir(staging.tokenizer.parent, run_dir / "tokenizer")
        publish_dir(staging.shards, run_dir / "shards")
    finally:
        # after a failure the previous run's published outputs stay untouched; no staging is left behind
        shutil.rmtree(staging.root, ignore_errors=True)
        try:
            area.remove()
        except StorageError as err:  # the store went away: the failure that matters is the one raised above
            logger.warning("%s; the next attempt removes the job's staging folder", err)
    logger.info("preprocess: done in %.1f s -> %s", time.perf_counter() - t_start, run_dir / "shards")
    return manifest.model_dump(mode="json")


if __name__ == "__main__":
    from bertfactory.config import apply_overrides, load_yaml, validate

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    recipe = apply_overrides(load_yaml(sys.argv[1]), sys.argv[3:])
    corpus_cfg = validate(CorpusConfig, recipe.get("corpus") or {}, f"{sys.argv[1]}: corpus")
    preprocess_cfg = validate(PreprocessConfig, recipe.get("preprocess") or {}, f"{sys.argv[1]}: preprocess")
    print(json.dumps(run_preprocess(corpus_cfg, preprocess_cfg, Path(sys.argv[2]))["counts"], indent=1))
