"""preprocessing.dead_workers' watch on a local worker: whatever ends the worker's thread is reported as that worker's
death (a failure the watch did not report would leave the job waiting forever on the worker's answer), and nothing
is reported when the runner itself is stopping the worker. The end-to-end kill is test_bad_inputs_dead_worker.py."""

from __future__ import annotations

import pytest

from preprocessing.dead_workers import WatchedSubprocessWorkerHandler


class _Worker:
    def __init__(self, error: Exception | None):
        self.error = error

    def run(self) -> None:
        if self.error is not None:
            raise self.error


def _handler(error: Exception | None):
    handler = WatchedSubprocessWorkerHandler.__new__(WatchedSubprocessWorkerHandler)  # no runner, no process
    handler.worker, handler.deaths = _Worker(error), []
    handler._worker_died = handler.deaths.append
    return handler


@pytest.mark.parametrize("error, reported", [
    (RuntimeError("Worker subprocess exited with return code -9"), "killed by SIGKILL"),
    (RuntimeError("connection reset"), "connection reset"),
    (ValueError("bad frame"), "its worker thread failed (ValueError: bad frame)"),
    (OSError(24, "Too many open files"), "its worker thread failed (OSError"),
])
def test_every_way_the_worker_thread_ends_is_reported(error, reported):
    handler = _handler(error)
    handler._run_and_watch()
    assert len(handler.deaths) == 1 and reported in handler.deaths[0], handler.deaths


def test_a_worker_that_returns_is_not_a_death():
    handler = _handler(None)
    handler._run_and_watch()
    assert handler.deaths == []
