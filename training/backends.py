"""Compute backends: which device to train on and which autocast context to run the forward pass in.

CPU trains in fp32 (so a resumed run reproduces the loss curve exactly); CUDA uses bf16 autocast when asked and
supported. XLA (TPU, or the CPU with PJRT_DEVICE=CPU) comes from torch-xla (training/xla.py).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from bertfactory.errors import ConfigError


def resolve_device(name: str, xla_cache_dir: str | None = None, xla_spmd: bool = False) -> torch.device:
    """'auto' -> cuda when torch sees a GPU, else cpu; 'cuda' without a GPU is a ConfigError; 'xla' -> the
    torch-xla device (ConfigError without torch-xla), with its persistent compilation cache in `xla_cache_dir`
    and, with `xla_spmd`, SPMD data parallelism over all the process's XLA devices (training/xla.py)."""
    if name == "xla":
        from .xla import xla_device

        return xla_device(xla_cache_dir, spmd=xla_spmd)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("pretrain.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"unknown device '{name}'; choose auto, cpu, cuda or xla")
    return torch.device(name)


def autocast_context(device: torch.device, bf16: bool) -> AbstractContextManager:
    if device.type == "cuda" and bf16 and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "xla" and bf16:
        return torch.autocast("xla", dtype=torch.bfloat16)
    return nullcontext()


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "xla":
        import torch_xla.runtime as xr

        return f"xla ({xr.device_type()})"
    return f"cpu ({torch.get_num_threads()} threads)"
