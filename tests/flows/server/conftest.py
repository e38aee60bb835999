"""A real Prefect server for the deployment tests: `prefect server start` on 127.0.0.1 at a free port with its own
PREFECT_HOME (SQLite there, or a PostgreSQL cluster this file starts), waited for with a timeout and stopped with
its whole process group. Everything talks to it as a user would: the `prefect` and `bertfactory` commands in their
own processes, and the REST API for reading back flow runs.

PostgreSQL (Debian's postgresql package) missing: its test is skipped on a developer machine (`apt-get install
postgresql` to run it) and fails in CI (CI=true or BERTFACTORY_REQUIRE_POSTGRES=1; .ci/run installs it).

    .venv/bin/python -m pytest -q tests/flows/server
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
STARTUP_TIMEOUT_S = 180  # a cold start on a busy 2-core machine takes ~20 s; generous, never hit when healthy

# The tiny recipe made very fast: a few real State of the Union addresses as a text corpus, a one-layer model,
# a few steps, one fine-tuning task on a subset (tests/flows/test_pipeline.py runs the full tiny settings).
FAST = [
    "corpus.format=text",
    "preprocess.heldout_fraction=0.25", "preprocess.runner.preset=in_process",
    "preprocess.tokenizer.vocab_size=1000", "preprocess.instances.dupe_factor=1", "preprocess.masking.variants=1",
    "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
    "pretrain.max_steps=4", "pretrain.batch_size=8", "pretrain.warmup_steps=1", "pretrain.log_every=2",
    "pretrain.save_every=4",
    "evaluate.intrinsic.max_batches=1", "evaluate.tasks={movie_sentiment: {}}", "evaluate.feature_based.enabled=false",
    "evaluate.finetune.num_seeds=1", "evaluate.finetune.max_train_examples=50",
    "evaluate.finetune.max_eval_examples=50", "evaluate.finetune.epochs=1", "evaluate.finetune.max_seq_len=32",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM the process group (the server's uvicorn and service subprocesses too), SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group even when the leader exited
    proc.wait(timeout=10)


class PrefectServer:
    """One running `prefect server start` and the environment that points the commands at it."""

    def __init__(self, home: Path, port: int, database_url: str | None = None):
        self.home = home
        self.port = port
        self.api_url = f"http://127.0.0.1:{port}/api"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env.update({
            "PREFECT_HOME": str(home),
            "PREFECT_API_URL": self.api_url,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "PREFECT_LOGGING_EXTRA_LOGGERS": "preprocessing,training,evaluation,distillation,bertfactory,flows",
            # the scheduler fills upcoming runs of scheduled deployments every few seconds instead of every 60
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        })
        if database_url:
            self.env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
        self.log = home / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.home, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"prefect server not healthy after {STARTUP_TIMEOUT_S} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""

    # ---------------------------------------------------------------------------------------- as a user

    def run(self, *cmd: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """A command of this environment (`prefect ...`, `bertfactory ...`) in the repository root."""
        proc = subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=REPO, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n"
                                 f"{proc.stderr[-4000:]}\n--- server log ---\n{self.log_tail()}")
        return proc

    def trigger(self, deployment: str, **params) -> str:
        """`prefect deployment run DEPLOYMENT --param k=v ...` (values JSON, as users type them); the run's id."""
        import json

        args = [a for k, v in params.items() for a in ("--param", f"{k}={json.dumps(v)}")]
        out = self.run("prefect", "deployment", "run", deployment, *args).stdout
        match = re.search(r"UUID: ([0-9a-f-]{36})", out)
        assert match, out
        return match.group(1)

    def work_once(self, pool: str = "bertfactory-process", timeout: float = 600) -> str:
        """`prefect worker start --pool POOL --run-once`: executes the runs due now and returns its output."""
        proc = self.run("prefect", "worker", "start", "--pool", pool, "--run-once", timeout=timeout, check=False)
        assert proc.returncode == 0, f"worker exited {proc.returncode}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
        return proc.stdout + proc.stderr

    def api(self, method: str, path: str, **kwargs):
        response = httpx.request(method, f"{self.api_url}{path}", timeout=30, **kwargs)
        response.raise_for_status()
        return response.json()

    def flow_run(self, flow_run_id: str) -> dict:
        return self.api("GET", f"/flow_runs/{flow_run_id}")

    def deployment(self, name: str) -> dict:
        return self.api("GET", f"/deployments/name/{name}")


@contextlib.contextmanager
def prefect_server(home: Path, database_url: str | None = None):
    home.mkdir(parents=True, exist_ok=True)
    server = PrefectServer(home, free_port(), database_url)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class PostgresCluster:
    """A throwaway PostgreSQL cluster: initdb + pg_ctl from Debian's /usr/lib/postgresql/*/bin in a temporary
    directory, on a free port of 127.0.0.1 with trust auth for the one role `prefect` (run as the `postgres` user
    when we are root: the server refuses to run as root)."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="bertfactory-pg-"))
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql+asyncpg://prefect@127.0.0.1:{self.port}/prefect"

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        proc = subprocess.run([*self.as_user, str(self.bindir / tool), *args], capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)
        assert proc.returncode == 0, f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def start(self) -> None:
        data = self.root / "data"
        self._run("initdb", "-D", str(data), "-U", "prefect", "--auth=trust", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", str(data), "-l", str(self.root / "postgres.log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off", "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "prefect", "prefect")

    def sql(self, query: str) -> str:
        return self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "prefect", "-d", "prefect",
                         "-tAc", query).strip()

    def stop(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "-t", "30", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def postgres_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres():
    bindir = postgres_bindir()
    if bindir is None:
        message = ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                   "`apt-get update && apt-get install -y postgresql`")
        if os.environ.get("CI") == "true" or os.environ.get("BERTFACTORY_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (required in CI)")
        pytest.skip(message)
    cluster = PostgresCluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_server(postgres, tmp_path_factory):
    """A Prefect server whose database is the PostgreSQL cluster, with the process pool and its two deployments
    (the Kubernetes pools and deployments are the same rows whatever the database; SQLite covers them)."""
    with prefect_server(tmp_path_factory.mktemp("prefect-postgres"), postgres.url) as server:
        server.deploy_output = server.run("bertfactory", "deploy", "--pool-setup", "--name", "pipeline-local",
                                          "--name", "corpus-refresh-weekly").stdout
        yield server


@pytest.fixture(scope="session")
def sqlite_server(tmp_path_factory):
    """A server on SQLite with the work pools and every deployment of prefect.yaml, created by
    `bertfactory deploy --pool-setup` (pool types + infra/prefect base job templates, then `prefect deploy --all`)."""
    with prefect_server(tmp_path_factory.mktemp("prefect-sqlite")) as server:
        server.deploy_output = server.run("bertfactory", "deploy", "--pool-setup").stdout
        yield server


@pytest.fixture(scope="session")
def fast_overrides() -> list[str]:
    return list(FAST)


@pytest.fixture(scope="session")
def sotu_files() -> list[Path]:
    from bertfactory.samples import sample_path

    files = sorted(Path(sample_path("sotu")).rglob("*.txt"))
    assert len(files) > 10, "the sotu sample is incomplete; run `bertfactory samples fetch sotu`"
    return files


def sotu_dir(path: Path, files: list[Path]) -> Path:
    """A text corpus: 4 real State of the Union addresses, one document per file."""
    path.mkdir(parents=True)
    for f in files[200:204]:
        shutil.copy(f, path / f.name)
    return path


@pytest.fixture
def sotu_corpus(tmp_path, sotu_files):
    """The 4-address corpus directory and the other addresses of the sample, to add from."""
    return sotu_dir(tmp_path / "corpus", sotu_files), sotu_files[204:]


@pytest.fixture(scope="session")
def pipeline_runs(sqlite_server, sotu_files, tmp_path_factory):
    """Two `pipeline/pipeline-local` runs triggered with `prefect deployment run` and executed by one
    `prefect worker start --run-once` pass: `good` on the fast tiny recipe, `bad` with an invalid override."""
    import json

    root = tmp_path_factory.mktemp("pipeline-runs")
    corpus = sotu_dir(root / "corpus", sotu_files)
    # a quoted list: `prefect deployment run` prints the parameters through rich, which reads `[/path]` as markup
    overrides = [*FAST, f"corpus.inputs={json.dumps([str(corpus)])}"]
    good = sqlite_server.trigger("pipeline/pipeline-local", run_dir=str(root / "run"), overrides=overrides)
    bad = sqlite_server.trigger("pipeline/pipeline-local", run_dir=str(root / "bad"),
                                overrides=["pretrain.max_steps=-3"])
    output = sqlite_server.work_once()
    return {"good": good, "bad": bad, "run_dir": root / "run", "bad_dir": root / "bad", "overrides": overrides,
            "worker_output": output}
