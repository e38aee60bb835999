"""Prefetching workers: build the batches of the next steps in background threads while the trainer computes.

    source = prefetch_batches(batches.batch, start_step=trainer.step, workers=2)
    batch = next(source)   # the batch of start_step, then start_step + 1, ...

`batch(step)` is a pure function of the step (training/data.py: the rows and the mask variant depend only on
(seed, epoch, step)), so the workers can build any future step in any order and the batches are still handed out
strictly by step: the result is identical to calling `batch(step)` in the loop, whatever the number of workers or
their timing (tests/training/test_prefetch.py). `workers = 0` builds each batch in the caller, as before.

Threads, not processes: collation is numpy work on memory-mapped Arrow shards (most of it releases the GIL),
nothing has to be pickled, and a forked copy of an initialised torch (OpenMP pools) is not safe. At most
`workers * depth` batches are built ahead, which bounds the memory held.

On CUDA the trainer wraps the batch function in `pinned`: each batch's tensors are copied into page-locked memory
by the thread that builds it, so the step's `.to(device, non_blocking=True)` copies run asynchronously (from
pageable memory they are staged and wait for the host). torch's caching host allocator keeps a pinned block
alive until the copies recorded on it are done, so a batch dropped by the loop cannot be overwritten early.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, TypeVar

Batch = TypeVar("Batch")


def prefetch_batches(batch_of_step: Callable[[int], Batch], start_step: int, workers: int, depth: int = 2,
                     end_step: int | None = None) -> Iterator[Batch]:
    """Batches of steps start_step, start_step + 1, ... (up to end_step, exclusive; None = without end), built by
    `workers` threads up to `workers * depth` steps ahead. An exception raised while building a batch is raised
    here, when that step's batch is asked for. Closing the generator (or leaving the loop) cancels what is queued."""
    if workers < 0 or depth < 1:
        raise ValueError(f"workers must be >= 0 and depth >= 1 (got workers={workers}, depth={depth})")
    if workers == 0:
        step = start_step
        while end_step is None or step < end_step:
            yield batch_of_step(step)
            step += 1
        return
    ahead = workers * depth
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch-prefetch")
    pending: deque[Future] = deque()
    next_submit = start_step
    try:
        while True:
            while len(pending) < ahead and (end_step is None or next_submit < end_step):
                pending.append(pool.submit(batch_of_step, next_submit))
                next_submit += 1
            if not pending:
                return
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def pinned(batch_of_step: Callable[[int], dict]) -> Callable[[int], dict]:
    """`batch_of_step` with every tensor of the batch it returns in page-locked host memory (needs CUDA); other
    values unchanged. Run in the prefetching thread, so the copy is off the training loop with loader_workers."""
    def call(step: int) -> dict:
        return {k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in batch_of_step(step).items()}

    return call


def per_thread(loader: Any, method: str) -> Callable[[int], Any]:
    """`getattr(loader, method)` called on a shallow copy of `loader` owned by the calling thread: the shard data
    stays shared (read-only), while per-instance caches (PretrainBatches keeps the permutation of its last
    epoch) are not written by two threads at once."""
    local = threading.local()

    def call(step: int) -> Any:
        own = getattr(local, "loader", None)
        if own is None:
            own = local.loader = copy.copy(loader)
        return getattr(own, method)(step)

    return call
