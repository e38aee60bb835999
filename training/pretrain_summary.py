"""What a pretraining run reports: the plan logged before the first step, and the summary returned at the end (and
written to RUN/pretrain/summary.json with final/).

    log_plan(model, batches, cfg, device)
    summary = run_summary(trainer, saver, batches, cfg, device, spmd_devices, resumed_from)
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from .backends import describe
from .checkpoint import best_checkpoint
from .fsdp import local_parameter_count
from .pretrain_checkpoints import RunSaver
from .pretrain_config import PretrainConfig
from .trainer import Trainer

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def log_plan(model: torch.nn.Module, batches, cfg: PretrainConfig, device: torch.device) -> None:
    logger.info(
        "pretrain: %s parameters, %d train instances, %d steps/epoch, %d steps (%.2f epochs), batch %d, device %s",
        f"{model.num_parameters():,}", batches.rows, batches.steps_per_epoch, cfg.max_steps,
        cfg.max_steps / batches.steps_per_epoch, cfg.batch_size, describe(device),
    )
    if (note := warmup_past_the_end(cfg)) is not None:
        logger.warning("pretrain: %s", note)


def warmup_past_the_end(cfg: PretrainConfig) -> str | None:
    """The warning for a warmup as long as the run (a paper recipe's 10,000 warmup steps tried with
    --set pretrain.max_steps=200): the learning rate rises for every step and never reaches its peak."""
    if cfg.warmup_steps < cfg.max_steps:
        return None
    return (f"warmup_steps {cfg.warmup_steps:,} >= max_steps {cfg.max_steps:,}: the learning rate rises for the "
            f"whole run and never reaches learning_rate {cfg.learning_rate:g}; a run this short wants a shorter "
            f"warmup, e.g. --set pretrain.warmup_steps={max(1, cfg.max_steps // 10)} (10 % of the steps)")


def run_summary(trainer: Trainer, saver: RunSaver, batches, cfg: PretrainConfig, device: torch.device,
                spmd_devices: int, resumed_from: int | None) -> dict[str, Any]:
    """status ("trained" at max_steps, else "stopped"), where training stood, the last window's losses and
    accuracies, throughput, sizes and the best checkpoint by pretrain.keep_best_by."""
    model, seconds = saver.model, trainer.train_seconds
    summary = {
        "status": "trained" if trainer.step >= cfg.max_steps else "stopped",
        "steps": trainer.step,
        "max_steps": cfg.max_steps,
        "resumed_from_step": resumed_from,
        # every objective's losses and accuracies of the last metrics window (mlm_loss, sop_acc, disc_loss, ...)
        **{k: v for k, v in trainer.last_metrics.items() if k == "loss" or k.endswith(("_loss", "_acc"))},
        "tokens": trainer.tokens_seen,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(trainer.tokens_seen / seconds, 1) if seconds else None,
        "parameters": model.num_parameters(),
        "parameters_on_this_rank": local_parameter_count(model),  # its shards under FSDP
        "vocab_size": saver.arch_config.vocab_size,
        "train_instances": batches.rows,
        "epochs": round(trainer.step / batches.steps_per_epoch, 4),
        "device": str(device),
        "final_dir": str(saver.paths.final),
        "world_size": saver.dist.world_size,
    }
    if cfg.xla_spmd:
        summary["xla_spmd_devices"] = spmd_devices
    if cfg.keep_best_by and (best := best_checkpoint(saver.paths.checkpoints, cfg.keep_best_by)) is not None:
        summary["best_checkpoint"] = {"step": best[0], "path": str(best[1]), cfg.keep_best_by: best[2]}
    return summary
