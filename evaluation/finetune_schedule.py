"""How fast each part of a model fine-tunes, and when (the tricks of the seed papers): layer-wise learning-rate
decay (discriminative fine-tuning, Howard & Ruder 2018; ELECTRA's 0.8), ULMFiT's gradual unfreezing, and the
learning-rate schedule over the steps (BERT's linear warmup/decay, ULMFiT's slanted triangular rate or
ModernBERT's warmup-stable-decay). The schedules are pretraining's (training/optim.py), given here in fine-tuning's
terms: fractions of the total steps; `schedule_rule` picks the one an `evaluate.finetune` section names.

Depth of a parameter: 0 = the embeddings, l = transformer layer l (1..L; a layer module shared by several layers,
ALBERT-style, takes the depth of the highest layer using it), L + 1 = the pooler and the task head. With decay d
the learning rate at depth k is lr * d^(L + 1 - k). Gradual unfreezing trains depths >= L + 1 - e in epoch e
(0-based): the head alone first, then one more layer down per epoch.

    groups = layerwise_groups(model, lr=2e-5, decay=0.8, weight_decay=0.01)
    scheduler = LambdaLR(optimizer, slanted_triangular(total_steps, cut_frac=0.1, ratio=32))
    scheduler = LambdaLR(optimizer, schedule_rule(finetune_cfg, total_steps))  # the configured one
"""

from __future__ import annotations

import math
import re
from typing import Callable

from torch import nn

from training.optim import SlantedTriangular, WarmupLinearDecay, WarmupStableDecay

from .config import FinetuneConfig

_LAYER = re.compile(r"\.layers?\.(\d+)\.")


def parameter_depths(model: nn.Module) -> tuple[dict[str, int], int]:
    """name -> depth for every parameter of a TaskModel (encoder + head), and the top depth L + 1."""
    encoder = model.encoder
    num_layers = int(getattr(encoder.config, "num_layers", 0))
    top = num_layers + 1
    plan = getattr(getattr(encoder, "encoder", None), "plan", None)
    depth_of_module: dict[int, int] = {}
    if plan:
        for layer, owners in enumerate(plan):
            for module in owners:
                depth_of_module[module] = max(depth_of_module.get(module, 0), layer + 1)
    depths = {}
    for name, _ in model.named_parameters():
        if not name.startswith("encoder.") or ".pooler." in name:
            depths[name] = top
        elif "embeddings" in name.split(".")[1]:
            depths[name] = 0
        elif (match := _LAYER.search(name)) is not None:
            module = int(match.group(1))
            depths[name] = min(top - 1, depth_of_module.get(module, module + 1))
        else:  # an encoder part outside the layers (e.g. a final LayerNorm): treated as the top layer
            depths[name] = max(1, top - 1)
    return depths, top


def layerwise_groups(model: nn.Module, lr: float, decay: float, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: per depth, weights with weight decay and biases/LayerNorm without (as BERT),
    each at lr * decay^(top - depth). Frozen parameters are included (gradual unfreezing thaws them later)."""
    depths, top = parameter_depths(model)
    no_decay = set()
    for module_name, module in model.named_modules():
        if isinstance(module, nn.LayerNorm):
            no_decay.update(f"{module_name}.{n}" if module_name else n for n, _ in module.named_parameters(recurse=False))
    buckets: dict[tuple[int, bool], list] = {}
    for name, param in model.named_parameters():
        skip_decay = name in no_decay or name.split(".")[-1] == "bias"
        buckets.setdefault((depths[name], skip_decay), []).append(param)
    groups = []
    for (depth, skip_decay), params in sorted(buckets.items()):
        groups.append({"params": params, "weight_decay": 0.0 if skip_decay else weight_decay,
                       "lr": lr * decay ** (top - depth), "depth": depth})
    return groups


def unfreeze(model: nn.Module, epoch: int) -> int:
    """Gradual unfreezing: in `epoch` (0-based) only depths >= top - epoch train. Returns how many depths train."""
    depths, top = parameter_depths(model)
    lowest = top - epoch
    for name, param in model.named_parameters():
        param.requires_grad_(depths[name] >= lowest)
    return min(top + 1, epoch + 1)


def linear_warmup_decay(total_steps: int, warmup_ratio: float) -> Callable[[int], float]:
    """BERT's schedule: linear warmup over round(warmup_ratio * total_steps) steps, then linear decay to 0."""
    return WarmupLinearDecay(round(warmup_ratio * total_steps), total_steps)


def slanted_triangular(total_steps: int, cut_frac: float, ratio: float) -> Callable[[int], float]:
    """ULMFiT's STLR: a short linear increase over cut_frac of the steps from lr/ratio to lr, then a long linear
    decrease back to lr/ratio. The cut is at least one step (ULMFiT's floor(T * cut_frac) of a tiny run can be 0)."""
    return SlantedTriangular(max(1, math.floor(total_steps * cut_frac)), total_steps, ratio)


def warmup_stable_decay(total_steps: int, warmup_ratio: float, decay_fraction: float) -> Callable[[int], float]:
    """ModernBERT's warmup-stable-decay (training/optim.py WarmupStableDecay): linear warmup over
    round(warmup_ratio * total_steps) steps, the peak until the last round(decay_fraction * total_steps) steps,
    then the 1-sqrt decay to 0 at the last step."""
    return WarmupStableDecay(round(warmup_ratio * total_steps), total_steps, decay_fraction)


def schedule_rule(cfg: FinetuneConfig, total_steps: int) -> Callable[[int], float]:
    """The lr multiplier per step that `cfg.schedule` names (linear, slanted_triangular or wsd) over a run of
    `total_steps` optimiser steps."""
    if cfg.schedule == "slanted_triangular":
        return slanted_triangular(total_steps, cfg.warmup_ratio, cfg.stlr_ratio)
    if cfg.schedule == "wsd":
        return warmup_stable_decay(total_steps, cfg.warmup_ratio, cfg.wsd_decay_fraction)
    if cfg.schedule == "linear":
        return linear_warmup_decay(total_steps, cfg.warmup_ratio)
    raise ValueError(f"evaluate.finetune.schedule: unknown schedule {cfg.schedule!r}")
