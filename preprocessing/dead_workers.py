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

import grpc
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner.worker_handlers import (BeamFnControlServicer, ControlConnection,
                                                                           ControlFuture, ExternalWorkerHandler,
                                                                           SubprocessSdkWorkerHandler, WorkerHandler)

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


_DIED_TEXT = re.compile(r"a Beam SDK worker process \(([^)]*)\) died while the job ran \(([^)]*)\)")
# what Beam's data plane raises when a worker's data stream ends in the middle of a bundle: the worker died (or its
# connection did) before the watch above saw it, which is how a portable job's worker death usually surfaces
_CHANNEL_CLOSED = "Channel closed prematurely"
DATA_CHANNEL_CLOSED = "its data channel closed in the middle of a bundle"  # how that death is described


def death_in_text(text: str) -> WorkerDied | None:
    """A WorkerDied rebuilt from an error text that carries one: a portable job fails in the job service's
    process, and the driver gets the failure only as text."""
    match = _DIED_TEXT.search(text)
    if match is not None:
        return WorkerDied(_message(match.group(1), match.group(2)))
    if _CHANNEL_CLOSED in text:
        return WorkerDied(_message("one of the job's", DATA_CHANNEL_CLOSED))
    return None


def _message(worker_id: str, how: str) -> str:
    return (f"a Beam SDK worker process ({worker_id}) died while the job ran ({how}); the job was stopped and "
            f"nothing was published: rerun it (if the machine ran out of memory, give it fewer workers: "
            f"preprocess.runner.num_workers)")


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


class _DeathWatch:
    """What both watched handlers do once their worker is gone (a mixin for GrpcWorkerHandler subclasses)."""

    _stopping = False

    def _worker_died(self, how: str) -> None:
        if self._stopping:  # the runner is ending the worker itself
            return
        died = WorkerDied(_message(self.worker_id, how))
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
        # The runner also waits for the bundle's output on the data channel, and gives up there only when the
        # channel has failed (GrpcDataChannel.input_elements checks its _exception each second; an aborted control
        # future does not count as an answer): mark the dead worker's channel failed the way its reader would.
        self.data_conn._exception = died
        # a snapshot (list() of a dict view runs under the GIL): Beam's conn.abort iterates the live dict, which the
        # runner's threads may add to at this moment ("dictionary changed size during iteration" would end this
        # thread with the waiting futures never failed)
        for future in list(conn._futures_by_id.values()):
            future.abort(died)

    def _end_the_stream_of_a_late_worker(self) -> None:
        """A worker still starting when the job ends (another worker died in the job's first seconds, and the job
        failed before this one connected) connects later and would wait forever for an instruction, while close()
        waits for it to exit: Beam's ControlConnection.close() sends the end of the stream only to a worker that
        has connected. Queue it now for one that has not (the lock is the one its connecting takes), so it is told
        to stop the moment it connects; a connected worker gets it from close() as before."""
        conn = self.control_conn
        with ControlConnection._lock:
            if conn._state == BeamFnControlServicer.UNSTARTED_STATE:
                conn._push_queue.put(BeamFnControlServicer._DONE_MARKER)

    def close(self) -> None:
        self._stopping = True  # from here on the runner itself ends the worker
        self._end_the_stream_of_a_late_worker()
        try:
            super().close()
        except (WorkerDied, grpc.RpcError):
            # data_conn.close() re-raises how its stream failed (marked above, or the gRPC error of a worker that
            # died before the watch saw it): the worker is gone already, there is nothing left to close but it
            self.stop_worker()


class WatchedSubprocessWorkerHandler(_DeathWatch, SubprocessSdkWorkerHandler):
    """SubprocessSdkWorkerHandler (the local preset's workers) whose worker thread fails the waiting instructions
    when the process exits before the runner stopped it."""

    def start_worker(self) -> None:
        from apache_beam.runners.portability.local_job_service import SubprocessSdkWorker

        from .sdk_worker_main import BEAM_WORKER, QUIET_WORKER

        # Beam's worker main started quietly (preprocessing/sdk_worker_main.py: no stray stderr lines per worker)
        command = self._worker_command_line.replace(BEAM_WORKER, QUIET_WORKER)
        self.worker = SubprocessSdkWorker(command, self.control_address, self.provision_info, self.worker_id)
        self.worker_thread = threading.Thread(name="run_worker", target=self._run_and_watch, daemon=True)
        self.worker_thread.start()

    def _run_and_watch(self) -> None:
        try:
            self.worker.run()
        except RuntimeError as err:  # SubprocessSdkWorker.run: "Worker subprocess exited with return code N"
            code = re.search(r"return code (-?\d+)", str(err))
            self._worker_died(describe_exit(int(code.group(1))) if code else str(err))
        except Exception as err:  # anything else ends the watch too: unreported, the job would wait forever
            self._worker_died(f"its worker thread failed ({type(err).__name__}: {err})")


# a pool's worker connects in 2-5 s on a busy 2-core machine; one that has not after this long is not coming
CONNECT_TIMEOUT_S = 60


class WatchedExternalWorkerHandler(_DeathWatch, ExternalWorkerHandler):
    """ExternalWorkerHandler (workers from a worker pool: the portable preset on preprocessing.portable_local)
    that watches the worker's control stream instead of its process, which another process started: the stream's
    reader ends (gRPC error) when the worker dies, and never before the runner closes it otherwise."""

    def start_worker(self) -> None:
        super().start_worker()
        threading.Thread(name="watch_worker", target=self._watch_control_stream, daemon=True).start()

    def _watch_control_stream(self) -> None:
        reader = self.control_conn._read_thread  # started when the worker connects its control stream
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while reader.ident is None and not self._stopping:
            if time.monotonic() > deadline:  # a worker killed while starting never connects: no stream to end
                self._worker_died(f"it did not connect within {CONNECT_TIMEOUT_S} s of being started")
                return
            time.sleep(0.2)
        if reader.ident is None:  # closed before the worker ever connected
            return
        reader.join()
        self._worker_died("its control stream ended")


_HANDLERS = {python_urns.SUBPROCESS_SDK: (WatchedSubprocessWorkerHandler, bytes),
             common_urns.environments.EXTERNAL.urn: (WatchedExternalWorkerHandler, beam_runner_api_pb2.ExternalPayload)}


def install(*, external: bool = False) -> None:
    """Register the watched handler for FnApiRunner's subprocess environment, and with `external` for external
    worker pools too (what a job service runs: preprocessing.portable_job_service). Idempotent; process-wide,
    which is what the runner reads."""
    for urn in [python_urns.SUBPROCESS_SDK] + ([common_urns.environments.EXTERNAL.urn] if external else []):
        handler, payload = _HANDLERS[urn]
        registered = WorkerHandler._registered_environments.get(urn)
        if registered is None or registered[0] is not handler:
            WorkerHandler.register_environment(urn, payload)(handler)


__all__ = ["WorkerDied", "WatchedExternalWorkerHandler", "WatchedSubprocessWorkerHandler", "death_after",
           "death_in_text", "deaths_seen", "describe_exit", "install"]
