"""Peak RSS per Beam stage of one preprocessing run: where the driver and the workers grow with the corpus.

corpus_throughput.py's `rss` mode gives the peaks of a whole run; this names the stage each peak belongs to. It runs
preprocessing.pipeline.run_preprocess in this process on N copies of the sotu text (the same inputs and recipe as
`rss`: configs/local.yaml, corpus.format text, a given tokenizer, so one Beam job on the local preset's worker
subprocesses), wraps FnApiRunner._execute_bundle to know which fused stage is running, and samples /proc every
0.1 s: per stage, its seconds, the driver's peak RSS (this process: the runner, whose buffers hold every shuffle)
and the largest worker's (Beam's SDK worker subprocesses, where the DoFns run). One sample per 0.1 s: a peak
shorter than that can be missed, and a worker's RSS includes what earlier stages left in its heap.

    python benchmarks/stage_memory.py --tokenizer T --copies 10 [--dedup] [--work DIR] [--set KEY=VALUE ...]

--dedup: dedup on, each copy's words marked as its own (corpus_throughput.marked_copies_dir); otherwise dedup is
off, as in `rss`, since identical copies would be removed. Stages whose peak is below 1 MiB (ran in no sampled
moment) are left out. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus_throughput as ct  # noqa: E402  (the sotu copies, the recipe and the /proc readers)


BEFORE, BETWEEN = "before the job", "between stages"  # the moments no stage is running


class StageSampler(threading.Thread):
    """Peaks of the driver's and the largest child's RSS, by the stage FnApiRunner is executing at the time."""

    def __init__(self, interval: float = 0.1):
        super().__init__(daemon=True)
        self.interval = interval
        self.stage = BEFORE
        self.peaks: dict[str, list] = {}  # stage -> [driver KiB, largest child KiB, seconds in the stage]
        self.done = threading.Event()

    def _entry(self, stage: str) -> list:
        return self.peaks.setdefault(stage, [0, 0, 0.0])

    def run(self) -> None:
        me = os.getpid()
        while not self.done.is_set():
            rss = {pid: ct._status_kib(pid, "VmRSS") for pid in ct._proc_tree(me)}
            entry = self._entry(self.stage)
            entry[0] = max(entry[0], rss.get(me, 0))
            entry[1] = max(entry[1], max((kib for pid, kib in rss.items() if pid != me), default=0))
            self.done.wait(self.interval)

    def install(self) -> None:
        from apache_beam.runners.portability.fn_api_runner import fn_runner

        original = fn_runner.FnApiRunner._execute_bundle
        sampler = self

        def execute_bundle(runner, context, bundle_context_manager, bundle_input):
            name = bundle_context_manager.stage.name
            sampler._entry(name)
            sampler.stage = name
            t0 = time.perf_counter()
            try:
                return original(runner, context, bundle_context_manager, bundle_input)
            finally:
                sampler._entry(name)[2] += time.perf_counter() - t0
                sampler.stage = BETWEEN

        fn_runner.FnApiRunner._execute_bundle = execute_bundle


def short_name(stage: str) -> str:
    """A fused stage's name is every transform in it; its first few user-facing labels say enough."""
    if stage in (BEFORE, BETWEEN):
        return stage
    labels = []
    for part in stage.replace("(", " ").replace(")", " ").replace("+", " ").split():
        label = part.removeprefix("ref_AppliedPTransform_").split("/")[0].rsplit("_", 1)[0]
        label = label.split("-")[0]
        if label and not label.startswith("ref_PCollection") and label not in labels:
            labels.append(label)
    return " + ".join(labels[:4]) or stage[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer.json (corpus_throughput.py trains one)")
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--dedup", action="store_true", help="dedup on, each copy's words marked as its own")
    parser.add_argument("--work", type=Path, help="keep the run here (default: a temporary directory, removed)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = args.work or Path(tempfile.mkdtemp(prefix="stage-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    sampler = StageSampler()
    sampler.install()
    try:
        inputs = (ct.marked_copies_dir if args.dedup else ct.copies_dir)(work, args.copies)
        no_dedup = [] if args.dedup else ["corpus.dedup.exact=false", "corpus.dedup.near=false"]
        sampler.start()
        result = ct.run_pipeline_once([str(inputs)], work / "run", [f"preprocess.tokenizer.path={args.tokenizer}",
                                                                   *no_dedup, *args.set])
        sampler.done.set()
        sampler.join()
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{args.copies}x sotu, dedup {'on' if args.dedup else 'off'}: {result['docs_kept']} docs kept, "
          f"instances {result['instances']}, wall {result['wall_s']:.1f} s")
    print("| stage (first labels) | s | driver peak MiB | largest worker peak MiB |")
    print("|---|---:|---:|---:|")
    for stage, (driver, worker, seconds) in sampler.peaks.items():
        if max(driver, worker) >= 1024:
            print(f"| {short_name(stage)} | {seconds:.1f} | {driver / 1024:,.0f} | {worker / 1024:,.0f} |")


if __name__ == "__main__":
    main()
