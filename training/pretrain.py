"""The pretraining stage: RUN/tokenizer + RUN/shards -> RUN/pretrain/{metrics.jsonl, checkpoints/step-N/, final/}.

    from training.pretrain import run_pretrain
    summary = run_pretrain(recipe.model, recipe.pretrain, Path("runs/local"))
    # or: bertfactory pretrain configs/local.yaml --run-dir runs/local

Rerunning on the same run directory resumes from the newest checkpoint (and refuses one written under another
config, naming the differing fields); when RUN/pretrain/final/ already holds the result of the same config it
returns the recorded summary without training. On CPU a resumed run reproduces the uninterrupted loss curve
exactly. A checkpoint whose files fail their recorded sha256 is skipped for the previous intact one (with a
warning); none intact -> refused. Shards changed since the checkpoint are refused unless
pretrain.allow_shard_change. Under torchrun every process trains its slice of each global batch
(training/distributed.py; with pretrain.parallelism fsdp on a sharded model, training/fsdp.py) and rank 0
writes. The end writes RUN/pretrain/loss_curve.png.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import atomic_write_json, atomic_write_text, content_hash, read_json_file, sha256_file

from .backends import describe, resolve_device
from .batch_ramp import RampedBatches
from .checkpoint import (best_checkpoint, CONFIG_FILE, fingerprint_diff, list_checkpoints, load_training_state,
                         load_weights, MODEL_FILE, read_checkpoint_config, save_checkpoint, save_pretrained,
                         verify_checkpoint)
from .config import ModelConfig
from .pretrain_config import PretrainConfig
from .data import PretrainBatches
from .streams import StreamBatches
from .flops import shard_mask_rate, train_flops_per_token
from .distributed import from_environment
from .loss_curve import write_loss_curve
from .fsdp import full_model_state, is_sharded, local_parameter_count, shard_model
from .models.registry import get_architecture
from .objectives import get_objective_spec
from .optim import optimizer_from_config, scheduler_from_config
from .stacking import StackingSchedule
from .step_guard import StepGuard
from .trainer import Trainer, freeze_untrained

logger = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _fingerprint(model: ModelConfig, cfg: PretrainConfig, tokenizer_sha256: str, batches: PretrainBatches) -> dict:
    """Everything that decides the training trajectory; a checkpoint resumes only under an equal fingerprint."""
    manifest = batches.shards.manifest
    return json.loads(json.dumps({
        "model": model.model_dump(mode="json"),
        "pretrain": cfg.trajectory_fields(),
        "data": {"tokenizer_sha256": tokenizer_sha256,
                 "train_shards_sha256": content_hash([s.sha256 for s in manifest.splits["train"].shards])},
    }))


# the value every config field takes when a recipe leaves it out: a field a checkpoint predates is equal to it
_FINGERPRINT_DEFAULTS = {"model": ModelConfig().model_dump(mode="json"),
                         "pretrain": PretrainConfig().trajectory_fields()}


_SHARDS_FIELD = "data.train_shards_sha256"


def _check_compatible(directory: Path, current: dict, what: str, allow_shard_change: bool = False) -> None:
    saved = read_checkpoint_config(directory).get("training", {}).get("fingerprint")
    if saved is None:
        raise ContractError(f"{directory / CONFIG_FILE} has no 'training.fingerprint'; it was not written by pretraining")
    diffs = fingerprint_diff(saved, current, defaults=_FINGERPRINT_DEFAULTS)
    shard_diffs = [d for d in diffs if d.startswith(_SHARDS_FIELD + " ")]
    diffs = [d for d in diffs if d not in shard_diffs]
    if shard_diffs and not diffs:
        if not allow_shard_change:
            raise ContractError(
                f"the train shards changed since {what} {directory} was written (the sha256 over the manifest's shard "
                f"hashes differs: {shard_diffs[0][len(_SHARDS_FIELD) + 1:]}); refusing to resume on other data. "
                "Continue on the new shards anyway with pretrain.allow_shard_change: true (--set "
                "pretrain.allow_shard_change=true), or restore the old shards, or use another --run-dir"
            )
        logger.warning("pretrain: the train shards changed since %s; continuing on the new shards because "
                       "pretrain.allow_shard_change is set (the data order is no longer the checkpoint's)", directory)
    if diffs:
        raise ContractError(
            f"{what} {directory} was written under a different config; refusing to continue it. Differing: "
            + "; ".join(diffs)
            + f". Use another --run-dir, or delete {directory.parents[1] if what == 'checkpoint' else directory.parent} "
            "to start over."
        )


def _warm_start(model: torch.nn.Module, directory: Path, architecture: str, tokenizer_sha256: str) -> None:
    """pretrain.init_from: the weights of another model directory of the same architecture and tokenizer."""
    doc = read_checkpoint_config(directory)
    if doc["architecture"] != architecture:
        raise ConfigError(f"pretrain.init_from {directory} holds a {doc['architecture']}, but objective trains a "
                          f"{architecture}")
    if doc["tokenizer"]["sha256"] != tokenizer_sha256:
        raise ConfigError(f"pretrain.init_from {directory} was trained with another tokenizer (sha256 "
                          f"{doc['tokenizer']['sha256']}) than the shards' ({tokenizer_sha256}); token ids would differ")
    load_weights(model, directory / MODEL_FILE)
    logger.info("pretrain: starting from the weights of %s", directory)


def _remove_staging_leftovers(out_dir: Path) -> None:
    """Staging directories of a process that died mid-save are never complete; nothing reads them."""
    for pattern in (".final.staging-*", "checkpoints/.step-*.staging-*"):
        for leftover in out_dir.glob(pattern):
            logger.info("pretrain: removing unfinished %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def _truncate_metrics(path: Path, keep_through_step: int) -> None:
    """Drop metrics lines logged after the checkpoint we resume from (they will be logged again), including a
    last line torn by a process that died while appending it."""
    if not path.is_file():
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            if number == len(lines):
                break
            raise ContractError(f"{path} line {number} is not a metrics record: {err}") from None
        if step <= keep_through_step:
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def _intact_checkpoint(checkpoints_dir: Path) -> tuple[int, Path] | None:
    """The newest checkpoint whose files match their recorded sha256; a damaged newer one is skipped with a
    warning (its files are left for inspection). Checkpoints exist but none is intact -> ContractError."""
    found = list_checkpoints(checkpoints_dir)
    problems = []
    for step, directory in reversed(found):
        try:
            verify_checkpoint(directory)
        except ContractError as err:
            problems.append(str(err))
            logger.warning("pretrain: NOT resuming from %s: %s; falling back to the previous checkpoint",
                           directory, err)
            continue
        return step, directory
    if found:
        raise ContractError("no intact checkpoint to resume from, refusing to load a damaged one: "
                            + "; ".join(problems) + f". Delete {checkpoints_dir} to start over")
    return None


def run_pretrain(model: ModelConfig, cfg: PretrainConfig, run_dir: Path) -> dict:
    """Pretrain on RUN/shards (train split) and write RUN/pretrain; returns the summary (also in
    RUN/pretrain/summary.json)."""
    return pretrain(model, cfg, Path(run_dir))


def pretrain(model_cfg: ModelConfig, cfg: PretrainConfig, run_dir: Path, stop_after: int | None = None) -> dict:
    """run_pretrain, plus `stop_after`: stop (without writing final/) once that many steps are done in total,
    as an interruption would — for tests of resuming and for training in slices."""
    tokenizer_path = run_dir / "tokenizer" / "tokenizer.json"
    shard_dir = run_dir / "shards"
    out_dir = run_dir / "pretrain"
    checkpoints_dir = out_dir / "checkpoints"
    final_dir = out_dir / "final"
    metrics_path = out_dir / "metrics.jsonl"
    summary_path = out_dir / "summary.json"
    if not tokenizer_path.is_file():
        raise ContractError(f"no tokenizer at {tokenizer_path}; run `bertfactory preprocess` on this run directory first")
    tokenizer_sha256 = sha256_file(tokenizer_path)

    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    dist, device = from_environment(resolve_device(cfg.device, cfg.xla_cache_dir, cfg.xla_spmd))
    if dist.enabled and device.type == "xla":
        raise ConfigError("pretrain.device xla trains in one process (several XLA devices through "
                          "pretrain.xla_spmd); one process per device (torchrun, torch_xla.launch) is not "
                          "implemented: launch without torchrun")
    spmd_devices = 1
    if cfg.xla_spmd:
        from .xla import spmd_devices as count_spmd_devices

        spmd_devices = count_spmd_devices()
        if cfg.batch_size % spmd_devices:
            raise ConfigError(f"pretrain.xla_spmd shards each batch over the {spmd_devices} XLA devices: "
                              f"pretrain.batch_size={cfg.batch_size} is not a multiple of {spmd_devices}")
    # stream_batches: clm shards as parallel document streams, for a memory carried across batches (training/streams.py)
    loader = StreamBatches if cfg.stream_batches else PretrainBatches
    batches = loader.open(shard_dir, tokenizer_sha256, cfg.batch_size, cfg.seed, verify=cfg.verify_shards,
                                   rank=dist.rank, world_size=dist.world_size, length_buckets=cfg.length_buckets,
                                   bucket_window=cfg.bucket_window)
    if cfg.length_buckets and cfg.batch_size_ramp is not None:
        raise ConfigError("pretrain.length_buckets and pretrain.batch_size_ramp cannot be combined (a ramped step "
                          "reads a span of the epoch's stream that bucket windows would reorder); use one")
    if batches.local_batch_size % cfg.grad_accumulation:
        per_rank = batches.local_batch_size
        raise ConfigError(
            f"each of the {dist.world_size} processes trains {per_rank} sequences per step (pretrain.batch_size="
            f"{cfg.batch_size} / world size {dist.world_size}), which pretrain.grad_accumulation={cfg.grad_accumulation} "
            f"does not divide into equal micro-batches. Make batch_size a multiple of world size x grad_accumulation "
            f"({dist.world_size * cfg.grad_accumulation}), or change grad_accumulation to a divisor of {per_rank}"
        )
    if cfg.batch_size_ramp is not None:
        batches = RampedBatches.from_config(batches, cfg.batch_size_ramp, cfg.grad_accumulation)
    manifest = batches.shards.manifest
    objective = get_objective_spec(cfg.objective)
    objective.check_shards(manifest, str(shard_dir / "manifest.json"))
    if objective.prepare_batches is not None:  # XLM: languages per row, the TLM pairs beside MLM (training/xlm_data.py)
        batches = objective.prepare_batches(batches, model_cfg, cfg, run_dir)
    architecture = get_architecture(objective.architecture)
    arch_config = objective.configure(
        architecture.from_model_config(model_cfg, manifest.tokenizer.vocab_size, batches.pad_id))
    longest = int(batches.shards.lengths().max())
    declared = manifest.instance_format.get("max_seq_len")
    needed = max(longest, int(declared) if isinstance(declared, int) else 0)
    positions = getattr(arch_config, "max_position_embeddings", None)  # None: relative positions (XLNet, TXL)
    if positions is not None and positions < needed:
        raise ConfigError(
            f"model.max_position_embeddings={arch_config.max_position_embeddings} is shorter than the sequences in "
            f"{shard_dir}/manifest.json (max_seq_len {declared}, longest instance {longest}); raise it to >= {needed}"
        )
    fingerprint = _fingerprint(model_cfg, cfg, tokenizer_sha256, batches)

    if (final_dir / MODEL_FILE).is_file():
        _check_compatible(final_dir, fingerprint, "final model")
        logger.info("pretrain: %s already holds the result of this config; nothing to do", final_dir)
        summary = read_json_file(summary_path, f"no {summary_path}") if summary_path.is_file() else {}
        dist.shutdown()
        return {**summary, "status": "already complete"}

    if dist.is_main:
        _remove_staging_leftovers(out_dir)
    seed_everything(cfg.seed)
    model = architecture.build(arch_config).to(device)
    if cfg.init_from:  # a resumed checkpoint below replaces these weights, as it replaces a random init
        _warm_start(model, Path(cfg.init_from), objective.architecture, tokenizer_sha256)
    if cfg.unpad:
        if not hasattr(model, "unpad_by_default"):
            raise ConfigError(f"pretrain.unpad is only implemented for BertForPreTraining (BERT, RoBERTa, ALBERT); "
                              f"objective {cfg.objective} trains {type(model).__name__}")
        model.unpad_by_default = True
    if cfg.static_shapes:
        if not hasattr(model, "static_shapes"):
            raise ConfigError(f"pretrain.static_shapes is only implemented for BertForPreTraining (BERT, RoBERTa, "
                              f"ALBERT); objective {cfg.objective} trains {type(model).__name__}")
        model.static_shapes = True
    if cfg.compile:
        model.compile()  # in place: parameter names and checkpoints stay those of the eager model
    if cfg.parallelism == "fsdp" and model_cfg.electra is not None and model_cfg.electra.two_stage:
        # measured: FSDP2's root unit leaves the two-stage generator's own embeddings sharded in its forward
        # (DTensor and Tensor mixed in aten.embedding); joint ELECTRA, which shares one embedding block, shards fine
        raise ConfigError("model.electra.two_stage is not supported with pretrain.parallelism fsdp (the generator's "
                          "own embeddings stay sharded in its forward); use parallelism ddp, or joint training")
    if cfg.grad_accumulation > 1 and model_cfg.electra is not None and model_cfg.electra.two_stage:
        # ElectraForPreTraining counts its generator-alone stage in forward passes, i.e. micro-batches
        raise ConfigError("pretrain.grad_accumulation > 1 is not supported with model.electra.two_stage (its "
                          "generator_steps count forward passes, not optimiser steps); use grad_accumulation 1")
    if cfg.parallelism == "fsdp":  # before the optimiser: it must hold the shards (training/fsdp.py)
        freeze_untrained(model)  # FSDP2 takes the frozen set at sharding (Trainer._sync_trainable)
        model = shard_model(model, dist, device, cfg.fsdp, cfg.bf16)
    optimizer = optimizer_from_config(model, cfg)
    scheduler = scheduler_from_config(optimizer, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_flops = None
    if cfg.peak_flops:  # the objective's own FLOPs (training/flops.py) at the shards' mean length and mask rate
        split = manifest.splits["train"]
        mean_len = split.tokens / split.rows
        masked = manifest.masking.get("masked_lm_prob", manifest.masking.get("mask_prob", 0.15))
        train_flops = train_flops_per_token(
            model_cfg, cfg.objective, manifest.tokenizer.vocab_size, mean_len,
            shard_mask_rate(float(masked), manifest.masking.get("max_predictions_per_seq"), mean_len),
            rows_per_batch=max(1, cfg.batch_size // (cfg.grad_accumulation * dist.world_size)), steps=cfg.max_steps,
            memory_across_batches=bool(getattr(cfg, "stream_batches", False)))
    trainer = Trainer(model, optimizer, scheduler, batches,
                      objective.loss, device, cfg.max_steps,
                      cfg.max_grad_norm, cfg.log_every, metrics_path, bf16=cfg.bf16, dist=dist,
                      train_flops_per_token=train_flops,
                      peak_flops=cfg.peak_flops * spmd_devices if cfg.peak_flops else None,
                      grad_accumulation=cfg.grad_accumulation,
                      guard=StepGuard(cfg.spike_factor, cfg.max_skipped_steps, cfg.max_consecutive_skipped_steps),
                      loader_workers=cfg.loader_workers, static_width=(0 if cfg.length_buckets else needed) if device.type == "xla" else None)
    stacking = StackingSchedule(cfg.stacking, arch_config, lambda opt: scheduler_from_config(opt, cfg), cfg.compile)

    resumed_from = None
    latest = _intact_checkpoint(checkpoints_dir)
    if latest is not None:
        step, directory = latest
        _check_compatible(directory, fingerprint, "checkpoint", cfg.allow_shard_change)
        if stacking.replay(trainer, step):  # the checkpoint holds the model as deep as it was at its step
            model, arch_config = trainer.module, trainer.module.config
        load_weights(model, directory / MODEL_FILE)
        trainer.load_state_dict(load_training_state(directory))
        resumed_from = step
        if dist.is_main:
            _truncate_metrics(metrics_path, step)
        logger.warning("pretrain: resuming from step %d (checkpoint %s; %d steps in total)", step, directory,
                       cfg.max_steps)
    else:
        if dist.is_main and metrics_path.exists():  # left by a run that stopped before its first checkpoint
            metrics_path.unlink()
        logger.info("pretrain: starting from scratch in %s", out_dir)
    logger.info(
        "pretrain: %s parameters, %d train instances, %d steps/epoch, %d steps (%.2f epochs), batch %d, device %s",
        f"{model.num_parameters():,}", batches.rows, batches.steps_per_epoch, cfg.max_steps,
        cfg.max_steps / batches.steps_per_epoch, cfg.batch_size, describe(device),
    )

    def provenance(t: Trainer) -> dict[str, Any]:
        return {"step": t.step, "tokens_seen": t.tokens_seen, "fingerprint": fingerprint,
                "fingerprint_sha256": content_hash(fingerprint), "metrics": dict(t.last_metrics)}

    def checkpoint_if_due(t: Trainer) -> None:
        nonlocal model, arch_config
        if stacking.stack_if_due(t):  # progressive stacking: the deeper model replaces the trainer's
            model, arch_config = t.module, t.module.config
        if t.step % cfg.save_every == 0 and t.step < cfg.max_steps:
            dist.barrier()  # every rank has finished the step before rank 0 snapshots it
            sharded = is_sharded(model)  # FSDP: every rank takes part in gathering the full state
            weights = full_model_state(model) if sharded else None
            # a memory carried across batches is gathered from every rank too (Trainer.state_dict)
            state = t.state_dict() if sharded or dist.is_main or t.carries_memory else None
            if dist.is_main:
                path = save_checkpoint(checkpoints_dir, t.step, model, arch_config, tokenizer_path, provenance(t),
                                       state, cfg.keep_last, cfg.keep_best_by, weights=weights)
                logger.info("pretrain: checkpoint %s", path)
            dist.barrier()  # nobody runs ahead (or resumes) while the checkpoint is being written

    trainer.train(stop_after=stop_after, on_step_end=checkpoint_if_due)
    summary = {
        "status": "trained" if trainer.step >= cfg.max_steps else "stopped",
        "steps": trainer.step,
        "max_steps": cfg.max_steps,
        "resumed_from_step": resumed_from,
        # every objective's losses and accuracies of the last metrics window (mlm_loss, sop_acc, disc_loss, ...)
        **{k: v for k, v in trainer.last_metrics.items() if k == "loss" or k.endswith(("_loss", "_acc"))},
        "tokens": trainer.tokens_seen,
        "seconds": round(trainer.train_seconds, 2),
        "tokens_per_s": round(trainer.tokens_seen / trainer.train_seconds, 1) if trainer.train_seconds else None,
        "parameters": model.num_parameters(),
        "parameters_on_this_rank": local_parameter_count(model),  # its shards under FSDP
        "vocab_size": arch_config.vocab_size,
        "train_instances": batches.rows,
        "epochs": round(trainer.step / batches.steps_per_epoch, 4),
        "device": str(device),
        "final_dir": str(final_dir),
        "world_size": dist.world_size,
    }
    if cfg.xla_spmd:
        summary["xla_spmd_devices"] = spmd_devices
    if cfg.keep_best_by and (best := best_checkpoint(checkpoints_dir, cfg.keep_best_by)) is not None:
        summary["best_checkpoint"] = {"step": best[0], "path": str(best[1]), cfg.keep_best_by: best[2]}
    if trainer.step < cfg.max_steps:
        dist.shutdown()
        return summary
    weights = full_model_state(model) if is_sharded(model) else None  # a collective under FSDP
    if dist.is_main:
        save_pretrained(model, arch_config, tokenizer_path, final_dir, training=provenance(trainer), weights=weights)
        atomic_write_json(summary_path, summary)
        write_loss_curve(metrics_path, out_dir / "loss_curve.png")
    dist.barrier()
    dist.shutdown()
    logger.info("pretrain: done, final model in %s (loss %s)", final_dir, summary.get("loss"))
    return summary
