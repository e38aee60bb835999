"""The XLA backend (`pretrain.device: xla`): TPU through torch-xla's PJRT runtime, or XLA on the CPU for tests
(PJRT_DEVICE=CPU). The trainer (training/trainer.py) runs the same loop; this module holds what differs:

- static shapes: every batch is padded to one width (the shards' max_seq_len) and the model computes MLM logits
  at every prediction slot (pretrain.static_shapes), so the step is one graph compiled once;
- batches reach the device through torch-xla's `MpDeviceLoader` (host->device copies in background threads);
- the step ends with `xm.optimizer_step` and `torch_xla.sync()`: no `.item()` / host read inside the step; the
  step's losses stay on the device and are read in one transfer when the metrics window is written;
- `pretrain.xla_cache_dir`: torch-xla's persistent compilation cache, so a rerun does not compile again;
- `pretrain.xla_spmd`: data parallelism over every XLA device of the process with SPMD (one process, one
  program): each batch is sharded on its batch dimension over a 1-D mesh ("data"), the parameters and optimiser
  state are replicated, and the SPMD partitioner all-reduces the gradients. The loss is the global batch's, so N
  devices train as one device with the whole batch (docs/xla.md: why SPMD and not one process per device).

Needs torch-xla, which pins its own torch: run it from the separate environment `bash scripts/xla_env.sh` makes
(.venv-xla: torch 2.9.0 + torch-xla 2.9.0, the project from PYTHONPATH=.), e.g. with
    PYTHONPATH=. PJRT_DEVICE=TPU .venv-xla/bin/python -c "..."  # run_pretrain on a recipe: docs/xla.md
Tested in tests/training/xla/ (only run in that environment: `make test-xla`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

import torch

from bertfactory.errors import ConfigError

logger = logging.getLogger(__name__)

_cache_dir_initialised: str | None = None


def _import_torch_xla():
    try:
        import torch_xla  # noqa: F401
        import torch_xla.core.xla_model as xm  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"pretrain.device is 'xla' but torch-xla cannot be imported ({err}); create its environment with "
            "`bash scripts/xla_env.sh` and run with .venv-xla/bin/python (PJRT_DEVICE=TPU on a TPU VM, "
            "PJRT_DEVICE=CPU elsewhere)"
        ) from None
    return torch_xla


def xla_device(cache_dir: str | None = None, spmd: bool = False) -> torch.device:
    """The XLA device of this process, after turning on the persistent compilation cache when `cache_dir` is set
    (torch-xla allows that once per process, before the first computation). `spmd`: SPMD mode over all the
    process's devices (`batch_sharding`); the device returned is then the virtual device spanning them."""
    global _cache_dir_initialised
    torch_xla = _import_torch_xla()
    if "PJRT_DEVICE" not in os.environ:
        raise ConfigError("pretrain.device is 'xla' but PJRT_DEVICE is not set; set PJRT_DEVICE=TPU on a TPU VM "
                          "or PJRT_DEVICE=CPU to run XLA on the CPU")
    if cache_dir is not None:
        import torch_xla.runtime as xr

        path = str(Path(cache_dir).resolve())
        if _cache_dir_initialised is None:
            if torch_xla._XLAC._xla_computation_cache_is_initialized():
                raise ConfigError("pretrain.xla_cache_dir is set but this process already ran XLA computations "
                                  "without it; torch-xla turns the persistent cache on only before the first one "
                                  "(start a new process)")
            Path(path).mkdir(parents=True, exist_ok=True)
            xr.initialize_cache(path, readonly=False)
            _cache_dir_initialised = path
            logger.info("xla: persistent compilation cache in %s", path)
        elif _cache_dir_initialised != path:
            logger.warning("xla: the compilation cache is already %s in this process; ignoring %s",
                           _cache_dir_initialised, path)
    if spmd:
        _enable_spmd()
    return torch_xla.device()


def _enable_spmd() -> None:
    import torch_xla.runtime as xr

    if not xr.is_spmd():
        xr.use_spmd()  # tensors this process already put on a device are replicated over the devices
    logger.info("xla: SPMD data parallelism over %d devices", xr.global_runtime_device_count())


def spmd_devices() -> int:
    """How many devices SPMD shards each batch over (1 when SPMD is off)."""
    import torch_xla.runtime as xr

    return xr.global_runtime_device_count() if xr.is_spmd() else 1


def batch_sharding():
    """Under SPMD: the ShardingSpec that splits a batch's [B, ...] tensors on B over the 1-D mesh of every device
    (tensors of another rank, the [B] labels, are replicated: small). None without SPMD."""
    import numpy as np
    import torch_xla.distributed.spmd as xs

    devices = spmd_devices()
    if devices == 1:
        return None
    mesh = xs.Mesh(np.arange(devices), (devices,), ("data",))
    return xs.ShardingSpec(mesh, ("data", None))


def pad_to_width(batch: dict[str, torch.Tensor], width: int, pad_id: int) -> dict[str, torch.Tensor]:
    """The batch with its [B, T] tensors padded on the right to [B, width] (pad_id in input_ids, 0 in the masks
    and segment ids): one shape for every step. Masked positions are indices into the first T columns, unchanged."""
    current = batch["input_ids"].shape[1]
    if current > width:
        raise ValueError(f"batch of width {current} is wider than the static width {width}")
    if current == width:
        return batch
    out = dict(batch)
    extra = width - current
    # XLM's per-token language_ids / TLM's position_ids where the batch has them (0 on padding, as the loader's)
    for key, fill in (("input_ids", pad_id), ("token_type_ids", 0), ("attention_mask", 0), ("language_ids", 0),
                      ("position_ids", 0)):
        if key not in batch:
            continue
        tensor = batch[key]
        out[key] = torch.cat([tensor, tensor.new_full((tensor.shape[0], extra), fill)], dim=1)
    return out


def device_batches(host_batches: Iterator[dict[str, torch.Tensor]], device: torch.device, width: int,
                   pad_id: int) -> Iterator[tuple[dict[str, torch.Tensor], int]]:
    """(batch on the device, its real-token count) for each host batch, in order. The token count is taken on
    the host before the copy (reading it from the device would be a host sync); padding to `width` happens on
    the host too. torch-xla's MpDeviceLoader copies ahead in background threads."""
    import torch_xla.distributed.parallel_loader as pl

    def padded() -> Iterator[tuple[dict[str, torch.Tensor], int]]:
        for batch in host_batches:
            # width 0: the loader already pads every batch to one of pretrain.length_buckets
            yield (pad_to_width(batch, width, pad_id) if width else batch), int(batch["attention_mask"].sum())

    # batches_per_execution: the trainer itself ends every step with torch_xla.sync(); under SPMD each device
    # receives only its rows of the [B, T] tensors
    loader = pl.MpDeviceLoader(_Reiterable(padded), device, batches_per_execution=1 << 30,
                               input_sharding=batch_sharding())
    yield from loader


class _Reiterable:
    """MpDeviceLoader wants an iterable (it calls iter() in its worker thread); this one iterates a generator
    function once."""

    def __init__(self, make):
        self._make = make

    def __iter__(self):
        return self._make()


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """xm.optimizer_step: all-reduce the gradients over XLA replicas (none in a single process; under SPMD the
    partitioner has already reduced them) and step; the graph is cut by `sync()` after the schedule has stepped
    too."""
    import torch_xla.core.xla_model as xm

    xm.optimizer_step(optimizer, barrier=False)


def sync() -> None:
    """End of the step's lazy graph: compile it (once per shape) and launch it asynchronously."""
    import torch_xla

    torch_xla.sync()


def compile_count() -> int:
    """How many XLA graphs this process compiled so far (torch_xla.debug.metrics 'CompileTime' samples)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def to_host(tensors: list[torch.Tensor]) -> list[float]:
    """Many 0-dim device tensors read back in one transfer (waits for the graphs that compute them)."""
    if not tensors:
        return []
    # float32 on the device (TPUs have no float64): exact for the losses and for counts below 2**24
    return torch.stack([t.detach().to(torch.float32) for t in tensors]).cpu().tolist()
