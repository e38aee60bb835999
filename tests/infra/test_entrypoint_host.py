"""The images' entrypoint (infra/docker/entrypoint.sh) resolves where `server` listens (issue 23 item 9): loopback
inside the container unless the deployment opts in with PREFECT_SERVER_API_HOST (the compose file does), and a
warning when it is exposed without Prefect's basic auth. `prefect` is a stub on PATH that prints its arguments."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from .conftest import ENTRYPOINT, INFRA

COMPOSE = yaml.safe_load((INFRA / "compose" / "compose.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def run_entrypoint(tmp_path):
    stub = tmp_path / "bin" / "prefect"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "prefect $*"\n')
    stub.chmod(0o755)

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        base["PATH"] = f"{stub.parent}:{base.get('PATH', '/usr/bin:/bin')}"
        return subprocess.run(["bash", str(ENTRYPOINT), *args], env={**base, **env}, capture_output=True, text=True,
                              timeout=30)

    return run


def test_server_listens_on_loopback_unless_told_otherwise(run_entrypoint):
    result = run_entrypoint("server")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "prefect server start --host 127.0.0.1 --port 4200"
    assert result.stderr == ""


def test_an_exposed_server_without_auth_is_warned_about(run_entrypoint):
    result = run_entrypoint("server", PREFECT_SERVER_API_HOST="0.0.0.0", PREFECT_SERVER_PORT="4300")
    assert result.stdout.strip() == "prefect server start --host 0.0.0.0 --port 4300"
    assert "without authentication" in result.stderr and "PREFECT_SERVER_API_AUTH_STRING" in result.stderr
    authed = run_entrypoint("server", PREFECT_SERVER_API_HOST="0.0.0.0", PREFECT_SERVER_API_AUTH_STRING="u:p")
    assert authed.stdout.strip() == "prefect server start --host 0.0.0.0 --port 4200" and authed.stderr == ""


def test_compose_opts_in_explicitly_and_publishes_on_loopback_only(run_entrypoint):
    server = COMPOSE["services"]["prefect-server"]
    assert server["environment"]["PREFECT_SERVER_API_HOST"] == "0.0.0.0"  # the worker container must reach it
    assert all(str(p).startswith("127.0.0.1:") for p in server["ports"])  # ... the host's other interfaces not
    result = run_entrypoint(*server["command"], PREFECT_SERVER_API_HOST=server["environment"]["PREFECT_SERVER_API_HOST"])
    assert "--host 0.0.0.0" in result.stdout


def test_other_commands_are_run_as_given(run_entrypoint):
    assert run_entrypoint("prefect", "version").stdout.strip() == "prefect version"
