"""The `pretrain.stacking` section (StackingConfig: after which steps the model doubles its depth), declared without
torch so that a recipe loads without it; progressive stacking itself is training/stacking.py, which imports it from
here.

    from training.stacking_config import StackingConfig
    stacking = StackingConfig(stages=[300, 700])
"""

from __future__ import annotations

from pydantic import Field, field_validator

from bertfactory.config import StrictModel


class StackingConfig(StrictModel):
    """pretrain.stacking: when to double the model's depth."""

    stages: list[int] = Field(description="optimiser steps after which the model's layers are stacked (doubled); "
                              "strictly increasing, each in [1, max_steps). model.num_layers is the first depth")

    @field_validator("stages")
    @classmethod
    def _increasing(cls, stages: list[int]) -> list[int]:
        if not stages:
            raise ValueError("stages must list at least one step (leave stacking out for none)")
        if stages[0] < 1 or any(b <= a for a, b in zip(stages, stages[1:])):
            raise ValueError(f"stages must be strictly increasing steps >= 1 (got {stages})")
        return stages
