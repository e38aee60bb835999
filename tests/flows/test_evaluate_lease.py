"""`bertfactory evaluate` of a checkpoint holds the lock of the run directory it writes, and on object storage the
run location's lease, as `bertfactory run` does (flows/lock.py): while another process or machine holds it the
evaluate is refused in the one line `run` gives, before writing; a model directory evaluated into --run-dir
elsewhere locks that run directory; after an evaluation (finished or failed) the lock and the lease are let go.
A local run directory held by another process, and an s3:// run location held by another machine's working copy,
against moto in server mode on 127.0.0.1 (tests/storage_servers.py).

Run: `.venv/bin/python -m pytest -q tests/flows/test_evaluate_lease.py`.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.errors import InputError
from bertfactory.run_location import resolve_run_dir
from flows import stage_runner
from flows.cli import main
from flows.lock import acquire, lock_path, read_holder, read_lease, release
from tests.evaluation.conftest import make_eval_run, one_thread
from tests.flows.test_evaluate_cli import SMALL
from tests.flows.test_lock_lease import HOLD, REPO, flock_is_free

# one task, one learning rate, one seed, no held-out scores: the evaluation itself is not what is tested here
ARGS = ["--no-prefect", "--task", "trec_coarse", *SMALL, "--set", "evaluate.baselines=[majority]",
        "--set", "evaluate.finetune.learning_rates=[1.0e-3]", "--set", "evaluate.intrinsic.enabled=false",
        "--set", "evaluate.objective.enabled=false"]

needs_s3 = pytest.mark.skipif(importlib.util.find_spec("moto") is None or importlib.util.find_spec("s3fs") is None,
                              reason="needs moto[server] and s3fs (test dependencies)")


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    """A tiny run directory (tokenizer, shards, pretrain/final); read-only: tests copy or upload it."""
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("lease") / "run", train_steps=5)


@contextmanager
def held_by_another_process(run_dir: Path):
    """Another process holding `run_dir`'s lock as the flow 'pipeline' (a `bertfactory run`); killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    return err.strip()


def released(run_dir: Path) -> bool:
    """The lock of `run_dir` is free and was let go cleanly (an empty lock file: nothing to take over)."""
    return flock_is_free(lock_path(run_dir)) and read_holder(lock_path(run_dir)) == {}


def test_evaluate_of_a_held_run_directory_is_refused_as_run_is_and_lets_the_lock_go(model_run, tmp_path, capsys,
                                                                                    monkeypatch):
    run = shutil.copytree(model_run, tmp_path / "run")
    model = str(run / "pretrain" / "final")
    out = tmp_path / "out"
    with held_by_another_process(run) as holder:
        assert main(["evaluate", str(run), *ARGS]) == 2
        line = error_line(capsys)
        assert line.startswith(f"error: run directory {run} is in use by flow 'pipeline' (pid {holder.pid} on ")
        assert line.endswith(f"(lock file: {lock_path(run)})")
        assert not (run / "eval").exists()  # refused before writing
        assert main(["run", "local", "--run-dir", str(run), "--no-prefect"]) == 2
        assert error_line(capsys) == line  # the refusal `bertfactory run` gives
        # a model directory of the held run evaluated into another run directory: that one is locked, not the run
        assert main(["evaluate", model, "--run-dir", str(out), *ARGS]) == 0, capsys.readouterr().err
    assert "evaluate    ran" in capsys.readouterr().out
    assert released(out)

    with held_by_another_process(out) as holder:  # --run-dir held: refused naming it
        assert main(["evaluate", model, "--run-dir", str(out), *ARGS]) == 2
        assert error_line(capsys).startswith(f"error: run directory {out} is in use by flow 'pipeline' "
                                             f"(pid {holder.pid} on ")

    def fails(*args, **kwargs):
        assert not flock_is_free(lock_path(out))  # held while the stage runs
        raise InputError("the task data went away")

    monkeypatch.setattr(stage_runner, "run_stage", fails)
    assert main(["evaluate", model, "--run-dir", str(out), *ARGS]) == 2
    assert error_line(capsys) == "error: the task data went away"
    assert released(out)  # let go on the error too


@pytest.fixture(scope="module")
def bucket():
    from tests.storage_servers import s3_bucket

    with s3_bucket("evallease") as url:
        yield url


def upload_tree(local: Path, url: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.upload_file(path, storage.join(url, path.relative_to(local).as_posix()))


def working_copy_on(machine: Path, url: str, monkeypatch) -> Path:
    """This process as `machine` from now on (its own working copies), and its working copy of `url`."""
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(machine))
    return resolve_run_dir(url)


@needs_s3
def test_evaluate_on_s3_is_refused_while_another_machine_holds_the_lease_then_runs_and_releases_it(
        model_run, bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("BERTFACTORY_LEASE_TTL", raising=False)
    monkeypatch.setenv("BERTFACTORY_SHARD_CACHE", str(tmp_path / "shard-cache"))
    url = f"{bucket}/run"
    lease = f"{url}/.bertfactory/lease.json"
    upload_tree(model_run, url)
    other = working_copy_on(tmp_path / "machine-b", url, monkeypatch)
    acquire(other, "pipeline")  # machine b's `bertfactory run` (its own lease owner, though in this process)
    try:
        holder = read_lease(lease)
        work = working_copy_on(tmp_path / "machine-a", url, monkeypatch)
        assert main(["evaluate", url, *ARGS]) == 2
        line = error_line(capsys)
        assert line.startswith(f"error: run directory {url} is in use by flow 'pipeline' (pid {holder['pid']} on ")
        assert "whose lease expires in" in line and line.endswith(f"(lease: {lease})")
        assert read_lease(lease)["owner"] == holder["owner"] and released(work)  # theirs untouched, our flock let go
        assert not [name for name in storage.list_files(url) if name.startswith("eval/")]  # nothing written
    finally:
        release(other)

    assert main(["evaluate", url, *ARGS]) == 0, capsys.readouterr().err
    assert "evaluate    ran" in capsys.readouterr().out
    assert "eval/results.json" in storage.list_files(url)
    assert read_lease(lease) is None and released(work)  # deleted at the end, as `run` leaves it
    third = working_copy_on(tmp_path / "machine-c", url, monkeypatch)
    acquire(third, "pipeline")  # another machine takes the run location at once
    release(third)
