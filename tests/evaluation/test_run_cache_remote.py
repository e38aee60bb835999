"""A stopped evaluation of a run directory on object storage continues on another machine (evaluation/run_cache.py):
each finished fine-tuning run goes to the run location as it is written (its weights before its JSON), a fresh
working copy starts from the runs the location holds, and the task's runs leave the location once its part is
there. Against a real S3 API server on 127.0.0.1 (moto, tests/storage_servers.py); killed for real through the
`bertfactory evaluate` console path, the working copy then deleted. A local run directory makes no storage call."""

import json
import logging
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

import bertfactory.storage as storage
from bertfactory.run_location import publish_files, resolve_run_dir
from evaluation.finetune import RunResult
from evaluation.run_cache import RunCache
from flows.cli import main
from flows.lock import read_lease
from flows.stage_runner import run_cached
from tests.evaluation.test_run_cache import DIES_IN_THE_SIXTH_RUN, evaluate_args, task_results
from tests.storage_servers import start_s3

RUNS = "eval/parts/runs/movie_sentiment"
REUSED = "finished before the evaluation stopped; reused"


@pytest.fixture(scope="module")
def s3():
    server = start_s3()
    yield server
    server.stop()


def machine(monkeypatch, server, root) -> None:
    """This process as one machine: its own working copies, the server's endpoint."""
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(root))


def run_result(seed: int) -> RunResult:
    return RunResult(seed=seed, learning_rate=1e-3, best_epoch=1, dev_metrics={"accuracy": 0.5 + seed / 100},
                     test_metrics={"accuracy": 0.25, "f1": 0.125}, epochs=[{"epoch": 1, "train_loss": 0.69}],
                     best_state={"w": torch.arange(4.0) * seed})


def upload_tree(local, url: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.upload_file(path, storage.join(url, path.relative_to(local).as_posix()))


def test_a_local_run_directory_makes_no_storage_calls(monkeypatch, tmp_path):
    def no_call(*args, **kwargs):
        raise AssertionError(f"a storage call for a local run directory: {args}")

    for name in ("filesystem", "list_files", "upload_file", "download_file", "object_version", "delete", "exists",
                 "read_bytes", "write_bytes"):
        monkeypatch.setattr(storage, name, no_call)
    run_dir = tmp_path / "run"
    (run_dir / ".bertfactory").mkdir(parents=True)  # a local run's stamps folder, without an origin
    cache = RunCache(run_dir / RUNS, "key", keep_states=True)
    cache.put("t/m", 1e-3, 1, run_result(1))
    assert cache.get("t/m", 1e-3, 1).test_metrics == {"accuracy": 0.25, "f1": 0.125}
    assert torch.equal(cache.state("t/m", 1e-3, 1)["w"], torch.arange(4.0))
    publish_files([cache.path("t/m", 1e-3, 1)])  # the part's early push: nothing for a local run
    cache.clear()
    assert not (run_dir / RUNS).exists()


def test_runs_go_up_as_written_and_a_fresh_working_copy_reuses_them(s3, monkeypatch, tmp_path):
    url = f"{s3.make_bucket('unit')}/run"
    machine(monkeypatch, s3, tmp_path / "a")
    uploads = []
    upload = storage.upload_file
    monkeypatch.setattr(storage, "upload_file", lambda local, to: (uploads.append(to.rsplit(".", 1)[1]),
                                                                    upload(local, to)))
    cache = RunCache(resolve_run_dir(url) / RUNS, "key", keep_states=True)
    for seed in (1, 2):
        cache.put("t/m", 1e-3, seed, run_result(seed))
    assert uploads == ["pt", "json", "pt", "json"]  # each run's weights before the JSON that commits it
    assert sorted(storage.list_files(f"{url}/{RUNS}")) == \
        sorted(p.name for p in (tmp_path / "a").rglob("*") if p.parent.name == "movie_sentiment")

    shutil.rmtree(tmp_path / "a")  # the machine is gone; another one starts from the bucket alone
    machine(monkeypatch, s3, tmp_path / "b")
    again = RunCache(resolve_run_dir(url) / RUNS, "key", keep_states=True)
    here = again.directory
    assert sorted(p.suffix for p in here.iterdir()) == [".json", ".json"]  # the weights wait until needed
    assert again.get("t/m", 1e-3, 2).dev_metrics == {"accuracy": 0.52}
    assert again.get("t/m", 1e-3, 3) is None
    assert torch.equal(again.state("t/m", 1e-3, 2)["w"], torch.arange(4.0) * 2)  # the best run's, fetched now
    assert RunCache(here, "other key").get("t/m", 1e-3, 2) is None  # under other inputs: run again
    again.clear()
    assert storage.list_files(f"{url}/{RUNS}") == {} and not here.exists()


def test_a_failed_transfer_is_one_storage_error_line(s3, monkeypatch, tmp_path):
    machine(monkeypatch, s3, tmp_path)
    gone = "s3://no-such-bucket/run"  # the bucket went away after the evaluation started
    cache = RunCache(resolve_run_dir(gone, check=False) / RUNS, "key")
    with pytest.raises(storage.StorageError) as err:
        cache.put("t/m", 1e-3, 1, run_result(1))
    message = str(err.value)
    assert message.startswith(f"{gone}/{RUNS}/") and "uploading" in message and "\n" not in message, message


def test_the_evaluate_stage_pulls_every_finished_part_and_never_pushes_runs(s3, monkeypatch, tmp_path):
    url = f"{s3.make_bucket('stage')}/run"
    machine(monkeypatch, s3, tmp_path / "a")
    first = resolve_run_dir(url)

    def evaluate_a():
        for rel in ("eval/tasks/a.json", "eval/parts/intrinsic.json", f"{RUNS}/0123456789abcdef.json",
                    "eval/results.json", "eval/report.md"):
            (first / rel).parent.mkdir(parents=True, exist_ok=True)
            (first / rel).write_text("{}")
        return {}

    assert run_cached("evaluate", first, "a" * 64, evaluate_a)["status"] == "ran"
    assert sorted(n for n in storage.list_files(url) if n.startswith("eval/")) == \
        ["eval/parts/intrinsic.json", "eval/report.md", "eval/results.json", "eval/tasks/a.json"]  # runs: the cache's

    machine(monkeypatch, s3, tmp_path / "b")  # another machine evaluates another task on the same run location
    second = resolve_run_dir(url)
    seen = []

    def evaluate_b():
        seen.extend(sorted(p.relative_to(second).as_posix() for p in (second / "eval").rglob("*") if p.is_file()))
        return {}

    assert run_cached("evaluate", second, "b" * 64, evaluate_b)["status"] == "ran"
    # the finished parts, reused and merged into results.json; no other task's runs
    assert seen == ["eval/parts/intrinsic.json", "eval/report.md", "eval/results.json", "eval/tasks/a.json"]


@pytest.mark.slow
def test_a_killed_evaluation_on_s3_continues_on_a_fresh_machine(eval_run, task_slice, s3, tmp_path, monkeypatch,
                                                                 caplog):
    task_file = task_slice(tmp_path / "reviews.txt", 300)
    reference = shutil.copytree(eval_run, tmp_path / "reference")
    assert main(["evaluate", *evaluate_args(reference, task_file)]) == 0

    url = f"{s3.make_bucket('evalkill')}/run"
    machine(monkeypatch, s3, tmp_path / "first")
    upload_tree(eval_run, url)
    # the stopped machine's lease (evaluate holds the run location's, flows/lock.py) lives a short TTL here, so
    # that the fresh machine need not wait the default 120 s for it to expire
    died = subprocess.run([sys.executable, "-c", DIES_IN_THE_SIXTH_RUN, "evaluate", *evaluate_args(url, task_file)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "BERTFACTORY_LEASE_TTL": "5"})
    assert died.returncode == 137, died.stderr[-3000:]
    left = read_lease(f"{url}/.bertfactory/lease.json")
    assert left["flow"] == "evaluate" and left["pid"] != os.getpid()  # killed holding it: no release
    kept = storage.list_files(f"{url}/{RUNS}")
    assert sorted(json.loads(storage.read_bytes(f"{url}/{RUNS}/{name}"))["model"] for name in kept) == \
        ["movie_sentiment/pretrained"] * 4 + ["movie_sentiment/random_init"]  # in the bucket, not just the copy
    assert "eval/tasks/movie_sentiment.json" not in storage.list_files(url)

    shutil.rmtree(tmp_path / "first")  # the stopped machine's working copy is gone: a fresh machine continues
    machine(monkeypatch, s3, tmp_path / "second")
    time.sleep(max(0.0, left["expires"] - time.time()) + 0.1)  # once its lease has expired
    caplog.clear()
    caplog.set_level(logging.INFO, logger="evaluation.run_cache")
    assert main(["evaluate", *evaluate_args(url, task_file)]) == 0
    assert caplog.text.count(REUSED) == 5, caplog.text[-3000:]
    assert "taking over the lease of flow 'evaluate'" in caplog.text and "expired" in caplog.text
    assert read_lease(f"{url}/.bertfactory/lease.json") is None  # the continued evaluation let its own go
    part = json.loads(storage.read_bytes(f"{url}/eval/tasks/movie_sentiment.json"))
    assert part["value"] == task_results(reference)  # every run, the grid, the chosen rate, the comparison
    assert "movie_sentiment" in json.loads(storage.read_bytes(f"{url}/eval/results.json"))["tasks"]
    assert storage.list_files(f"{url}/eval/parts/runs") == {}  # the part holds them now, in the bucket too
    assert not (resolve_run_dir(url) / RUNS).exists()
