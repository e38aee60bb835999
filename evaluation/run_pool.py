"""Fine-tuning runs in parallel worker processes (`evaluate.workers`, `evaluate.worker_threads`): every (learning
rate, seed) run of a model on a task is independent of the others, so on a CPU with a few cores N single-threaded
runs at once finish sooner than one run at a time on N threads (a small encoder's matrix products are too small to
keep N threads busy). The feature-based taggers (evaluation/features.py) go through the same pool.

    with RunPool(workers=2, threads=1) as pool:
        result = finetune_model(make_encoder, task, cfg, device, pad_id, "trec/pretrained", pool=pool)

Each job carries everything the run needs (the fresh encoder, the encoded task, the settings) to a spawned process
(never forked: torch's OpenMP pool is not fork-safe), which runs evaluation.finetune.finetune_run at `threads`
torch threads and sends the RunResult back (its best weights included: the caller keeps only the best run's).
A run depends only on its inputs and the thread count, not on which worker ran it or when: N workers at one
thread each give exactly the scores of one process at one thread (tests/evaluation/test_run_pool.py).
Workers start on the first job (a few seconds: they import torch) and live until the pool is closed. A worker
that dies (killed, out of memory) fails the evaluation with one line saying so; nothing half-done is kept.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import bertfactory  # noqa: F401  first: a spawned worker pins torch's CPU kernels before torch loads (cpu_kernels.py)
import torch

from .finetune import RunResult, finetune_run

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _start_worker(threads: int, level: int) -> None:
    torch.set_num_threads(threads)
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S")


def _run(job: dict) -> RunResult:
    """One evaluation.finetune.finetune_run on the CPU; `job` holds its arguments by name (but the device)."""
    return finetune_run(device=torch.device("cpu"), **job)


class RunPool:
    """`workers` processes at `threads` torch threads each; `run(jobs)` -> their RunResults in the jobs' order."""

    def __init__(self, workers: int, threads: int):
        if workers < 1 or threads < 1:
            raise ValueError(f"a run pool needs at least one worker and one thread (got {workers} x {threads})")
        self.workers, self.threads = workers, threads
        self._executor: ProcessPoolExecutor | None = None

    @classmethod
    def for_settings(cls, workers: int, worker_threads: int | None, num_threads: int | None) -> "RunPool | None":
        """The pool `evaluate.workers` asks for (None for one worker: runs stay in the calling process); each worker
        at `evaluate.worker_threads` threads, else `evaluate.num_threads`, else an equal share of the cores."""
        if workers <= 1:
            return None
        threads = worker_threads or num_threads or max(1, (os.cpu_count() or 1) // workers)
        return cls(workers, threads)

    def run(self, jobs: list[dict], on_result=None) -> list[RunResult]:
        """The fine-tuning runs (each finetune_run's arguments by name, but the device), in their order;
        `on_result(index, result)` as each one is back (see `map`)."""
        what = jobs[0]["name"].rsplit(" lr=", 1)[0] if jobs else "nothing"
        return self.map(_run, jobs, f"{len(jobs)} run(s) of {what}", on_result)

    def map(self, function, items: list, what: str, on_result=None) -> list:
        """`function(item)` for each item in the workers (a module-level function: it is pickled by name), in
        order; `what` names the work in the error when a worker dies; `on_result(index, result)` is called in
        this process for each result in order as it is back (e.g. to keep it on disk before the next ends)."""
        if not items:
            return []
        if self._executor is None:
            logger.info("fine-tuning in %d worker processes at %d thread(s) each", self.workers, self.threads)
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker, initargs=(self.threads, logging.getLogger().getEffectiveLevel()))
        futures = [self._executor.submit(function, item) for item in items]
        try:
            results = []
            for index, future in enumerate(futures):
                results.append(future.result())
                if on_result is not None:
                    on_result(index, results[-1])
            return results
        except BrokenProcessPool:
            self.close()
            raise RuntimeError(f"a fine-tuning worker process died while running {what} (killed, or out of "
                               "memory?); rerun, or set evaluate.workers=1") from None
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "RunPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
