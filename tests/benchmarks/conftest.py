"""The benchmark scripts' tests load each script as a module by path (benchmarks/ is not a package): `load_benchmark`
returns a loader that leaves sys.path as it was (the scripts put the repository on it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="session")
def load_benchmark():
    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
        path = list(sys.path)
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = path
        return module

    return load
