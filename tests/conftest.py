"""Test-wide settings. Prefect runs against a temporary home with an ephemeral API, analytics off."""

import bertfactory  # noqa: F401  first: the pinned CPU kernels (bertfactory/cpu_kernels.py), as the CLI runs them

import os
import tempfile

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
