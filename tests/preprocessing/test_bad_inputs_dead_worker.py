"""A Beam SDK worker process killed in the middle of a local run ends the job with one clear error within a bounded
time, never a hang (issue 23, item 8: before preprocessing.dead_workers the job waited forever on the dead
worker's answer; measured: no progress 150 s after the kill). Through the CLI, on the real enwiki sample, with the
local preset's two worker processes; the whole test is bounded, a hang fails it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertfactory.samples import sample_path

ROOT = Path(__file__).resolve().parents[2]
BERTFACTORY = Path(sys.executable).with_name("bertfactory")
ENDS_WITHIN_S = 120  # after the kill; the whole stage takes ~50 s on 2 cores


def _descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process under `pid`."""
    listing = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    found = []
    for line in listing.splitlines():
        child, _, args = line.strip().partition(" ")
        found.append((int(child), args))
        found += _descendants(int(child))
    return found


def _sdk_workers(pid: int) -> list[int]:
    """The SDK worker processes themselves (Beam starts each through /bin/sh -c, which is left alone)."""
    return [p for p, args in _descendants(pid) if "sdk_worker_main" in args and not args.startswith("/bin/sh")]


def test_a_killed_worker_ends_the_job_with_a_clear_error(tmp_path):
    sample_path("enwiki")  # a clear "run bertfactory samples fetch" error instead of a pipeline failure
    log = tmp_path / "cli.log"
    with open(log, "w") as out:
        cli = subprocess.Popen([str(BERTFACTORY), "preprocess", "configs/local.yaml", "--out", str(tmp_path / "run"),
                                "--no-prefect"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        workers: list[int] = []
        while not workers and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = _sdk_workers(cli.pid)
        assert workers, f"no SDK worker process appeared:\n{log.read_text()[-3000:]}"
        time.sleep(1.0)  # inside the documents job, while the workers read the dump
        os.kill(workers[0], signal.SIGKILL)
        try:
            returncode = cli.wait(timeout=ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job hung: still running {ENDS_WITHIN_S} s after its worker was killed")
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    output = log.read_text()
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert returncode == 2 and len(errors) == 1, output[-3000:]
    assert "a Beam SDK worker process" in errors[0] and "died while the job ran (killed by SIGKILL)" in errors[0]
    assert "nothing was published" in errors[0] and "Traceback" not in output
    assert not (tmp_path / "run" / "shards").exists()  # nothing half-written was published
    time.sleep(1)
    assert _sdk_workers(os.getpid()) == []  # no worker left behind
