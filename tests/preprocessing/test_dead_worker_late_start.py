"""A worker that dies while the job's other worker is still starting ends the job with the one clear error, never a
hang (the rare CI hang of test_bad_inputs_dead_worker.py: the job failed before the second worker connected, and
the runner then waited forever for that worker to exit, which waited forever for its first instruction; fixed in
preprocessing/dead_workers.py, `_end_the_stream_of_a_late_worker`). The timing CI hit by chance is forced here: on
the local preset's two worker processes, the first is SIGKILLed as soon as its process exists and the second
starts LATE_S later. The job runs in a child process, so a hang is a bounded failure, not a stuck suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LATE_S = 5.0  # the second worker's start: well after the first one's death has failed the job
ENDS_WITHIN_S = 240  # the job takes ~10-30 s on a loaded 2-core machine; a hang is what this bounds


def _scenario(killed: str) -> None:
    """Run in the child: a two-worker local job whose `killed` ("first" or "second" created) worker is killed on
    start and whose other worker starts LATE_S later; prints the job's error line, and notes when each thing
    happened."""
    sys.path.insert(0, str(ROOT))
    import apache_beam as beam

    from preprocessing import dead_workers
    from preprocessing.config import RunnerConfig
    from preprocessing.runners import run_pipeline
    from tests.preprocessing.sdk_processes import sdk_workers

    watch = dead_workers.WatchedSubprocessWorkerHandler._run_and_watch
    started: list[str] = []

    def kill_on_start() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            workers = sdk_workers(os.getpid())
            if workers:
                os.kill(workers[0], signal.SIGKILL)
                return
            time.sleep(0.05)

    def run_and_watch(handler) -> None:
        started.append(handler.worker_id)
        if (len(started) == 1) == (killed == "first"):
            print(f"note: {time.monotonic():.2f} {handler.worker_id} is killed as soon as it starts", flush=True)
            threading.Thread(target=kill_on_start, daemon=True).start()
        else:
            time.sleep(LATE_S)
            print(f"note: {time.monotonic():.2f} {handler.worker_id} starts", flush=True)
        watch(handler)
        print(f"note: {time.monotonic():.2f} {handler.worker_id}'s process ended", flush=True)

    dead_workers.WatchedSubprocessWorkerHandler._run_and_watch = run_and_watch
    try:
        run_pipeline(lambda p: p | beam.Create(range(1000)) | beam.Map(lambda x: x * 2),
                     RunnerConfig(preset="local", num_workers=2), "documents")
    except dead_workers.WorkerDied as err:
        print(f"note: {time.monotonic():.2f} the job ended", flush=True)
        print(f"error: {err}", flush=True)
        return
    print("the job finished although a worker was killed", flush=True)


@pytest.mark.parametrize("killed", ["first", "second"])
def test_a_death_while_the_other_worker_starts_ends_the_job(killed):
    # both orders: the runner closes its workers in either order after the failure
    child = subprocess.Popen([sys.executable, __file__, killed], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=ENDS_WITHIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        raise AssertionError(f"the job hung: still running {ENDS_WITHIN_S} s after its first worker was killed\n"
                             f"{output[-3000:]}") from None
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert child.returncode == 0 and len(errors) == 1, output[-3000:]
    assert errors[0].startswith("error: documents: a Beam SDK worker process (worker_") and \
        "died while the job ran (killed by SIGKILL)" in errors[0], errors[0]


if __name__ == "__main__":
    _scenario(sys.argv[1])
