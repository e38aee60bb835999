"""The `pretrain.batch_size_ramp` section (BatchRampConfig), declared without torch so that a recipe loads without
it; the ramp itself is training/batch_ramp.py, which imports it from here.

    from training.batch_ramp_config import BatchRampConfig
    ramp = BatchRampConfig(start_batch_size=32, steps=1000)
"""

from __future__ import annotations

from pydantic import Field

from bertfactory.config import StrictModel


class BatchRampConfig(StrictModel):
    """Linear ramp of the global batch over the first steps of training."""

    start_batch_size: int = Field(..., ge=1, description="global batch of the first step (rounded down to a multiple "
                                  "of world size x grad_accumulation, at least one multiple)")
    steps: int = Field(..., ge=1, description="steps over which the batch grows linearly to pretrain.batch_size")
