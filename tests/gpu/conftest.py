"""The CUDA-only tests (`make test-gpu`): bf16 autocast, the varlen_attn kernel path, DDP over nccl, FSDP mixed
precision and the `pretrain-gpu` deployment's torchrun command, on the GPUs torch sees.

Every CUDA test module here sets `pytestmark = pytest.mark.cuda`. Without a CUDA device those tests are skipped
with the reason below, so CI's `pytest tests` on a CPU machine collects them and skips them in a moment. With
BERTFACTORY_REQUIRE_GPU=1 (set by `make test-gpu`) a machine without CUDA is a usage error instead: `make test-gpu`
must not pass by skipping everything. A test needing 2 GPUs skips itself, with the count torch sees, on one GPU.

Fixtures reused from the other test folders (loaded by path: conftest modules are not importable by name under
--import-mode=importlib): `run_factory` (tests/training/conftest.py: a tiny run directory with real shards of a
synthetic counting corpus) and `entrypoint_server` (tests/infra/conftest.py: a real Prefect server started as the
images start it). `ranks` holds the helpers of the multi-process tests: `launch` starts processes the way
torchrun does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("rank_worker.py")


def _cuda_missing() -> str | None:
    """Why the CUDA tests cannot run here, or None when torch sees a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return None
    build = f"CUDA build {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (f"no CUDA device: torch {torch.__version__} ({build}) sees none; these tests run with `make test-gpu` "
            f"on a GPU machine")


def pytest_collection_modifyitems(config, items):
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items or (reason := _cuda_missing()) is None:
        return
    if os.environ.get("BERTFACTORY_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"BERTFACTORY_REQUIRE_GPU=1 but {reason}")
    skip = pytest.mark.skip(reason=reason)
    for item in cuda_items:
        item.add_marker(skip)


def _load(relative: str, name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_training = _load("tests/training/conftest.py", "bertfactory_gpu_training_fixtures")
_infra = _load("tests/infra/conftest.py", "bertfactory_gpu_infra_fixtures")
run_factory = _training.run_factory  # the fixtures, re-exported for this folder
entrypoint_server = _infra.entrypoint_server
stop_process_group = _infra.stop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, args: list[str], timeout: int = 300, env: dict | None = None) -> list[str]:
    """What torchrun does: `world` processes of `python ARGS...`, each with RANK / LOCAL_RANK / WORLD_SIZE /
    MASTER_* set (LOCAL_RANK = RANK: one node), cwd the repository; their outputs (each must exit 0)."""
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = {**os.environ, **(env or {}), "RANK": str(rank), "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        procs.append(subprocess.Popen([sys.executable, *args], cwd=REPO, env=rank_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, out[-4000:]
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


def needs_gpus(count: int) -> None:
    """Skip the calling test, with the count torch sees, when fewer than `count` CUDA devices exist."""
    import torch

    seen = torch.cuda.device_count()
    if seen < count:
        pytest.skip(f"needs {count} CUDA devices, torch sees {seen} ({torch.cuda.get_device_name(0)}); the "
                    f"one-GPU tests of this module cover it with one process")


def result_line(output: str, tag: str) -> dict:
    """The JSON after `tag` on a worker's result line (tests/gpu/rank_worker.py)."""
    line = next((x for x in output.splitlines() if x.startswith(f"{tag} ")), None)
    assert line is not None, f"no {tag} line in the output:\n{output[-3000:]}"
    return json.loads(line.split(" ", 1)[1])


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def assert_same_curve(got: list[dict], want: list[dict], rel: float, abs_: float,
                      losses: tuple[str, ...] = ("loss", "mlm_loss", "nsp_loss")) -> None:
    """Two metrics.jsonl curves: the same steps, samples and schedule, losses within rel / abs."""
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for a, b in zip(want, got):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]  # the same samples, the same schedule
        for key in losses:
            assert b[key] == pytest.approx(a[key], rel=rel, abs=abs_), (key, a, b)


@pytest.fixture
def ranks() -> SimpleNamespace:
    """The helpers above for the test modules: launch, needs_gpus, result_line, metrics, assert_same_curve,
    `worker` (the path of tests/gpu/rank_worker.py) and `stop` (a process group: SIGTERM, then SIGKILL)."""
    return SimpleNamespace(launch=launch, needs_gpus=needs_gpus, result_line=result_line, metrics=metrics,
                           assert_same_curve=assert_same_curve, worker=str(WORKER), stop=stop_process_group)


@pytest.fixture
def varlen_kernel_capable():
    """Skips on a GPU without the FlashAttention varlen kernel (compute capability < 8.0); the test modules of the
    unpadded path opt in with pytest.mark.usefixtures."""
    import torch

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip(f"varlen_attn needs compute capability >= 8.0; {torch.cuda.get_device_name()} has "
                    f"{torch.cuda.get_device_capability()}")


@pytest.fixture
def kernel_calls(monkeypatch):
    """The window_size of every varlen_attn call (training/models/core/varlen.py imports it from its module at each
    call, so patching the module attribute sees them all)."""
    import torch.nn.attention.varlen as varlen_module

    calls, real = [], varlen_module.varlen_attn

    def counting(*args, **kwargs):
        calls.append(kwargs.get("window_size"))
        return real(*args, **kwargs)

    monkeypatch.setattr(varlen_module, "varlen_attn", counting)
    return calls
