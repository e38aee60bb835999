"""The run-directory lock (flows/lock.py) between real processes: a second holder is refused at once with a message
naming the first (flow, pid, host); a holder killed with SIGKILL leaves a stale lock that the next one takes over;
the lock is re-entrant within a process; a flow started on a locked run directory fails before writing."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flows.lock import RunDirLocked, acquire, lock_path, read_holder, release, run_dir_lock

REPO = Path(__file__).resolve().parents[2]

HOLD = textwrap.dedent("""
    import sys, time
    from flows.lock import acquire
    acquire(sys.argv[1], "pipeline")
    print("locked", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/run, killed (SIGKILL) at the end if still alive."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield run, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_process_is_refused_naming_the_holder_then_takes_over_a_stale_lock(holder, caplog):
    run, proc = holder
    with pytest.raises(RunDirLocked, match=rf"run directory {run} is in use by flow 'pipeline' \(pid {proc.pid} on "):
        acquire(run, "corpus_refresh")
    os.kill(proc.pid, signal.SIGKILL)  # a preempted worker: no chance to release
    proc.wait()
    assert read_holder(lock_path(run))["pid"] == proc.pid  # its record is still there
    with caplog.at_level(logging.WARNING, logger="flows"):
        with run_dir_lock(run, "corpus_refresh"):
            assert read_holder(lock_path(run))["pid"] == os.getpid()
    assert f"taking over the lock of flow 'pipeline'" in caplog.text and f"pid {proc.pid}" in caplog.text
    assert lock_path(run).read_text() == ""  # released cleanly: nothing for the next one to take over


def test_the_lock_is_reentrant_in_a_process_and_one_per_real_path(tmp_path):
    run = tmp_path / "run"
    with run_dir_lock(run, "pipeline"):
        with run_dir_lock(tmp_path / "." / "run", "pipeline"):
            pass
        # still held after the inner release: another process is refused
        code = f"from flows.lock import acquire; acquire({str(run)!r}, 'evaluate')"
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
        assert out.returncode != 0 and "RunDirLocked" in out.stderr and f"pid {os.getpid()}" in out.stderr
    acquire(run, "pipeline")
    release(run)


def test_a_flow_on_a_locked_run_directory_fails_before_writing(holder, tmp_path):
    from flows.stages import preprocess

    run, proc = holder
    config = REPO / "configs" / "local.yaml"
    state = preprocess(str(config), str(run), return_state=True)
    assert state.is_failed()
    with pytest.raises(RunDirLocked, match=rf"in use by flow 'pipeline' \(pid {proc.pid}"):
        state.result()
    assert sorted(p.name for p in run.iterdir()) == [".bertfactory"]
    assert json.loads(lock_path(run).read_text())["flow"] == "pipeline"


def test_ranks_above_zero_of_a_distributed_job_enter_the_lock_their_rank_0_holds(holder, monkeypatch):
    # torchrun ... bertfactory pretrain: every rank runs the same command; only rank 0 may take the lock
    run, proc = holder
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with run_dir_lock(run, "pretrain"):
        assert read_holder(lock_path(run))["pid"] == proc.pid  # still rank 0's
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(RunDirLocked):
        with run_dir_lock(run, "pretrain"):
            pass


def test_a_refusal_names_the_holding_flow_runs_id_not_only_its_name(tmp_path):
    # every run of a deployment on one run directory has the same name (pipeline:local@run): a refused run that
    # named its holder by name alone named itself too; the id says which run to wait for or cancel
    from prefect import flow

    run = tmp_path / "run"
    code = f"from flows.lock import acquire; acquire({str(run)!r}, 'pipeline')"

    @flow(name="pipeline", flow_run_name="pipeline:local@run")
    def holding() -> tuple[str, dict, str]:
        from prefect.runtime import flow_run

        with run_dir_lock(run, "pipeline"):
            refused = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
            return flow_run.id, read_holder(lock_path(run)), refused.stderr

    run_id, holder, stderr = holding()
    assert holder["flow_run"] == "pipeline:local@run" and holder["flow_run_id"] == run_id
    assert f"flow run 'pipeline:local@run' (id {run_id}) (pid {os.getpid()} on " in stderr, stderr
