"""Fixtures of the distillation tests: one torch thread, and the tiny pretraining run directories of
tests/training/conftest.py (the teacher's data), imported so that both test trees build them one way."""

import pytest
import torch

from tests.training.conftest import run_factory, shared_tiny_run  # noqa: F401 (pytest fixtures, used by name)


@pytest.fixture(autouse=True)
def one_thread():
    """On the shared 2-core machine, two intra-op threads per process oversubscribe the cores and make tiny models
    ~100x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
