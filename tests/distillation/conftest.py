"""One torch thread in the distillation tests: on the shared 2-core machine, two intra-op threads per process
oversubscribe the cores and make tiny models ~100x slower."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
