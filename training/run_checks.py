"""Checks of a pretraining run that need facts known only when it starts: the number of processes and XLA
devices, the per-process batch, the shards' sequence lengths. Each raises a ConfigError naming the keys and the fix.

    spmd_devices = check_process_layout(cfg, dist, device)     # after training.distributed.from_environment
    check_compiler(cfg, device)                               # pretrain.compile: the toolchain inductor needs
    check_same_run(model_cfg, cfg, tokenizer_sha256, manifest, dist)  # torchrun: every rank, the same run
    check_micro_batches(batches, cfg, dist)                   # after the loader has split the batch over ranks
    width = check_positions(arch_config, batches, manifest)   # the longest sequence the model must hold

What the recipe alone decides is checked when it is loaded (training/pretrain_config.py, training/recipe_checks.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file

from .distributed import DistContext
from .pretrain_config import PretrainConfig


def check_process_layout(cfg: PretrainConfig, dist: DistContext, device: torch.device) -> int:
    """The number of XLA devices each batch is sharded over (pretrain.xla_spmd; 1 without it)."""
    if dist.enabled and device.type == "xla":
        raise ConfigError("pretrain.device xla trains in one process (several XLA devices through "
                          "pretrain.xla_spmd); one process per device (torchrun, torch_xla.launch) is not "
                          "implemented: launch without torchrun")
    if not cfg.xla_spmd:
        return 1
    from .xla import spmd_devices  # torch-xla only when asked for

    devices = spmd_devices()
    if cfg.batch_size % devices:
        raise ConfigError(f"pretrain.xla_spmd shards each batch over the {devices} XLA devices: "
                          f"pretrain.batch_size={cfg.batch_size} is not a multiple of {devices}")
    return devices


def check_micro_batches(batches, cfg: PretrainConfig, dist: DistContext) -> None:
    """Every process's share of the batch (`batches.local_batch_size`) splits into grad_accumulation equal parts."""
    per_rank = batches.local_batch_size
    if per_rank % cfg.grad_accumulation:
        raise ConfigError(
            f"each of the {dist.world_size} processes trains {per_rank} sequences per step (pretrain.batch_size="
            f"{cfg.batch_size} / world size {dist.world_size}), which pretrain.grad_accumulation={cfg.grad_accumulation} "
            f"does not divide into equal micro-batches. Make batch_size a multiple of world size x grad_accumulation "
            f"({dist.world_size * cfg.grad_accumulation}), or change grad_accumulation to a divisor of {per_rank}"
        )


# pretrain fields a node may set for itself: they change neither the trajectory nor the collectives the ranks take
# part in (init_from / tlm_shards are paths into each node's own working copy; DDP starts every rank from rank 0's
# weights, and the data each names is checked through the shards' and tokenizer's hashes below)
NODE_LOCAL_FIELDS = frozenset({"num_threads", "loader_workers", "xla_cache_dir", "peak_flops", "tracking",
                               "verify_shards", "init_from", "tlm_shards"})


def check_same_run(model_cfg, cfg: PretrainConfig, tokenizer_sha256: str, manifest: Path, dist: DistContext) -> None:
    """Every process of a torchrun job was started with the same model and pretrain settings on the same tokenizer and
    shards (each node starts its own command: a --set given on one node only is easy to miss). Ranks that differ in
    max_steps or save_every stop taking part in the same collectives and wait on each other until the process group
    times out (30 min on gloo); other settings train each rank's slice under another recipe. Refused on every rank,
    naming the first rank that differs from rank 0 and the fields, before any rank opens the shards (a rank refused
    there alone would leave the others waiting for it)."""
    if not dist.enabled:
        return
    import socket

    mine = {"host": socket.gethostname(),
            "settings": {"model": model_cfg.model_dump(mode="json"),
                         "pretrain": cfg.model_dump(mode="json", exclude=set(NODE_LOCAL_FIELDS)),
                         "data": {"tokenizer_sha256": tokenizer_sha256,
                                  "shards_manifest_sha256": sha256_file(manifest) if manifest.is_file() else None}}}
    everyone = dist.gather(mine)
    first = everyone[0]
    for rank, theirs in enumerate(everyone[1:], 1):
        diffs = _differences(first["settings"], theirs["settings"])
        if diffs:
            shown = "; ".join(f"{name}: rank 0 {a!r}, rank {rank} {b!r}" for name, a, b in diffs[:5])
            more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
            raise ConfigError(
                f"the {dist.world_size} processes of this job were not started with the same settings: rank {rank} "
                f"(host {theirs['host']}) differs from rank 0 (host {first['host']}) in {shown}{more}. Start every "
                f"node's command with the same recipe, --set options and run directory")


def _differences(a: dict, b: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, "<absent>"), b.get(key, "<absent>")
        if isinstance(x, dict) and isinstance(y, dict):
            out += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            out.append((f"{prefix}{key}", x, y))
    return out


def check_positions(arch_config, batches, manifest_path: str) -> int:
    """The sequence length the model must hold (the manifest's max_seq_len or the longest instance, whichever is
    larger); refused when the architecture's learned positions are fewer. Relative positions (XLNet, TXL) hold any."""
    longest = int(batches.shards.lengths().max())
    declared = batches.shards.manifest.instance_format.get("max_seq_len")
    needed = max(longest, int(declared) if isinstance(declared, int) else 0)
    positions = getattr(arch_config, "max_position_embeddings", None)  # None: relative positions
    if positions is not None and positions < needed:
        raise ConfigError(
            f"model.max_position_embeddings={positions} is shorter than the sequences in {manifest_path} "
            f"(max_seq_len {declared}, longest instance {longest}); raise it to >= {needed}"
        )
    return needed


def triton_c_compiler(environ=os.environ, which=shutil.which) -> str | None:
    """The C compiler Triton builds its kernel launchers with the first time it runs a kernel (CC if set, else gcc,
    else clang, the order of triton/runtime/build.py); None when there is none."""
    cc = environ.get("CC")
    if cc:
        return which(cc)
    return which("gcc") or which("clang")


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def compiler_problem(device_type: str) -> str | None:
    """Why pretrain.compile cannot run on this machine for `device_type` ("cpu" or "cuda"), in one line; None when
    it can. Inductor writes C++ kernels on the CPU (g++, or CXX) and Triton kernels on CUDA, whose launchers Triton
    builds with a C compiler the first time it runs one (gcc, clang, or CC)."""
    if device_type == "cuda":
        if not triton_installed():
            return ("pretrain.compile on CUDA needs Triton (torch's CUDA wheels bring it as a dependency), and it is "
                    "not installed: reinstall torch's CUDA build, or set pretrain.compile: false")
        if triton_c_compiler() is None:
            cc = os.environ.get("CC")
            found = f"CC={cc} is not an executable on PATH" if cc else "neither gcc nor clang is on PATH"
            return (f"pretrain.compile on CUDA needs a C compiler for Triton's kernel launchers, and {found}: "
                    f"install gcc (apt-get install gcc), set CC, or set pretrain.compile: false")
    elif device_type == "cpu":
        from torch._inductor import config as inductor_config
        from torch._inductor.cpp_builder import get_cpp_compiler
        from torch._inductor.exc import InvalidCxxCompiler

        try:
            get_cpp_compiler()
        except InvalidCxxCompiler:
            tried = [c for c in inductor_config.cpp.cxx if c is not None]
            return (f"pretrain.compile on the CPU needs a C++ compiler for inductor's kernels, and none of {tried} "
                    f"runs: install g++ (apt-get install g++), set CXX, or set pretrain.compile: false")
    return None


def check_compiler(cfg: PretrainConfig, device: torch.device) -> None:
    """pretrain.compile needs a compiler beside Python (`compiler_problem`). Without one the first step fails deep
    inside inductor, after the data and the model are loaded; here it is refused at the start in one line (slim
    container images ship none: infra/docker/Dockerfile.cuda installs gcc and g++)."""
    if cfg.compile and (problem := compiler_problem(device.type)) is not None:
        raise ConfigError(problem)
