"""The images' entrypoint (infra/docker/entrypoint.sh) starting the real services the compose file runs, without
Docker: `server` gives a Prefect server whose compose healthcheck command passes, and `worker` a process worker on
the given pool (created as a process pool) whose compose healthcheck passes too. SQLite here; the same server on
PostgreSQL is tested in tests/flows/server/test_postgres.py. About 30 s on 2 cores."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from .conftest import INFRA

ENTRYPOINT = INFRA / "docker" / "entrypoint.sh"
COMPOSE = yaml.safe_load((INFRA / "compose" / "compose.yaml").read_text(encoding="utf-8"))
TIMEOUT_S = 180  # generous for a busy 2-core machine; a healthy start takes ~15 s

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthcheck(service: str, port: int, compose_port: int) -> list[str]:
    """The compose service's healthcheck command, aimed at this test's port, run with this environment's Python."""
    kind, *command = COMPOSE["services"][service]["healthcheck"]["test"]
    assert kind == "CMD" and command[0] == "python"
    return [sys.executable, *(arg.replace(f":{compose_port}/", f":{port}/") for arg in command[1:])]


def _wait_healthy(command: list[str], proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        if subprocess.run(command, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"not healthy after {TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def _start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(["bash", str(ENTRYPOINT), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGTERM:
                os.killpg(proc.pid, signal.SIGKILL)  # what the leader left behind in its group
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    proc.wait(timeout=10)


def test_server_and_worker_from_the_entrypoint(tmp_path):
    server_port, worker_port = _port(), _port()
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", PREFECT_HOME=str(tmp_path / "home"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    procs = []
    try:
        server = _start(["server"], {**env, "PREFECT_SERVER_PORT": str(server_port)}, tmp_path / "server.log")
        procs.append(server)
        _wait_healthy(_healthcheck("prefect-server", server_port, 4200), server, tmp_path / "server.log")

        api = f"http://127.0.0.1:{server_port}/api"
        worker_env = {**env, **COMPOSE["services"]["worker"]["environment"], "PREFECT_API_URL": api,
                      "PREFECT_WORK_POOL": "infra-test-process", "PREFECT_WORKER_WEBSERVER_PORT": str(worker_port)}
        worker = _start(COMPOSE["services"]["worker"]["command"], worker_env, tmp_path / "worker.log")
        procs.append(worker)
        _wait_healthy(_healthcheck("worker", worker_port, 8080), worker, tmp_path / "worker.log")

        # the worker serves /health first, then creates its pool and registers
        deadline = time.monotonic() + TIMEOUT_S
        while (pool := httpx.get(f"{api}/work_pools/infra-test-process", timeout=30)).status_code == 404:
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(1)
        assert pool.status_code == 200 and pool.json()["type"] == "process", pool.text
        workers = httpx.post(f"{api}/work_pools/infra-test-process/workers/filter", json={}, timeout=30).json()
        assert len(workers) == 1 and workers[0]["status"] == "ONLINE"
    finally:
        for proc in reversed(procs):
            _stop(proc)
