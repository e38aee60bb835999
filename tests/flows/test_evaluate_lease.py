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
import json
import shutil
from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.errors import InputError
from bertfactory.run_location import resolve_run_dir, working_copy_of
from flows import evaluate_cli, stage_runner
from flows.cli import main
from flows.lock import acquire, lock_path, read_lease, release
from tests.evaluation.conftest import make_eval_run, one_thread
from tests.flows.test_evaluate_cli import SMALL
from tests.flows.test_lock_lease import error_line, flock_is_free, held_by_another_process, released

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


def lease_during_the_stage(monkeypatch, lease: str) -> list:
    """The lease object as the evaluate stage starts, recorded around the real stage."""
    seen, real = [], stage_runner.run_stage

    def recording(*args, **kwargs):
        seen.append(read_lease(lease))
        return real(*args, **kwargs)

    monkeypatch.setattr(stage_runner, "run_stage", recording)
    return seen


@needs_s3
def test_a_model_directory_url_of_a_run_is_evaluated_into_that_run_location(model_run, bucket, tmp_path, monkeypatch,
                                                                             capsys):
    """`bertfactory evaluate s3://b/runs/x/pretrain/final` without --run-dir: evaluated into s3://b/runs/x, as
    RUN/pretrain/final on disk is into RUN (its working copy; its lease; eval/ pushed to the bucket)."""
    monkeypatch.delenv("BERTFACTORY_LEASE_TTL", raising=False)
    monkeypatch.setenv("BERTFACTORY_SHARD_CACHE", str(tmp_path / "shard-cache"))
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "machine"))
    monkeypatch.chdir(tmp_path)  # where a local runs/eval-final would appear
    url = f"{bucket}/runs/x"
    lease = f"{url}/.bertfactory/lease.json"
    upload_tree(model_run, url)
    work = working_copy_of(url)  # not made here: no earlier command on this machine marked it
    seen = lease_during_the_stage(monkeypatch, lease)

    assert main(["evaluate", f"{url}/pretrain/final", *ARGS]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "evaluate    ran" in out and f"Run directory: {work}\n" in out
    remote = storage.list_files(url)
    assert {"eval/results.json", "eval/report.md", "eval/tasks/trec_coarse.json", ".bertfactory/evaluate.json"} <= \
        set(remote)
    results = json.loads(storage.read_bytes(f"{url}/eval/results.json"))
    assert results["checkpoint"]["path"] == "pretrain/final" and "trec_coarse" in results["tasks"]
    assert len(seen) == 1 and seen[0]["flow"] == "evaluate"  # the run location's lease, held while it ran
    assert read_lease(lease) is None and released(work)  # and let go
    assert not (tmp_path / "runs").exists()  # nothing kept only on this machine
    assert not (work / "pretrain" / "final" / ".bertfactory").exists()  # the model pulled into the run's copy
    assert "no shards at" not in out  # the run's manifest was pulled with the model: the held-out scores could run


@needs_s3
def test_a_checkpoint_url_of_a_run_locks_the_run_and_one_outside_a_run_says_where_it_goes(
        model_run, bucket, tmp_path, monkeypatch, capsys):
    """RUN/pretrain/checkpoints/step-N by URL is the run location's too; a model directory no run holds
    (s3://b/models/m; s3://b/checkpoints/step-N, whose 'run' would be above the bucket) is evaluated as a local one
    is, into runs/eval-<name>, said in one line: the results are on this machine only."""
    monkeypatch.delenv("BERTFACTORY_LEASE_TTL", raising=False)
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "machine"))
    monkeypatch.chdir(tmp_path)
    final = model_run / "pretrain" / "final"
    run = f"{bucket}/runs/y"
    step = f"{run}/pretrain/checkpoints/step-5"
    upload_tree(model_run / "shards", f"{run}/shards")
    for url in (step, f"{bucket}/checkpoints/step-5"):
        upload_tree(final, url)
    runs, real = [], evaluate_cli._evaluate_checkpoint

    def evaluated(recipe, run_dir, has_shards):  # where it would go and what it holds meanwhile, not the fine-tuning
        runs.append((recipe.evaluate.checkpoint, run_dir, has_shards, read_lease(f"{run}/.bertfactory/lease.json")))
        return 0

    def outside_line(url: str, name: str) -> None:
        assert main(["evaluate", url, *ARGS]) == 0, capsys.readouterr().err
        lines = [line for line in capsys.readouterr().out.splitlines() if "not in a run directory" in line]
        assert lines == [f"evaluate: {url} is not in a run directory (RUN/pretrain/<name>, RUN/<stage>/checkpoints/"
                         f"<name>): the results go to runs/eval-{name} on this machine only; give --run-dir URL to "
                         "keep them in a run location"]

    monkeypatch.setattr(evaluate_cli, "_evaluate_checkpoint", evaluated)
    assert main(["evaluate", step, *ARGS]) == 0
    checkpoint, run_dir, has_shards, lease = runs.pop()
    assert run_dir == working_copy_of(run) and has_shards and lease["flow"] == "evaluate"
    assert checkpoint == str((run_dir / "pretrain" / "checkpoints" / "step-5").resolve())
    assert read_lease(f"{run}/.bertfactory/lease.json") is None and released(run_dir)
    assert "not in a run directory" not in capsys.readouterr().out

    outside_line(f"{bucket}/checkpoints/step-5", "step-5")
    assert runs.pop()[1] == Path("runs/eval-step-5")

    monkeypatch.setattr(evaluate_cli, "_evaluate_checkpoint", real)  # once for real: the results are where it says
    upload_tree(final, f"{bucket}/models/minilm")
    outside_line(f"{bucket}/models/minilm", "minilm")
    assert (tmp_path / "runs" / "eval-minilm" / "eval" / "results.json").is_file()
    assert not [name for name in storage.list_files(f"{bucket}/models/minilm") if name.startswith("eval/")]
