"""Test-wide settings. Prefect runs against a temporary home with an ephemeral API, analytics off."""

import bertfactory  # noqa: F401  first: the pinned CPU kernels (bertfactory/cpu_kernels.py), as the CLI runs them

import ipaddress
import os
import socket
import tempfile
import threading

import pytest

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bertfactory-prefect-"))
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist workers inherit the controller's environment: each gets a home (and ephemeral API database) of its own
    os.environ["PREFECT_HOME"] = os.path.join(os.environ["PREFECT_HOME"], worker)
    os.makedirs(os.environ["PREFECT_HOME"], exist_ok=True)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_UI_ENABLED", "false")
# stage code run outside a flow (unit tests, --no-prefect) logs locally only, without a warning per line
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "preprocessing,training,evaluation,distillation,bertfactory,flows")


# Test files that share an expensive session fixture: under xdist they are one unit of work, so that the fixture is
# built once, on one worker (the others are one unit per file, as with --dist loadfile).
SHARED_SESSION_FIXTURES = {
    "tests/flows/server/": "prefect-servers",  # sqlite_server, postgres_server, pipeline_runs
    "tests/infra/test_entrypoint_services.py": "entrypoint-server",
    "tests/infra/test_torchrun_flow_run.py": "entrypoint-server",
}


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((unit for prefix, unit in SHARED_SESSION_FIXTURES.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist installed, never called
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs `-n 2 --dist loadfile`: each test file goes whole to one worker (its module fixtures built
    once, its tests in order), and the files of SHARED_SESSION_FIXTURES go together."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return SharedFixtureUnits(config, log)


def pytest_configure(config):
    # the units go out in collection order, which the hook below makes slow-first, not xdist's most-tests-first
    if getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False
    if hasattr(config, "workerinput"):
        # the workers share the cores instead of each running torch on all of them (tiny models slow down badly
        # when oversubscribed); tests that set a thread count restore it, stages set their own
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_collection_modifyitems(config, items):
    """In an xdist worker: the units holding a `slow` test first, so that the workers do not wait on one long
    unit at the end (a stable sort: file and test order are kept otherwise)."""
    if not hasattr(config, "workerinput"):
        return
    slow = {_unit(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _unit(item.nodeid) not in slow)


# Tests reach nothing but this machine (object storage, Prefect, torch's rendezvous: all on 127.0.0.1). Looking up
# another host's name, or connecting to another address, from a test process is refused here and fails the test
# that did it, even where the library that tried swallows the error (Beam's GCS soft-delete check did, after ~3.5
# minutes of retrying the lookup of storage.googleapis.com). Child processes (torchrun ranks, servers) are not
# covered.
_outside_attempts: list[str] = []
_socket_connect, _socket_connect_ex = socket.socket.connect, socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo
_THIS_MACHINE = {"localhost", socket.gethostname()}


def _outside_name(host) -> str | None:
    if host is None:
        return None
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name in ("", *_THIS_MACHINE) or name.endswith(".localhost"):
        return None
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
        return None  # an address, not a name: the connection's own check decides
    except ValueError:
        return name


def _attempt(where: str) -> str:
    """`where`, plus the thread that tried when it is not the main one: a background thread left behind by an
    earlier test (a heartbeat, a client's refresher) is blamed on the test running when it wakes, so name it."""
    thread = threading.current_thread()
    return where if thread is threading.main_thread() else f"{where} (from thread {thread.name!r})"


def _guarded_getaddrinfo(host, *args, **kwargs):
    if (name := _outside_name(host)) is not None:
        _outside_attempts.append(_attempt(name))
        raise socket.gaierror(socket.EAI_NONAME, f"tests reach only this machine (127.0.0.1), not {name}")
    return _getaddrinfo(host, *args, **kwargs)


def _outside_address(sock: socket.socket, address) -> str | None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return None
    host = str(address[0])
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:  # a name: the same rule as a lookup
        return None if _outside_name(host) is None else f"{host}:{address[1]}"
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return None if ip.is_loopback or ip.is_unspecified else f"{host}:{address[1]}"


def _refuse_outside(sock: socket.socket, address) -> None:
    if (where := _outside_address(sock, address)) is not None:
        _outside_attempts.append(_attempt(where))
        raise OSError(f"tests reach only this machine (127.0.0.1), not {where}")


def _guarded_connect(self, address):
    _refuse_outside(self, address)
    return _socket_connect(self, address)


def _guarded_connect_ex(self, address):
    _refuse_outside(self, address)
    return _socket_connect_ex(self, address)


socket.socket.connect, socket.socket.connect_ex = _guarded_connect, _guarded_connect_ex
socket.getaddrinfo = _guarded_getaddrinfo


@pytest.fixture(autouse=True)
def _nothing_reached_outside():
    _outside_attempts.clear()
    yield
    if _outside_attempts:
        pytest.fail(f"the test tried to reach {', '.join(sorted(set(_outside_attempts)))}: tests reach only 127.0.0.1")


# A lease's heartbeat (flows/lock.py) left running after its test goes on writing to the test's object store after
# that store and its credentials are gone, in whatever test the process runs next (a botocore credential lookup then
# shows up as that innocent test reaching the cloud's metadata address, minutes later). The test that leaves one
# alive fails instead.
_HEARTBEAT = "lease-heartbeat "


@pytest.fixture(autouse=True)
def _no_lease_heartbeat_left_running():
    before = {t for t in threading.enumerate() if t.name.startswith(_HEARTBEAT)}
    yield
    left = [t for t in threading.enumerate() if t.name.startswith(_HEARTBEAT) and t not in before and t.is_alive()]
    for thread in left:  # a release that is still joining it gets its few seconds
        thread.join(10)
    if alive := [t.name[len(_HEARTBEAT):] for t in left if t.is_alive()]:
        pytest.fail(f"the test left a lease heartbeat running (never released): {', '.join(alive)}")
