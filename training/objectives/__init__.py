"""Training objectives. An objective turns (model, batch) into a dict with a scalar `loss` to minimise plus any
scalar metrics (`mlm_loss`, `nsp_loss`, `mlm_correct`, `mlm_count`, ...) the trainer averages into metrics.jsonl.

Adding an objective = one small module defining such a function, registered in OBJECTIVES below and named in
`pretrain.objective`.
"""

from __future__ import annotations

from typing import Callable

import torch

from .mlm import mlm_only
from .mlm_nsp import mlm_nsp

Objective = Callable[[torch.nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor | None]]

OBJECTIVES: dict[str, Objective] = {"mlm_nsp": mlm_nsp, "mlm": mlm_only}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise KeyError(f"unknown objective '{name}'; known: {', '.join(sorted(OBJECTIVES))}")
    return OBJECTIVES[name]
