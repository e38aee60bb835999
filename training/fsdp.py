"""Fully sharded data parallelism (`pretrain.parallelism: fsdp`): FSDP2 (`torch.distributed.fsdp.fully_shard`) over
the torchrun processes, and the full (unsharded) state dicts that keep checkpoints in the one format every layout
reads. See docs/parallelism.md for when to use it.

    torchrun --nproc_per_node 8 $(which bertfactory) pretrain configs/bert-large.yaml \
        --set pretrain.parallelism=fsdp --run-dir R --no-prefect

Sharding (`shard_model`, before the optimiser is built, so it holds the shards): one FSDP unit per encoder layer,
then the root (embeddings, heads, pooler: the MLM decoder is tied to the word embeddings, so both stay in the
root's unit, which is gathered for the whole forward). Each rank keeps 1/W of every parameter, gradient and
optimiser state (dim-0 shards as DTensors); a unit's parameters are all-gathered just before it runs and its
gradients reduce-scattered (averaged, as DDP's all-reduce) after its backward. The trajectory is DDP's: W
processes x B equal one process x W*B up to the rounding of the reductions (tests/training/test_fsdp.py).

The encoder's `TransformerLayer` is never called itself (Encoder runs its blocks through `TransformerLayer.run`,
to share blocks between layers, training/models/core/encoder.py), so its unit is the list of its blocks: FSDP2
gathers the group when the first of them runs. Relative-attention layers (XLNet, Transformer-XL) are called, and
are their own unit.

Checkpoints stay what DDP and one process write: rank 0 saves the full model state dict (safetensors) and the
optimiser state in torch's own layout (`optimizer.state_dict()`: states keyed by parameter index), gathered from
the shards with torch.distributed.checkpoint's get_*_state_dict(full_state_dict, cpu_offload); on resume every
rank reads the full state and keeps its shard (set_*_state_dict). So a run can resume under FSDP from a DDP or
single-process checkpoint and the other way round.

CUDA: `pretrain.fsdp` sets the mixed-precision policy (bf16 compute copies, fp32 gradient reduction and fp32
master shards). The CPU always trains fp32.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import torch
from torch import nn

from bertfactory.errors import ConfigError, ContractError

from .distributed import DistContext
from .fsdp_config import FsdpConfig

logger = logging.getLogger(__name__)


def is_sharded(model: nn.Module) -> bool:
    """Whether fully_shard was applied to `model` (its class becomes FSDP<Name>, a subclass of FSDPModule)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def shard_units(model: nn.Module) -> list[nn.Module | list[nn.Module]]:
    """The per-layer FSDP units of `model`, in model order: each element of an encoder's `layer` ModuleList (a
    list of its blocks for the Encoder's TransformerLayer, see the module docstring)."""
    from .models.core.encoder import TransformerLayer

    units: list[nn.Module | list[nn.Module]] = []
    for name, module in model.named_modules():
        if not (isinstance(module, nn.ModuleList) and name.split(".")[-1] == "layer"):
            continue
        for layer in module:
            if isinstance(layer, TransformerLayer):
                blocks = list(layer.children())
                if blocks:  # a layer owning no block of its own (shared attention and FFN) has nothing to shard
                    units.append(blocks)
            else:
                units.append(layer)
    return units


def mixed_precision(settings: FsdpConfig, device: torch.device, bf16: bool):
    """The MixedPrecisionPolicy for `device`: the configured dtypes on CUDA; none (fp32 everywhere) on the CPU."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if device.type != "cuda":
        if settings.param_dtype == "bfloat16" or settings.reduce_dtype == "bfloat16":
            logger.warning("fsdp: pretrain.fsdp's bfloat16 precision applies on CUDA only; %s trains in float32",
                           device.type)
        return MixedPrecisionPolicy()
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    if settings.param_dtype == "auto":
        param_dtype = torch.bfloat16 if bf16 and torch.cuda.is_bf16_supported() else torch.float32
    else:
        param_dtype = dtypes[settings.param_dtype]
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=dtypes[settings.reduce_dtype])


def shard_model(model: nn.Module, dist: DistContext, device: torch.device, settings: FsdpConfig,
                bf16: bool = False) -> nn.Module:
    """`model` (already on `device`) sharded in place over the `dist.world_size` processes: fully_shard on every
    per-layer unit, then on the root. Alone (world size 1) there is nothing to shard: the model is returned
    as it is, with a warning."""
    if not dist.enabled:
        logger.warning("pretrain.parallelism is fsdp but this is one process: training unsharded (launch with "
                       "torchrun --nproc_per_node N to shard over N processes)")
        return model
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"pretrain.parallelism fsdp runs on cpu (gloo) or cuda (nccl), not on {device.type}")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.world_size,))
    policy = mixed_precision(settings, device, bf16)
    units = shard_units(model)
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=settings.reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)  # the root is needed at once
    logger.info("fsdp: %d layer units + root sharded over %d processes (%s of %s parameters on this rank)",
                len(units), dist.world_size, f"{local_parameter_count(model):,}",
                f"{sum(p.numel() for p in model.parameters()):,}")
    return model


def local_parameter_count(model: nn.Module) -> int:
    """Parameters this process holds: its shards under FSDP (DTensor.to_local), every parameter otherwise."""
    from torch.distributed.tensor import DTensor

    return sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in model.parameters())


def _options(**kwargs):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kwargs)


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict of a sharded model, on the CPU, on rank 0 ({} on the other ranks). A collective:
    every rank must call it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_model_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Every rank passes the same full state dict; each keeps its shards (strict: names must match)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, dict(state), options=_options(full_state_dict=True, strict=True))


def _parameter_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[list[str]]:
    """Per optimiser group, the names of its parameters in the group's order (FSDP keeps the model's names)."""
    names = {id(p): name for name, p in model.named_parameters()}
    try:
        return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    except KeyError:
        raise ContractError("the optimiser holds a parameter that is not the model's; it must be built after "
                            "the model is sharded (training/fsdp.py)") from None


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimiser's full state in torch's layout (what `optimizer.state_dict()` of the unsharded model would
    return: states keyed by parameter index), on the CPU, on rank 0 ({} elsewhere). A collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    by_name = get_optimizer_state_dict(model, optimizer, options=_options(full_state_dict=True, cpu_offload=True))
    if not by_name:
        return {}
    groups = _parameter_names(model, optimizer)
    if [list(group["params"]) for group in by_name["param_groups"]] != groups:
        raise ContractError("the gathered optimiser state lists its parameters in another order than the optimiser")
    index = {name: i for i, name in enumerate(name for group in groups for name in group)}
    return {
        "state": {index[name]: value for name, value in by_name["state"].items()},
        "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                         for group in by_name["param_groups"]],
    }


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
    """Load an optimiser state of torch's layout (from any checkpoint: FSDP, DDP or one process) into the
    optimiser of a sharded model: every rank passes the full state and keeps its shards."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    groups = _parameter_names(model, optimizer)
    names = [name for group in groups for name in group]
    saved_groups = state["param_groups"]
    if [len(group["params"]) for group in saved_groups] != [len(group) for group in groups]:
        raise ContractError(f"the checkpoint's optimiser state has groups of "
                            f"{[len(g['params']) for g in saved_groups]} parameters, the optimiser "
                            f"{[len(g) for g in groups]}")
    by_name = {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[int(i)] for i in group["params"]]} for group in saved_groups],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=_options(full_state_dict=True))
