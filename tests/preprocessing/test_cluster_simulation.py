"""A cluster simulated on this machine: the preprocessing job on the portable runner with two external worker pools
that share no disk with the driver or with each other (each pool and the job service with its own working
directory, TMPDIR and HOME: preprocessing.portable_local's `isolate`), the run directory and the inputs in a bucket
of a real S3 server on 127.0.0.1 (moto), the driver a `bertfactory preprocess --out s3://...` process of its own.

It fails if the shards differ from the same run on the local disk, if either pool did no work, if a worker's file
turns up anywhere but in its own scratch or the bucket, or if the job leaves its staging area behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertfactory.samples import sample_path
from preprocessing.portable_local import local_portable_cluster
from tests.storage_servers import start_s3

CLI = str(Path(sys.executable).parent / "bertfactory")
SMALL = ["preprocess.heldout_fraction=0.3", "preprocess.tokenizer.vocab_size=1500"]
# files only a job's workers make (spills, pre-shards, masked parts and their keys, bucket-mode parts)
WORKER_FILES = (".spill", ".npy")


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _env(root: Path, server=None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "STORAGE_EMULATOR", "BERTFACTORY_WORK", "BERTFACTORY_SHARD",
                                "BERTFACTORY_EXCHANGE"))}
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(OMP_NUM_THREADS="1", BERTFACTORY_WORK_ROOT=str(root / "work"), TMPDIR=str(root / "tmp"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    if server is not None:
        env.update(server.env)
    return env


def _bf(*args: str, env: dict, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _remote(server, url: str) -> dict[str, bytes]:
    saved = dict(os.environ)
    os.environ.update(server.env)
    try:
        from bertfactory import storage

        return {name: storage.read_bytes(storage.join(url, name)) for name in storage.list_files(url)}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def _manifest_without_runner(data: bytes) -> dict:
    """The manifest less what names the runner and the inputs' locations (URLs here, paths there): the config
    hash covers corpus.inputs; the sources are compared by name, sha256 and size."""
    manifest = json.loads(data)
    manifest.pop("runner")
    manifest.pop("config_hash")
    manifest["sources"] = [{**s, "path": s["path"].rsplit("/", 1)[-1]} for s in manifest["sources"]]
    return manifest


@pytest.fixture(scope="module")
def s3():
    server = start_s3()
    yield server
    server.stop()


def test_workers_that_share_no_disk_exchange_everything_through_the_bucket(tmp_path, s3):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = [Path(shutil.copy(f, corpus / f.name)) for f in sorted(Path(sample_path("sotu")).rglob("*.txt"))[:8]]
    bucket = s3.make_bucket("cluster")
    s3.apply()
    try:
        from bertfactory import storage

        inputs = [storage.join(bucket, "inputs", f.name) for f in files]
        for f, url in zip(files, inputs):
            storage.upload_file(f, url)
    finally:
        s3.restore()

    # the reference: the same corpus on the local disk, the default runner
    reference = _bf("preprocess", "--input", *map(str, files), "--format", "text", "--out", str(tmp_path / "local"),
                    "--no-prefect", *_sets(SMALL), env=_env(tmp_path / "reference"), cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-4000:]

    machines = tmp_path / "machines"
    driver = tmp_path / "driver"
    before = _files(tmp_path)
    s3.apply()  # the pools' workers reach the bucket the standard way (AWS_ENDPOINT_URL, keys)
    try:
        with local_portable_cluster(pools=2, log_dir=machines / "logs", isolate=machines) as cluster:
            runner = cluster.runner_config(num_workers=2).model_dump(
                mode="json", include={"preset", "num_workers", "portable"})
            run = _bf("preprocess", "--input", *inputs, "--format", "text", "--out", f"{bucket}/run", "--no-prefect",
                      *_sets(SMALL), "--set", f"preprocess.runner={json.dumps(runner)}",
                      env=_env(driver, s3), cwd=driver)
            started = cluster.workers_started()
    finally:
        s3.restore()
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted((machines / "logs").glob("*.log")))
    assert run.returncode == 0, run.stderr[-5000:] + logs
    assert "exchange their files through s3://cluster/run/.preprocess-staging/" in run.stderr
    assert len(started) == 2 and min(started) >= 1, started  # both "machines" ran workers of the job

    # the bucket holds the published run, byte for byte the local one, and no staging area
    remote = _remote(s3, f"{bucket}/run")
    assert not [name for name in remote if name.startswith(".preprocess-staging")], sorted(remote)
    local = {p.relative_to(tmp_path / "local").as_posix(): p.read_bytes()
             for p in _files(tmp_path / "local") if ".bertfactory" not in p.parts}
    shards = sorted(name for name in local if name.endswith(".arrow"))
    assert shards and all(remote[name] == local[name] for name in shards)
    assert remote["tokenizer/tokenizer.json"] == local["tokenizer/tokenizer.json"]
    assert _manifest_without_runner(remote["shards/manifest.json"]) == \
        _manifest_without_runner(local["shards/manifest.json"])
    assert json.loads(remote["shards/manifest.json"])["runner"]["runner"] == "PortableRunner"

    # where the job's files went: each worker wrote in its own scratch (its TMPDIR), the driver received only the
    # published outputs in its working copy, and nothing else anywhere under this test's folder
    scratch = {name: _files(machines / name / "tmp" / "bertfactory-exchange") for name in ("pool-0", "pool-1")}
    assert all(scratch.values()), {name: len(f) for name, f in scratch.items()}
    new = _files(tmp_path) - before
    outside = sorted(str(p) for p in new if not (p.is_relative_to(machines) or p.is_relative_to(driver / "work")))
    assert not outside, outside
    in_driver = sorted(str(p) for p in new if p.is_relative_to(driver)
                       and (p.name.endswith(WORKER_FILES) or ".bundles" in p.parts))
    assert not in_driver, in_driver
    assert not _files(driver / "tmp")
    for name in ("job-service",):  # the job service ran no user code: no exchange files there
        assert not (machines / name / "tmp" / "bertfactory-exchange").exists()


def test_a_failed_attempts_staging_is_cleared_and_one_job_through_the_bucket_matches_local(tmp_path, s3):
    """The tokenizer given (both pipelines as one Beam job), the workers in process but exchanging through the
    bucket (preprocess.runner.exchange bucket), and a failed attempt's staging folder left in the bucket: removed
    before the job starts, and the output is byte for byte the local disk's."""
    files = [str(f) for f in sorted(Path(sample_path("sotu")).rglob("*.txt"))[8:14]]
    reference = _bf("preprocess", "--input", *files, "--format", "text", "--out", str(tmp_path / "local"),
                    "--no-prefect", *_sets(SMALL), env=_env(tmp_path / "reference"), cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-4000:]
    tokenizer = str(tmp_path / "local" / "tokenizer" / "tokenizer.json")
    again = _bf("preprocess", "--input", *files, "--format", "text", "--out", str(tmp_path / "given"), "--no-prefect",
                "--tokenizer", tokenizer, *_sets(SMALL), env=_env(tmp_path / "reference"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]

    bucket = s3.make_bucket("one-job")
    s3.apply()
    try:
        from bertfactory import storage

        inputs = [storage.join(bucket, "inputs", Path(f).name) for f in files]
        for f, url in zip(files, inputs):
            storage.upload_file(f, url)
        leftover = f"{bucket}/run/.preprocess-staging/0123456789ab/shards/train/.spill-rows/00000-000000.npy"
        storage.write_bytes(leftover, b"a failed attempt's spill")
    finally:
        s3.restore()
    driver = tmp_path / "driver"
    run = _bf("preprocess", "--input", *inputs, "--format", "text", "--out", f"{bucket}/run", "--no-prefect",
              "--tokenizer", tokenizer, *_sets(SMALL), "--set", "preprocess.runner.exchange=bucket",
              env=_env(driver, s3), cwd=driver)
    assert run.returncode == 0, run.stderr[-5000:]
    assert "exchange their files through s3://one-job/run/.preprocess-staging/" in run.stderr
    remote = _remote(s3, f"{bucket}/run")
    assert not [name for name in remote if name.startswith(".preprocess-staging")], sorted(remote)
    local = {p.relative_to(tmp_path / "given").as_posix(): p.read_bytes() for p in _files(tmp_path / "given")}
    shards = sorted(name for name in local if name.endswith(".arrow"))
    assert shards and all(remote[name] == local[name] for name in shards)
    assert _manifest_without_runner(remote["shards/manifest.json"]) == \
        _manifest_without_runner(local["shards/manifest.json"])
    # the in-process workers' scratch (the driver's TMPDIR here) was used, and is gone with the job's area
    assert not _files(driver / "tmp")


def test_the_store_cut_while_workers_exchange_through_it_is_one_line_and_the_rerun_completes(tmp_path, s3):
    """The S3 server goes away (a TCP proxy resets every connection) once the workers have begun uploading their
    files: one `error:` line, exit 2, nothing published; the rerun, with the store back, publishes the same bytes
    as the local disk."""
    from tests.storage_servers import TcpProxy

    files = [str(f) for f in sorted(Path(sample_path("sotu")).rglob("*.txt"))[14:20]]
    reference = _bf("preprocess", "--input", *files, "--format", "text", "--out", str(tmp_path / "local"),
                    "--no-prefect", *_sets(SMALL), env=_env(tmp_path / "reference"), cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-4000:]
    bucket = s3.make_bucket("outage")
    s3.apply()
    try:
        from bertfactory import storage

        inputs = [storage.join(bucket, "inputs", Path(f).name) for f in files]
        for f, url in zip(files, inputs):
            storage.upload_file(f, url)
    finally:
        s3.restore()
    proxy = TcpProxy(s3.port)
    try:
        env = {**_env(tmp_path / "driver", s3), "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_MAX_ATTEMPTS": "2"}
        args = ["preprocess", "--input", *inputs, "--format", "text", "--out", f"{bucket}/run", "--no-prefect",
                *_sets(SMALL), "--set", "preprocess.runner.exchange=bucket"]
        proc = subprocess.Popen([CLI, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 300  # a bound for a hang: the workers' first upload
        while time.monotonic() < deadline and proc.poll() is None:
            if any(n.startswith(".preprocess-staging/") for n in _remote(s3, f"{bucket}/run")):
                break
            time.sleep(0.05)
        proxy.cut()
        _out, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and lines[-1].startswith(f"error: {bucket}/run/"), err[-3000:]
        assert "failed" in lines[-1] and "Traceback" not in err, err[-4000:]
        committed = set(_remote(s3, f"{bucket}/run"))
        assert not {"shards/manifest.json", ".bertfactory/preprocess.json"} & committed, sorted(committed)
        proxy.restore()
        rerun = _bf(*args, env=env, cwd=tmp_path)
        assert rerun.returncode == 0, rerun.stderr[-4000:]
    finally:
        proxy.close()
    remote = _remote(s3, f"{bucket}/run")
    assert not [name for name in remote if name.startswith(".preprocess-staging")], sorted(remote)
    local = {p.relative_to(tmp_path / "local").as_posix(): p.read_bytes() for p in _files(tmp_path / "local")}
    shards = sorted(name for name in local if name.endswith(".arrow"))
    assert shards and all(remote[name] == local[name] for name in shards)
