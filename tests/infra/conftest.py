"""Shared paths of the infra/ tests, and a real Prefect server started the way the images start it
(`infra/docker/entrypoint.sh server`), for the tests that need one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
ENTRYPOINT = INFRA / "docker" / "entrypoint.sh"
TIMEOUT_S = 180  # generous for a busy 2-core machine; a healthy start takes ~15 s


@pytest.fixture
def repo() -> Path:
    return REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(home: Path) -> dict:
    """This environment's Python first on PATH, no PREFECT_* of the test session, a fresh PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", PREFECT_HOME=str(home),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    return env


def start(args: list[str], env: dict, log: Path, cwd: Path = REPO) -> subprocess.Popen:
    """A command in its own process group (so that stop() ends all of it), output to `log`."""
    with log.open("w") as out:
        return subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_healthy(command: list[str], proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
        if subprocess.run(command, capture_output=True, timeout=30).returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"not healthy after {TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL what is left of it."""
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


def health_command(url: str) -> list[str]:
    return [sys.executable, "-c", f"import urllib.request; urllib.request.urlopen({url!r}, timeout=4)"]


@pytest.fixture(scope="session")
def entrypoint_server(tmp_path_factory):
    """`entrypoint.sh server` on a free port (SQLite in its PREFECT_HOME): (api url, env pointing at it, log)."""
    home = tmp_path_factory.mktemp("prefect-server")
    port, log = free_port(), home / "server.log"
    env = base_env(home / "home")
    proc = start(["bash", str(ENTRYPOINT), "server"],
                 {**env, "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_PORT": str(port)}, log)
    try:
        api = f"http://127.0.0.1:{port}/api"
        wait_healthy(health_command(f"{api}/health"), proc, log)
        yield api, {**env, "PREFECT_API_URL": api}, log
    finally:
        stop(proc)
