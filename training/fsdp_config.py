"""The recipe's FSDP settings: `pretrain.fsdp` (FsdpConfig), read when `pretrain.parallelism: fsdp` shards the model
over the torchrun processes (training/fsdp.py; docs/parallelism.md).

    pretrain:
      parallelism: fsdp
      fsdp: {param_dtype: auto, reduce_dtype: float32, reshard_after_forward: true}

The precision policy applies on CUDA only: the CPU trains in fp32 (exact reproducibility), whatever these say.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bertfactory.config import StrictModel


class FsdpConfig(StrictModel):
    """How FSDP2 (torch.distributed.fsdp.fully_shard) shards and casts the model; ignored under DDP."""

    param_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto", description="CUDA: dtype the parameters are all-gathered and computed in (the sharded fp32 master "
                            "copy and the optimiser stay fp32); auto = bfloat16 when pretrain.bf16 and the GPU "
                            "supports it, else float32. Not used on the CPU")
    reduce_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="CUDA: dtype of the gradient reduce-scatter (float32 = exact sums of bf16 "
                               "gradients; bfloat16 halves that traffic). Not used on the CPU")
    reshard_after_forward: bool = Field(
        True, description="free each layer's gathered parameters after its forward and gather them again in "
                          "backward (ZeRO-3: least memory); false keeps them to the backward (ZeRO-2-like: one "
                          "all-gather less per layer and step, more memory)")
