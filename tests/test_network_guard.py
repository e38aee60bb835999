"""tests/conftest.py's guard: a test process reaches nothing but this machine. A connection to another address or
the lookup of another host's name is refused and recorded (the autouse fixture then fails the test), and an attempt
from a background thread names that thread, so a thread left behind by an earlier test is found, not blamed on the
test that happens to run when it wakes.

Run: `.venv/bin/python -m pytest -q tests/test_network_guard.py`.
"""

from __future__ import annotations

import socket
import sys
import threading

import pytest


def _recorded() -> list[str]:
    """The guard's list of refused attempts (tests/conftest.py, whatever name pytest imported it under)."""
    guard = next(m for name, m in list(sys.modules.items())
                 if name.split(".")[-1] == "conftest" and hasattr(m, "_outside_attempts"))
    return guard._outside_attempts


def _attempts_of(action) -> list[str]:
    """What the guard recorded while `action` ran (then cleared: these refusals are the point of the test)."""
    attempts = _recorded()
    attempts.clear()
    try:
        action()
        return list(attempts)
    finally:
        attempts.clear()


def _connect_to_metadata_address():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(OSError, match="tests reach only this machine"):
            sock.connect(("169.254.169.254", 80))


def test_a_connection_elsewhere_is_refused_and_recorded():
    assert _attempts_of(_connect_to_metadata_address) == ["169.254.169.254:80"]


def test_a_lookup_of_another_host_is_refused():
    def look_up():
        with pytest.raises(socket.gaierror):
            socket.getaddrinfo("metadata.google.internal", 80)

    assert _attempts_of(look_up) == ["metadata.google.internal"]


def test_an_attempt_from_a_background_thread_names_the_thread():
    def from_thread():
        thread = threading.Thread(target=_connect_to_metadata_address, name="lease-heartbeat s3://b/lease.json")
        thread.start()
        thread.join(30)

    assert _attempts_of(from_thread) == ["169.254.169.254:80 (from thread 'lease-heartbeat s3://b/lease.json')"]


def test_loopback_is_allowed():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert _attempts_of(lambda: socket.create_connection(server.getsockname(), timeout=5).close()) == []
