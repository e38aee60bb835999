"""Optimiser and schedule of BERT pretraining: AdamW without weight decay on biases and LayerNorm weights,
linear warmup to the peak learning rate then linear decay to 0 at max_steps, global gradient-norm clipping."""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weights that decay, and biases + LayerNorm parameters that do not (as in BERT)."""
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if id(param) in no_decay_ids or name.split(".")[-1] == "bias":
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float, betas: tuple[float, float],
                    eps: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=learning_rate, betas=tuple(betas), eps=eps)


class WarmupLinearDecay:
    """lr multiplier at step s: s / warmup during warmup, then (max_steps - s) / (max_steps - warmup), floored
    at 0. A callable object (not a lambda) so the rule is explicit and the scheduler's state_dict stays plain."""

    def __init__(self, warmup_steps: int, max_steps: int):
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        remaining = self.max_steps - step
        return max(0.0, remaining / max(1, self.max_steps - self.warmup_steps))


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int) -> LambdaLR:
    return LambdaLR(optimizer, WarmupLinearDecay(warmup_steps, max_steps))


def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the global L2 norm of all gradients; returns the norm before clipping as a 0-dim tensor on the
    gradients' device (not a float: that would wait for the GPU every step)."""
    return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
