"""Run directories on object storage, as users run them (docs/cluster.md), against real S3 and GCS API servers on
127.0.0.1 (moto in server mode, gcp-storage-emulator; tests/storage_servers.py):

- an unusable URL is one `error:` line naming it and what to install or set, exit 2, before any work, and never a
  local folder named after the URL;
- the README's ad-hoc flow (preprocess -> pretrain -> evaluate) with `--out s3://...` and `gs://...`, each stage
  on a different "machine" (its own working copy and shard cache), gives shards byte-identical to the same run on
  local disk and the same CPU loss curve;
- `torchrun` on two "nodes" (two launchers, each with its own working copy and a shard cache smaller than the
  shards) trains from the bucket as one process with the whole batch does;
- SIGKILL three times with the checkpoints on S3, resumed on a fresh machine: the same final weights; a death
  between a checkpoint's local save and its upload: the resume starts from the bucket's checkpoint, no metric lost;
- the storage server cut mid-preprocess and mid-checkpoint: one clear error, nothing committed, and the rerun
  completes with the same output;
- the corpus refresh on a bucket: versions, their ledger and lineage, read back from another machine;
- a distillation's general student pushed by one machine, pulled by a fresh one and by a local run by its URL.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertfactory.samples import sample_path
from tests.storage_servers import TcpProxy, free_port, start_gcs, start_s3

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "bertfactory")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
SMALL = ["preprocess.heldout_fraction=0.3", "preprocess.tokenizer.vocab_size=1500"]
TRAIN = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
         "pretrain.max_steps=8", "pretrain.batch_size=8", "pretrain.warmup_steps=2", "pretrain.log_every=1",
         "pretrain.save_every=4", "pretrain.grad_accumulation=1"]
EVALUATE = ["evaluate.finetune.epochs=1", "evaluate.finetune.num_seeds=1", "evaluate.finetune.max_seq_len=32",
            "evaluate.finetune.batch_size=16", "evaluate.finetune.max_train_examples=80",
            "evaluate.finetune.max_eval_examples=40", "evaluate.num_threads=1"]


def sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


@pytest.fixture(scope="module")
def s3():
    server = start_s3()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gcs():
    server = start_gcs()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    """Ten State of the Union addresses: the user's own text files."""
    directory = tmp_path_factory.mktemp("corpus")
    files = []
    for source in sorted(Path(sample_path("sotu")).rglob("*.txt"))[:10]:
        files.append(Path(shutil.copy(source, directory / source.name)))
    return files


def machine(root: Path, name: str, server=None, **extra: str) -> dict[str, str]:
    """The environment of one "machine": its own working copies and shard cache, the server's endpoint."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "STORAGE_EMULATOR", "BERTFACTORY_WORK", "BERTFACTORY_SHARD"))}
    env.update(OMP_NUM_THREADS="1", BERTFACTORY_WORK_ROOT=str(root / name / "work"),
               BERTFACTORY_SHARD_CACHE=str(root / name / "shards"), PYTHONPATH=str(REPO))
    if server is not None:
        env.update(server.env)
    env.update(extra)
    return env


def bf(*args: str, env: dict, cwd: Path, ok: bool = True, launcher: list[str] | None = None,
       timeout: int = 600) -> subprocess.CompletedProcess:
    run = subprocess.run([*(launcher or []), CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if ok:
        assert run.returncode == 0, f"bertfactory {' '.join(args)} exited {run.returncode}:\n{run.stderr[-5000:]}"
    return run


def remote_files(server, url: str) -> dict[str, bytes]:
    """Every object under `url` with its bytes, read with the client the product uses."""
    saved = dict(os.environ)
    os.environ.update(server.env)
    try:
        from bertfactory import storage

        names = storage.list_files(url)
        return {name: storage.read_bytes(storage.join(url, name)) for name in names}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def local_files(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def losses(metrics: bytes | str) -> list[tuple[int, float]]:
    text = metrics.decode() if isinstance(metrics, bytes) else metrics
    return [(r["step"], r["loss"]) for r in map(json.loads, text.splitlines())]


def no_url_folder(*roots: Path) -> None:
    for root in roots:
        odd = [p for p in root.rglob("*") if ":" in p.name]
        assert not odd, f"a URL became a local folder: {odd}"


# -- unusable locations ------------------------------------------------------------------------------------------

def test_unusable_locations_are_one_line_before_any_work(tmp_path, s3, corpus):
    closed = free_port()
    bare = machine(tmp_path, "bare", HOME=str(tmp_path / "home"), GOOGLE_APPLICATION_CREDENTIALS="")
    cases = [
        (["preprocess", "--input", str(corpus[0]), "--format", "text", "--out", "ftp://host/run"], bare,
         "ftp://host/run: unsupported URL scheme ftp://"),
        (["preprocess", "--input", str(corpus[0]), "--format", "text", "--out", "s3://runs/a"], bare,
         "s3://runs/a: no AWS credentials found; set AWS_ACCESS_KEY_ID"),
        (["pretrain", "local", "--run-dir", "gs://runs/a", "--no-prefect"], bare,
         "gs://runs/a: no Google Cloud credentials found"),
        (["preprocess", "--input", str(corpus[0]), "--format", "text", "--out", "s3://no-such-bucket/a",
          "--no-prefect"], machine(tmp_path, "m", s3),
         "s3://no-such-bucket/a: the bucket no-such-bucket does not exist"),
        (["pretrain", "local", "--run-dir", "s3://runs/a", "--no-prefect"],
         machine(tmp_path, "m", s3, AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed}"),
         f"s3://runs/a: cannot reach the bucket runs at http://127.0.0.1:{closed}"),
        (["evaluate", "s3://no-such-bucket/model", "--task", "movie_sentiment"], machine(tmp_path, "m", s3),
         "s3://no-such-bucket/model: the bucket no-such-bucket does not exist"),
        (["export", str(tmp_path), "--to", "hf", "s3://no-such-bucket/hf"], machine(tmp_path, "m", s3),
         "s3://no-such-bucket/hf: the bucket no-such-bucket does not exist"),
    ]
    for args, env, expected in cases:
        run = bf(*args, env=env, cwd=tmp_path, ok=False, timeout=300)  # a bound for a hang (retries, backoff)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and lines and lines[-1].startswith(f"error: {expected}"), \
            (args, run.returncode, run.stderr[-2000:])
        assert "Traceback" not in run.stderr, run.stderr
    no_url_folder(tmp_path)


def test_a_missing_client_package_names_what_to_install(monkeypatch, capsys, tmp_path):
    import importlib.util

    from bertfactory import storage
    from flows.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(storage.importlib.util, "find_spec", lambda name, *a: None if name == "gcsfs" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["pretrain", "local", "--run-dir", "gs://runs/x", "--no-prefect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == ("error: gs://runs/x: gs:// needs the package gcsfs, which is not installed; "
                   "pip install 'bertfactory[gcs]' (gcsfs)")
    no_url_folder(tmp_path)


# -- the README's ad-hoc flow on a bucket -------------------------------------------------------------------------

def _task_file(directory: Path) -> Path:
    lines = ["text\tlabel"] + [f"{'a fine film, well acted' if i % 2 else 'a dull film, badly acted'} ({i})\t"
                               f"{'pos' if i % 2 else 'neg'}" for i in range(160)]
    path = directory / "reviews.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, corpus) -> Path:
    """The reference: the same flow on local disk."""
    root = tmp_path_factory.mktemp("local")
    env = machine(root, "local")
    bf("preprocess", "--input", *map(str, corpus), "--format", "text", "--out", str(root / "run"), "--no-prefect",
       *sets(SMALL), env=env, cwd=root)
    bf("pretrain", "local", "--run-dir", str(root / "run"), "--no-prefect", *sets(TRAIN), env=env, cwd=root)
    return root / "run"


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_adhoc_flow_on_a_bucket_matches_local_disk(scheme, request, tmp_path, corpus, local_run):
    server = request.getfixturevalue({"s3": "s3", "gs": "gcs"}[scheme])
    bucket = server.make_bucket(f"adhoc-{scheme}")
    url = f"{bucket}/runs/one"
    # the preprocessing through Prefect (the README's command), each later stage on another machine
    pre = bf("preprocess", "--input", *map(str, corpus), "--format", "text", "--out", url, *sets(SMALL),
             env=machine(tmp_path, "preprocessor", server), cwd=tmp_path)
    assert f"Run directory: {url} (working copy" in pre.stdout
    shards = remote_files(server, f"{url}/shards")
    expected = local_files(local_run / "shards")
    for name in ("manifest.json", "train/part-00000.arrow", "heldout/part-00000.arrow"):
        assert name in shards
    assert {n: b for n, b in shards.items() if n != "stats.json"} == \
        {n: b for n, b in expected.items() if n != "stats.json"}, "shards byte-identical to the local run"

    trainer = machine(tmp_path, "trainer", server)
    bf("pretrain", "local", "--run-dir", url, "--no-prefect", *sets(TRAIN), env=trainer, cwd=tmp_path)
    pretrain = remote_files(server, f"{url}/pretrain")
    assert losses(pretrain["metrics.jsonl"]) == losses((local_run / "pretrain/metrics.jsonl").read_text())
    assert pretrain["final/model.safetensors"] == (local_run / "pretrain/final/model.safetensors").read_bytes()
    assert {"checkpoints/step-4/.complete", "checkpoints/step-4/model.safetensors"} <= set(pretrain)
    # the trainer read the shards through its cache, not from a copy of the run
    cached = list((tmp_path / "trainer" / "shards").rglob("*.arrow"))
    assert cached and not (tmp_path / "trainer" / "work" / scheme / bucket.split("://")[1] / "runs/one/shards/train").exists()

    evaluator = machine(tmp_path, "evaluator", server)
    task = _task_file(tmp_path)
    ev = bf("evaluate", url, "--run-dir", url, "--task-file", str(task), "--task-type", "classification",
            *sets(EVALUATE), env=evaluator, cwd=tmp_path)
    assert "reviews accuracy · pretrained" in ev.stdout
    results = json.loads(remote_files(server, f"{url}/eval")["results.json"])
    assert "reviews" in results["tasks"]
    report = bf("report", url, env=machine(tmp_path, "reader", server), cwd=tmp_path).stdout
    assert "reviews" in report and "one" in report, report

    # the other commands that take a location: inspect the shards, export the model to transformers' layout in the
    # bucket, import it back from there
    another = machine(tmp_path, "tools", server)
    shown = bf("inspect", url, env=another, cwd=tmp_path).stdout
    assert shown.startswith("shards: ") and "tokenizer: " in shown and "\ntrain[0]  doc " in shown, shown
    bf("export", url, "--to", "hf", f"{url}/hf", env=another, cwd=tmp_path)
    exported = remote_files(server, f"{url}/hf")
    assert {"config.json", "model.safetensors", "tokenizer.json", ".complete"} <= set(exported)
    refused = bf("export", url, "--to", "hf", f"{url}/hf", env=another, cwd=tmp_path, ok=False)
    assert refused.returncode == 2 and "is not empty" in refused.stderr
    bf("import-hf", f"{url}/hf", f"{url}/imported", env=machine(tmp_path, "tools2", server), cwd=tmp_path)
    assert "model.safetensors" in remote_files(server, f"{url}/imported")

    # a rerun from yet another machine finds every stage done, from the bucket alone
    again = bf("pretrain", "local", "--run-dir", url, "--no-prefect", *sets(TRAIN),
               env=machine(tmp_path, "another", server), cwd=tmp_path)
    assert "pretrain    up-to-date" in again.stdout
    no_url_folder(tmp_path)


# -- several nodes train from the bucket --------------------------------------------------------------------------

@pytest.mark.slow
def test_torchrun_on_two_nodes_trains_from_s3_with_a_cache_smaller_than_the_shards(tmp_path, s3, local_run):
    bucket = s3.make_bucket("ddp")
    url = f"{bucket}/run"
    # the shards go up once, from the reference run (as a preprocessing job elsewhere would have left them)
    _upload_tree(s3, local_run, url, ("shards", "tokenizer"))
    sizes = [len(b) for n, b in local_files(local_run / "shards").items() if n.endswith(".arrow") and "train/" in n]
    assert len(sizes) >= 2
    limit = max(sizes) + 1  # room for one shard: the second evicts the first
    port = free_port()
    nodes = []
    for rank in (0, 1):
        env = machine(tmp_path, f"node{rank}", s3, BERTFACTORY_SHARD_CACHE_LIMIT=str(limit))
        launcher = [TORCHRUN, "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(rank),
                    "--master_addr", "127.0.0.1", "--master_port", str(port)]
        nodes.append(subprocess.Popen([*launcher, CLI, "pretrain", "local", "--run-dir", url, "--no-prefect",
                                       *sets(TRAIN)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [node.communicate(timeout=600) for node in nodes]
    for node, (out, err) in zip(nodes, outs):
        assert node.returncode == 0, err[-5000:]
    for rank in (0, 1):
        cache = tmp_path / f"node{rank}" / "shards"
        held = sum(p.stat().st_size for p in cache.rglob("*.arrow"))
        assert 0 < held <= limit, (rank, held, limit)
    evictions = [int(n) for _, err in outs for n in re.findall(r"(\d+) evictions", err)]
    assert evictions and all(n > 0 for n in evictions), ("the cache limit made every node evict", evictions)
    pretrain = remote_files(s3, f"{url}/pretrain")
    summary = json.loads(pretrain["summary.json"])
    assert summary["world_size"] == 2 and summary["steps"] == 8
    # the same job on local disk, 2 processes on one machine: bit for bit what the two nodes made from the bucket
    ddp = tmp_path / "ddp-local"
    for part in ("shards", "tokenizer"):
        shutil.copytree(local_run / part, ddp / part)
    bf("pretrain", "local", "--run-dir", str(ddp), "--no-prefect", *sets(TRAIN), env=machine(tmp_path, "one-node"),
       cwd=tmp_path, launcher=[TORCHRUN, "--nproc_per_node", "2", "--master_port", str(free_port())])
    assert pretrain["final/model.safetensors"] == (ddp / "pretrain/final/model.safetensors").read_bytes()
    assert losses(pretrain["metrics.jsonl"]) == losses((ddp / "pretrain/metrics.jsonl").read_text())
    # and 2 ranks x half the batch follow 1 process with the whole batch (the data-parallel contract), up to the
    # float reduction order
    one = [json.loads(x) for x in (local_run / "pretrain/metrics.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in pretrain["metrics.jsonl"].decode().splitlines()]
    assert [(m["step"], m["tokens"]) for m in two] == [(m["step"], m["tokens"]) for m in one]
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), (a["step"], a["loss"], b["loss"])


def _upload_tree(server, local_run: Path, url: str, parts: tuple[str, ...]) -> None:
    saved = dict(os.environ)
    os.environ.update(server.env)
    try:
        from bertfactory import storage

        for part in parts:
            for path in sorted((local_run / part).rglob("*")):
                if path.is_file():
                    storage.upload_file(path, storage.join(url, path.relative_to(local_run).as_posix()))
    finally:
        os.environ.clear()
        os.environ.update(saved)


# -- crashes and a storage outage ---------------------------------------------------------------------------------

def _remote_names(server, url: str) -> set[str]:
    """The object names only (a running job may delete one between a listing and a read)."""
    saved = dict(os.environ)
    os.environ.update(server.env)
    try:
        from bertfactory import storage

        return set(storage.list_files(url))
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.slow
def test_sigkill_three_times_with_checkpoints_on_s3_resumes_to_the_same_weights(tmp_path, s3, local_run):
    bucket = s3.make_bucket("kills")
    url = f"{bucket}/run"
    _upload_tree(s3, local_run, url, ("shards", "tokenizer"))
    train = [o for o in TRAIN if not o.startswith(("pretrain.max_steps", "pretrain.save_every"))] + [
        "pretrain.max_steps=60", "pretrain.save_every=4"]
    # the reference: the same training uninterrupted, on local disk
    reference = tmp_path / "reference"
    for part in ("shards", "tokenizer"):
        shutil.copytree(local_run / part, reference / part)
    bf("pretrain", "local", "--run-dir", str(reference), "--no-prefect", *sets(train),
       env=machine(tmp_path, "steady"), cwd=tmp_path)
    # a killed holder's lease lives until it expires (docs/cluster.md): short here, so the new machine can go on
    env = machine(tmp_path, "crashy", s3, BERTFACTORY_LEASE_TTL="2")
    rng = random.Random(30)
    killed = 0
    seen_complete: set[str] = set()
    while killed < 3:
        proc = subprocess.Popen([CLI, "pretrain", "local", "--run-dir", url, "--no-prefect", *sets(train)],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            complete = {n for n in _remote_names(s3, f"{url}/pretrain") if n.endswith("/.complete")}
            if complete - seen_complete:  # a new checkpoint is published: kill at a random moment after it
                seen_complete |= complete
                time.sleep(rng.uniform(0.0, 0.3))
                break
            time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed += 1
        else:
            break  # it finished before a third kill: the checkpoints are too few to kill three times
        if killed == 3:  # the last crash takes the machine with it: resume on a new one, from the bucket alone
            shutil.rmtree(tmp_path / "crashy")
    assert killed == 3, "every run was killed mid-training"
    # the last holder's lease expires: waited for from the lease's own `expires`, however long getting here took
    lease = remote_files(s3, f"{url}/.bertfactory").get("lease.json")
    if lease is not None:
        time.sleep(max(0.0, json.loads(lease)["expires"] - time.time()) + 0.1)
    bf("pretrain", "local", "--run-dir", url, "--no-prefect", *sets(train), env=env, cwd=tmp_path)
    pretrain = remote_files(s3, f"{url}/pretrain")
    assert pretrain["final/model.safetensors"] == (reference / "pretrain/final/model.safetensors").read_bytes()
    assert losses(pretrain["metrics.jsonl"]) == losses((reference / "pretrain/metrics.jsonl").read_text())


# The process dies at the one unlucky moment the random kills above only sometimes hit: checkpoint step-8 is
# complete in the working copy, but neither it nor the metrics through step 8 went up. The run location's newest
# checkpoint is step-4 and its metrics.jsonl ends at step 4.
DIE_BEFORE_UPLOADING_STEP_8 = """
import os, sys
import bertfactory
import training.checkpoint as checkpoint
from flows.cli import main

upload = checkpoint.publish_checkpoint
def die_at_step_8(directory, pruned=(), also=()):
    if os.path.basename(str(directory)) == "step-8":
        os._exit(137)
    return upload(directory, pruned, also=also)
checkpoint.publish_checkpoint = die_at_step_8
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_checkpoint_that_never_reached_the_bucket_is_not_resumed_from(tmp_path, s3, local_run):
    bucket = s3.make_bucket("unlucky")
    url = f"{bucket}/run"
    _upload_tree(s3, local_run, url, ("shards", "tokenizer"))
    train = [o for o in TRAIN if not o.startswith("pretrain.max_steps")] + ["pretrain.max_steps=12"]
    reference = tmp_path / "reference"  # the same training uninterrupted, on local disk
    for part in ("shards", "tokenizer"):
        shutil.copytree(local_run / part, reference / part)
    bf("pretrain", "local", "--run-dir", str(reference), "--no-prefect", *sets(train),
       env=machine(tmp_path, "steady"), cwd=tmp_path)
    env = machine(tmp_path, "m", s3, BERTFACTORY_LEASE_TTL="2")
    died = subprocess.run([sys.executable, "-c", DIE_BEFORE_UPLOADING_STEP_8, "pretrain", "local", "--run-dir", url,
                           "--no-prefect", *sets(train)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert died.returncode == 137, died.stderr[-3000:]
    work = tmp_path / "m" / "work" / "s3" / "unlucky" / "run" / "pretrain"
    assert (work / "checkpoints/step-8/config.json").is_file()  # complete here ...
    names = _remote_names(s3, f"{url}/pretrain")
    assert "checkpoints/step-4/.complete" in names and "checkpoints/step-8/.complete" not in names  # ... not there
    assert [s for s, _ in losses(remote_files(s3, f"{url}/pretrain")["metrics.jsonl"])] == [1, 2, 3, 4]
    lease = remote_files(s3, f"{url}/.bertfactory").get("lease.json")
    if lease is not None:
        time.sleep(max(0.0, json.loads(lease)["expires"] - time.time()) + 0.1)
    # the same machine resumes: from the bucket's step-4, so the metrics of steps 5-8 are logged again
    resumed = bf("pretrain", "local", "--run-dir", url, "--no-prefect", *sets(train), env=env, cwd=tmp_path)
    assert "step-8 never reached" in resumed.stderr, resumed.stderr[-3000:]
    pretrain = remote_files(s3, f"{url}/pretrain")
    assert pretrain["final/model.safetensors"] == (reference / "pretrain/final/model.safetensors").read_bytes()
    assert losses(pretrain["metrics.jsonl"]) == losses((reference / "pretrain/metrics.jsonl").read_text())


@pytest.mark.slow
def test_storage_cut_mid_job_commits_nothing_and_the_rerun_completes(tmp_path, s3, corpus, local_run):
    bucket = s3.make_bucket("outage")
    url = f"{bucket}/run"
    proxy = TcpProxy(s3.port)
    try:
        env = machine(tmp_path, "m", s3, AWS_ENDPOINT_URL=proxy.endpoint, AWS_MAX_ATTEMPTS="2")
        args = ["preprocess", "--input", *map(str, corpus), "--format", "text", "--out", url, "--no-prefect",
                *sets(SMALL)]
        proc = subprocess.Popen([CLI, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        staging = tmp_path / "m" / "work" / "s3" / "outage" / "run" / ".preprocess-staging"
        deadline = time.monotonic() + 300  # a bound for a hang: waits for the job to pass its checks
        while not staging.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        proxy.cut()  # the job has passed its checks and is working: the server goes away
        out, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and lines[-1].startswith(f"error: {url}/"), err[-3000:]
        assert "failed" in lines[-1] and "Traceback" not in err, err[-4000:]
        committed = _remote_names(s3, url)
        assert not {"shards/manifest.json", ".bertfactory/preprocess.json"} & committed, committed
        proxy.restore()
        bf(*args, env=env, cwd=tmp_path)
        shards = remote_files(s3, f"{url}/shards")
        expected = local_files(local_run / "shards")
        assert {n: b for n, b in shards.items() if n != "stats.json"} == \
            {n: b for n, b in expected.items() if n != "stats.json"}

        # mid-checkpoint: cut once the first checkpoint is published; the next one fails to go up
        train = [o for o in TRAIN if not o.startswith("pretrain.save_every")] + ["pretrain.save_every=2"]
        proc = subprocess.Popen([CLI, "pretrain", "local", "--run-dir", url, "--no-prefect", *sets(train)],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if any(n.endswith("/.complete") for n in _remote_names(s3, f"{url}/pretrain")):
                break
            time.sleep(0.1)
        proxy.cut()
        out, err = proc.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and lines[-1].startswith(f"error: {url}/pretrain/"), err[-3000:]
        names = _remote_names(s3, f"{url}/pretrain")
        complete = {n.split("/")[1] for n in names if n.endswith("/.complete")}
        assert complete and "final/config.json" not in names, names
        assert ".bertfactory/pretrain.json" not in _remote_names(s3, url)
        proxy.restore()
        bf("pretrain", "local", "--run-dir", url, "--no-prefect", *sets(train), env=env, cwd=tmp_path)
        pretrain = remote_files(s3, f"{url}/pretrain")
        assert pretrain["final/model.safetensors"] == (local_run / "pretrain/final/model.safetensors").read_bytes()
    finally:
        proxy.close()


# -- corpus versions on a bucket ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_corpus_refresh_on_a_bucket_keeps_versions_and_lineage(tmp_path, s3, corpus):
    bucket = s3.make_bucket("refresh")
    url = f"{bucket}/news"
    drop = tmp_path / "drop"
    drop.mkdir()
    for path in corpus[:5]:
        shutil.copy(path, drop / path.name)
    # version 1 trains from scratch for max_steps, each later one continues for continue_steps
    train = [o for o in TRAIN if not o.startswith("pretrain.save_every")] + [
        "refresh.continue_steps=4", "pretrain.save_every=2"]
    refresh = ["refresh", "local", "--run-dir", url, "--source", str(drop), "--no-prefect", "--continue-pretraining",
               "--set", "corpus.format=text", *sets(SMALL), *sets(train)]
    bf(*refresh, env=machine(tmp_path, "a", s3), cwd=tmp_path)
    for path in corpus[5:]:
        shutil.copy(path, drop / path.name)
    second = bf(*refresh, env=machine(tmp_path, "b", s3), cwd=tmp_path)  # another machine: the lineage from the bucket
    assert "corpus version 2" in second.stdout and "5 new input file(s)" in second.stdout, second.stdout
    names = _remote_names(s3, f"{url}/corpora")
    assert {"versions.json", "v1/manifest.json", "v2/manifest.json", "tokenizer/tokenizer.json"} <= names
    ledger = json.loads(remote_files(s3, f"{url}/corpora")["versions.json"])
    assert [v["version"] for v in ledger["versions"]] == [1, 2]
    v2 = json.loads(remote_files(s3, f"{url}/corpora/v2")["manifest.json"])
    assert v2["parent"]["manifest_sha256"] == ledger["versions"][0]["manifest_sha256"]
    # continued pretraining on each version, the second on machine b from the first's model in the bucket
    continued = _remote_names(s3, f"{url}/continued")
    assert {"v1/pretrain/final/model.safetensors", "v2/pretrain/final/model.safetensors",
            "v2/.bertfactory/pretrain.json"} <= continued, sorted(continued)
    started_from = json.loads(remote_files(s3, f"{url}/continued/v2/pretrain/final")["config.json"])
    assert "continued/v1/pretrain/final" in json.dumps(started_from), "v2 continued from v1's model"
    third = bf(*refresh, env=machine(tmp_path, "c", s3), cwd=tmp_path)
    assert "nothing new" in third.stdout, third.stdout


# -- recipe values that name a location -----------------------------------------------------------------------------

@pytest.mark.slow
def test_recipe_paths_may_be_urls(tmp_path, s3, corpus, local_run):
    """pretrain.init_from, preprocess.tokenizer.path (--tokenizer) and corpus.parent (--parent) by URL: pulled into
    working copies (the parent's shards verified through the shard cache), the same outputs as by path."""
    bucket = s3.make_bucket("recipe-urls")
    ref = f"{bucket}/ref"
    _upload_tree(s3, local_run, ref, ("shards", "tokenizer", "pretrain"))
    env = machine(tmp_path, "m", s3)
    # a tokenizer given by URL: the shards' tokenizer is that one
    bf("preprocess", "--input", *map(str, corpus[:3]), "--format", "text", "--out", str(tmp_path / "tok"),
       "--tokenizer", f"{ref}/tokenizer/tokenizer.json", "--no-prefect", *sets(SMALL), env=env, cwd=tmp_path)
    manifest = json.loads((tmp_path / "tok/shards/manifest.json").read_text())
    reference = json.loads((local_run / "shards/manifest.json").read_text())
    assert manifest["tokenizer"]["sha256"] == reference["tokenizer"]["sha256"]
    # the next corpus version of a parent in the bucket: only the new file is read, the lineage points at it
    extra = [str(p) for p in sorted(Path(sample_path("sotu")).rglob("*.txt"))[10:14]]
    bf("preprocess", "--input", *map(str, corpus), *extra, "--format", "text", "--out", str(tmp_path / "v2"),
       "--parent", f"{ref}/shards", "--no-prefect", *sets(SMALL), env=env, cwd=tmp_path)
    v2 = json.loads((tmp_path / "v2/shards/manifest.json").read_text())
    import hashlib

    assert v2["parent"]["manifest_sha256"] == hashlib.sha256((local_run / "shards/manifest.json").read_bytes()).hexdigest()
    assert v2["corpus_version"] == reference.get("corpus_version", 1) + 1
    # training that starts from a model in the bucket
    run = tmp_path / "init"
    for part in ("shards", "tokenizer"):
        shutil.copytree(local_run / part, run / part)
    train = [o for o in TRAIN if not o.startswith("pretrain.max_steps")] + [
        "pretrain.max_steps=2", f"pretrain.init_from={ref}/pretrain/final"]
    bf("pretrain", "local", "--run-dir", str(run), "--no-prefect", *sets(train), env=env, cwd=tmp_path)
    first = json.loads((run / "pretrain/metrics.jsonl").read_text().splitlines()[0])
    scratch = json.loads((local_run / "pretrain/metrics.jsonl").read_text().splitlines()[0])
    assert first["loss"] < scratch["loss"], "it started from the trained model, not from scratch"
    no_url_folder(tmp_path)


# -- general distillation shared through a bucket -----------------------------------------------------------------

DISTILL = ["finetune.epochs=1", "finetune.num_seeds=1", "finetune.batch_size=16", "finetune.max_seq_len=24",
           "finetune.max_train_examples=32", "finetune.max_eval_examples=16", "finetune.learning_rate=1e-3",
           "speed_repeats=1", "num_threads=1", "distilbert.enabled=false", "pkd.enabled=false",
           "tinybert.hidden_size=8", "tinybert.num_layers=1", "tinybert.intermediate_size=16",
           "tinybert.general_steps=3", "tinybert.general_batch_size=4", "tinybert.intermediate_epochs=1",
           "tinybert.prediction_epochs=1", "tinybert.ablations=false", "tinybert.augment.enabled=false",
           "general_seed=7"]


@pytest.mark.slow
def test_general_students_are_shared_through_the_bucket_by_machines_that_share_no_disk(tmp_path, s3, local_run):
    """The run on S3: machine a distils seed 1 and pushes its general student to RUN/cache/distill-general and its
    fine-tuned teacher to RUN/cache/distill-teacher in the bucket (markers last); machine b, a fresh working copy,
    distils seed 1 with other task-distillation settings through the Prefect flow and starts from both entries;
    machine c, a local run directory, reaches the general student by its URL (`general_cache`) for seed 3."""
    bucket = s3.make_bucket("general")
    url = f"{bucket}/run"
    _upload_tree(s3, local_run, url, ("shards", "tokenizer", "pretrain"))
    first = bf("distill", "distill-local", "--run-dir", url, *sets([*DISTILL, "seed=1"]),
               env=machine(tmp_path, "a", s3), cwd=tmp_path)
    assert "general distillation: shared as" in first.stderr, first.stderr[-3000:]
    names = _remote_names(s3, f"{url}/cache/distill-general")
    (entry,) = {n.split("/")[0] for n in names}
    assert entry.startswith("tinybert-") and {f"{entry}/{f}" for f in ("state.pt", "key.json", "metrics.jsonl",
                                                                        ".complete")} <= names, names
    results = json.loads(remote_files(s3, f"{url}/distill")["results.json"])
    made = results["methods"]["tinybert"]
    assert made["general_distillation"]["reused"] is False
    assert made["general_distillation"]["cache"] == f"{url}/cache/distill-general/{entry}"
    teacher = results["teacher_fine_tuning"]
    assert teacher["reused"] is False and teacher["cache"].startswith(f"{url}/cache/distill-teacher/teacher-")
    assert f"{teacher['cache'].rsplit('/', 1)[1]}/.complete" in _remote_names(s3, f"{url}/cache/distill-teacher")

    second = bf("distill", "distill-local", "--run-dir", url, "--prefect",
                *sets([*DISTILL, "seed=1", "tinybert.prediction_epochs=2"]), env=machine(tmp_path, "b", s3),
                cwd=tmp_path)
    log = second.stderr + second.stdout
    assert "general distillation: pulled" in log and "teacher fine-tuning: pulled" in log, log[-3000:]
    results = json.loads(remote_files(s3, f"{url}/distill")["results.json"])
    reused = results["methods"]["tinybert"]
    assert reused["general_distillation"]["reused"] is True and results["teacher_fine_tuning"]["reused"] is True
    assert reused["general_distillation"]["cache"] == made["general_distillation"]["cache"]
    assert reused["general_distillation"]["final_loss"] == made["general_distillation"]["final_loss"]
    assert reused["teacher"]["score"] == made["teacher"]["score"]

    local = tmp_path / "local-run"
    for part in ("shards", "tokenizer", "pretrain"):
        shutil.copytree(local_run / part, local / part)
    bf("distill", "distill-local", "--run-dir", str(local),
       *sets([*DISTILL, "seed=3", f"general_cache={url}/cache/distill-general"]), env=machine(tmp_path, "c", s3),
       cwd=tmp_path)
    third = json.loads((local / "distill/results.json").read_text())["methods"]["tinybert"]["general_distillation"]
    assert third["reused"] is True and third["cache"] == made["general_distillation"]["cache"]
    assert not (local / "cache" / "distill-general").exists(), "pulled into the URL's working copy, not the run"
    no_url_folder(tmp_path)
