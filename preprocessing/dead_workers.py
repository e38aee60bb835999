"""A Beam SDK worker process that dies ends the job with one clear error instead of a hang.

Beam's FnApiRunner (the `local` preset; also what Beam's Python job service runs for the `portable` preset) sends
each bundle to an SDK worker and waits for the answer on that worker's control stream. When a worker process is
killed (the OOM killer, a stray `kill -9`), the stream just ends and the runner waits forever: measured, SIGKILL of
one of the local preset's two workers during the documents stage left the job without progress for 150 s until
it was killed. Beam watches Docker workers (DockerSdkWorkerHandler.watch_container fails the waiting
instructions when the container stops) but not subprocess workers; `WatchedSubprocessWorkerHandler` does the same
for them: when the worker process exits with a non-zero status before the runner stopped it, every instruction
waiting on it, or sent to it later, fails with `WorkerDied`, the bundle fails, and `runners.run_pipeline` reports
it in one line (the CLI exits 2; nothing is published, so a rerun starts clean). No retry: a worker killed for
memory would most likely be killed again, and the message says what to change.

    from preprocessing.dead_workers import install
    install()   # FnApiRunner's subprocess environment gets the watched handler (runners.make_runner does this)
"""

from __future__ import annotations

import re
import signal
import threading
import time

from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner.worker_handlers import (ControlFuture, SubprocessSdkWorkerHandler,
                                                                           WorkerHandler)

from bertfactory.errors import BertfactoryError


class WorkerDied(BertfactoryError):
    """An SDK worker process ended while the job still needed it."""


_deaths: list[WorkerDied] = []  # every worker death seen in this process, in order (runners.run_pipeline reads it)
_deaths_lock = threading.Lock()


def deaths_seen() -> int:
    """How many worker deaths this process has seen so far (a mark for `death_after`)."""
    with _deaths_lock:
        return len(_deaths)


def death_after(mark: int, wait_s: float = 2.0) -> WorkerDied | None:
    """The first worker death after `mark`, waiting up to `wait_s` for the watcher to see it: the job can fail
    elsewhere first (the data plane notices the closed channel: "Channel closed prematurely")."""
    deadline = time.monotonic() + wait_s
    while True:
        with _deaths_lock:
            if len(_deaths) > mark:
                return _deaths[mark]
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def describe_exit(returncode: int) -> str:
    """'killed by SIGKILL' / 'exit status 3' for a worker's return code (its /bin/sh reports a child killed by
    signal N as 128 + N)."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else None
    if number is not None:
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            pass
    return f"exit status {returncode}"


class WatchedSubprocessWorkerHandler(SubprocessSdkWorkerHandler):
    """SubprocessSdkWorkerHandler whose worker thread fails the waiting instructions when the process dies."""

    def start_worker(self) -> None:
        from apache_beam.runners.portability.local_job_service import SubprocessSdkWorker

        self._stopping = False
        self.worker = SubprocessSdkWorker(self._worker_command_line, self.control_address, self.provision_info,
                                          self.worker_id)
        self.worker_thread = threading.Thread(name="run_worker", target=self._run_and_watch, daemon=True)
        self.worker_thread.start()

    def _run_and_watch(self) -> None:
        try:
            self.worker.run()
        except RuntimeError as err:  # SubprocessSdkWorker.run: "Worker subprocess exited with return code N"
            if self._stopping:
                return
            code = re.search(r"return code (-?\d+)", str(err))
            how = describe_exit(int(code.group(1))) if code else str(err)
            died = WorkerDied(
                f"a Beam SDK worker process ({self.worker_id}) died while the job ran ({how}); the job was stopped "
                f"and nothing was published: rerun it (if the machine ran out of memory, give it fewer workers: "
                f"preprocess.runner.num_workers)")
            with _deaths_lock:
                _deaths.append(died)
            self._refuse_from_now_on(died)

    def _refuse_from_now_on(self, died: WorkerDied) -> None:
        """Fail what waits on the dead worker and whatever is sent to it later (a worker killed while idle would
        otherwise be handed the next bundle and never answer)."""
        conn = self.control_conn
        push = conn.push

        def push_after_death(request):
            if not isinstance(request, beam_fn_api_pb2.InstructionRequest):  # the end-of-stream marker on close
                return push(request)
            future = ControlFuture(request.instruction_id or "sent-after-worker-death")
            future.abort(died)
            return future

        conn.push = push_after_death
        conn.abort(died)
        # The runner also waits for the bundle's output on the data channel, and gives up there only when the
        # channel has failed (GrpcDataChannel.input_elements checks its _exception each second; an aborted control
        # future does not count as an answer): mark the dead worker's channel failed the way its reader would.
        self.data_conn._exception = died

    def close(self) -> None:
        self._stopping = True  # from here on the runner itself ends the worker
        try:
            super().close()
        except WorkerDied:  # data_conn.close() re-raises the failure marked above: the worker is gone already
            self.stop_worker()


def install() -> None:
    """Register the watched handler for FnApiRunner's subprocess environment (idempotent; process-wide, which is
    what the runner reads)."""
    registered = WorkerHandler._registered_environments.get(python_urns.SUBPROCESS_SDK)
    if registered is None or registered[0] is not WatchedSubprocessWorkerHandler:
        WorkerHandler.register_environment(python_urns.SUBPROCESS_SDK, bytes)(WatchedSubprocessWorkerHandler)


__all__ = ["WorkerDied", "WatchedSubprocessWorkerHandler", "death_after", "deaths_seen", "describe_exit", "install"]
