"""The images' entrypoint (infra/docker/entrypoint.sh) starting the real services the compose file runs, without
Docker: `server` gives a Prefect server whose compose healthcheck command passes, and `worker` a process worker on
the given pool (created as a process pool) whose compose healthcheck passes too. SQLite here; the same server on
PostgreSQL is tested in tests/flows/server/test_postgres.py."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
import yaml

from .conftest import ENTRYPOINT, INFRA, TIMEOUT_S, free_port, start, stop, wait_healthy

COMPOSE = yaml.safe_load((INFRA / "compose" / "compose.yaml").read_text(encoding="utf-8"))

pytestmark = pytest.mark.slow


def _healthcheck(service: str, port: int, compose_port: int) -> list[str]:
    """The compose service's healthcheck command, aimed at this test's port, run with this environment's Python."""
    kind, *command = COMPOSE["services"][service]["healthcheck"]["test"]
    assert kind == "CMD" and command[0] == "python"
    return [sys.executable, *(arg.replace(f":{compose_port}/", f":{port}/") for arg in command[1:])]


def test_server_and_worker_from_the_entrypoint(entrypoint_server, tmp_path):
    api, env, _ = entrypoint_server
    server_port = int(api.split(":")[-1].split("/")[0])
    assert subprocess.run(_healthcheck("prefect-server", server_port, 4200), timeout=60).returncode == 0

    worker_port, log = free_port(), tmp_path / "worker.log"
    worker_env = {**env, **COMPOSE["services"]["worker"]["environment"], "PREFECT_API_URL": api,
                  "PREFECT_WORK_POOL": "infra-test-process", "PREFECT_WORKER_WEBSERVER_PORT": str(worker_port)}
    worker = start(["bash", str(ENTRYPOINT), *COMPOSE["services"]["worker"]["command"]], worker_env, log)
    try:
        wait_healthy(_healthcheck("worker", worker_port, 8080), worker, log)
        # the worker serves /health first, then creates its pool and registers
        deadline = time.monotonic() + TIMEOUT_S
        while (pool := httpx.get(f"{api}/work_pools/infra-test-process", timeout=30)).status_code == 404:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        assert pool.status_code == 200 and pool.json()["type"] == "process", pool.text
        workers = httpx.post(f"{api}/work_pools/infra-test-process/workers/filter", json={}, timeout=30).json()
        assert len(workers) == 1 and workers[0]["status"] == "ONLINE"
    finally:
        stop(worker)
