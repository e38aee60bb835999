"""Compute backends: which device to train on and which autocast context to run the forward pass in.

CPU trains in fp32 (so a resumed run reproduces the loss curve exactly); CUDA uses bf16 autocast when asked and
supported. Another backend (e.g. XLA) is one more branch here.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from bertfactory.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when torch sees a GPU, else cpu; 'cuda' without a GPU is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("pretrain.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    if name not in ("cpu", "cuda"):
        raise ConfigError(f"unknown device '{name}'; choose auto, cpu or cuda")
    return torch.device(name)


def autocast_context(device: torch.device, bf16: bool) -> AbstractContextManager:
    if device.type == "cuda" and bf16 and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
