"""Data-parallel training launched by torchrun: the process's rank and world size from the environment, the
process group (gloo on CPU, nccl on CUDA), the DistributedDataParallel wrapper, and the collectives the trainer
needs (averaging the logged losses over ranks, barriers around checkpoint writes).

    torchrun --nproc_per_node 2 $(which bertfactory) pretrain configs/local.yaml --run-dir runs/ddp --no-prefect

Every process reads its slice of each GLOBAL batch (`pretrain.batch_size`, see training/data.py), so the sample
order depends only on (seed, epoch) and W processes see exactly the samples of one process. Only rank 0 writes
metrics, checkpoints and the final model; every rank reads the checkpoint it resumes from (a shared run directory).

DDP averages the ranks' gradients. An objective's loss is a mean over its own batch (MLM: over the masked tokens
of the batch), so the W-process step equals the one-process step exactly when every rank's slice holds the same
number of predictions (e.g. fixed-length instances); otherwise each rank's tokens are weighted by 1 / (W * its
count) instead of 1 / (total count) — the usual data-parallel BERT weighting. Every rank runs the same RNG stream
(same seed, and on resume rank 0's saved state), so dropout draws the same masks on each rank's slice.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bertfactory.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in the job; world_size 1 = a plain single-process run (no process group)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model DDP-wrapped (gradients averaged over ranks in backward), or itself when alone."""
        if not self.enabled:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def mean(self, value: float) -> float:
        """`value` averaged over the ranks (itself when alone): for decisions every rank must take alike."""
        if not self.enabled:
            return value
        total = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(total)
        return total.item() / self.world_size

    def reduce_step(self, scalars: dict, tokens: int) -> tuple[dict, int]:
        """The step's logged values over all ranks: losses averaged (what DDP optimises), *_correct / *_count
        and tokens summed. One all-reduce for everything."""
        if not self.enabled:
            return scalars, tokens
        keys = sorted(k for k, v in scalars.items() if isinstance(v, (int, float)))
        values = torch.tensor([float(scalars[k]) for k in keys] + [float(tokens)], dtype=torch.float64)
        dist.all_reduce(values)  # gloo and nccl both sum float64
        out = dict(scalars)
        for key, total in zip(keys, values.tolist()):
            out[key] = total if key.endswith(("_correct", "_count")) else total / self.world_size
        return out, int(values[-1].item())

    def gather(self, value) -> list:
        """Every rank's `value` (picklable), in rank order ([value] when alone): a collective, every rank calls it."""
        if not self.enabled:
            return [value]
        values = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def fail_together(self, failure: Exception | None, doing: str) -> None:
        """A collective every rank calls after a step of the set-up that reads node-local files (the checkpoint it
        resumes from, pretrain.init_from): `failure` is why this rank could not (None: it could). A rank that
        failed raises its own error; every other rank raises one line naming the first failed rank, its host and
        why, instead of meeting its absence at the next collective (gloo's "Connection closed by peer" traceback,
        or a wait until the process group's timeout while the failed process lingers). `doing`: what failed, for
        that line ("resume", "warm-start from pretrain.init_from")."""
        if not self.enabled:
            if failure is not None:
                raise failure
            return
        import socket

        from bertfactory.errors import ContractError

        outcomes = self.gather((socket.gethostname(), type(failure).__name__ if failure is not None else None,
                                str(failure) if failure is not None else None))
        if failure is not None:
            raise failure
        failed = [(rank, host, kind, why) for rank, (host, kind, why) in enumerate(outcomes) if why is not None]
        if failed:
            rank, host, kind, why = failed[0]
            error = ConfigError if kind == "ConfigError" else ContractError
            raise error(f"rank {rank} (host {host}) cannot {doing}: {why}")

    def shutdown(self) -> None:
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer (torchrun sets it)") from None


def from_environment(device: torch.device) -> tuple[DistContext, torch.device]:
    """The DistContext of this process (RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them) with its process
    group initialised when WORLD_SIZE > 1, and the device this rank trains on (cuda:LOCAL_RANK on CUDA)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is not in [0, WORLD_SIZE={world}); launch with torchrun")
    ctx = DistContext(rank=rank, world_size=world, local_rank=local_rank)
    if not ctx.enabled:
        return ctx, device
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={local_rank} but torch sees {torch.cuda.device_count()} CUDA devices; "
                              f"launch at most that many processes per node (torchrun --nproc_per_node)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # CUDA: nccl for the model's tensors, gloo beside it for the trainer's host-side collectives (mean,
        # reduce_step: float64 CPU tensors), which a group with nccl alone cannot reduce
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)  # MASTER_ADDR / MASTER_PORT from the environment (torchrun)
        logger.info("distributed: rank %d of %d (%s)", rank, world, "nccl" if device.type == "cuda" else "gloo")
    return ctx, device


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP wrapper (what checkpoints store), or the model itself."""
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model
