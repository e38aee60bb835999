"""The XLA tests run only in the torch-xla environment (`bash scripts/xla_env.sh`; `make test-xla`), on XLA's CPU
backend. In the main environment (no torch-xla) they are skipped, unless BERTFACTORY_REQUIRE_XLA=1 (set by
`make test-xla`), where a missing torch-xla is a failure: CI must not pass by skipping them."""

import os

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")  # read when torch_xla is imported


def pytest_collection_modifyitems(config, items):
    try:
        import torch_xla  # noqa: F401
    except ImportError as err:
        if os.environ.get("BERTFACTORY_REQUIRE_XLA") == "1":
            raise pytest.UsageError(f"BERTFACTORY_REQUIRE_XLA=1 but torch_xla cannot be imported: {err}") from None
        skip = pytest.mark.skip(reason="torch-xla is not installed here; run `make test-xla` (its own environment)")
        for item in items:
            if "tests/training/xla/" in str(item.fspath).replace(os.sep, "/"):
                item.add_marker(skip)
