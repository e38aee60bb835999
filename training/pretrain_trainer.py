"""The trainer of a pretraining run: the optimiser and schedule a PretrainConfig asks for (training/optim.py), the
step guard, and the TrainerSettings derived from the config and the run (metrics path, FLOPs per token for the MFU,
the XLA batch width), and the head warm-up of pretrain.freeze_encoder_steps (training/freeze.py).

    trainer = build_trainer(model, model_cfg, cfg, data, device, dist, paths, spmd_devices)
"""

from __future__ import annotations

import torch

from .config import ModelConfig
from .distributed import DistContext
from .flops import shard_mask_rate, train_flops_per_token
from .freeze import install_encoder_freeze
from .optim import optimizer_from_config, scheduler_from_config
from .pretrain_config import PretrainConfig
from .pretrain_data import TrainingData
from .run_layout import PretrainPaths
from .step_guard import StepGuard
from .trainer import Trainer
from .tracking import TENSORBOARD_DIR
from .trainer_settings import TrainerSettings


def train_flops(model_cfg: ModelConfig, cfg: PretrainConfig, data: TrainingData, world_size: int) -> float | None:
    """The objective's own FLOPs per trained token (training/flops.py) at the shards' mean length and mask rate;
    None without pretrain.peak_flops (no MFU to compute)."""
    if not cfg.peak_flops:
        return None
    manifest = data.batches.shards.manifest
    split = manifest.splits["train"]
    mean_len = split.tokens / split.rows
    masked = manifest.masking.get("masked_lm_prob", manifest.masking.get("mask_prob", 0.15))
    return train_flops_per_token(
        model_cfg, cfg.objective, manifest.tokenizer.vocab_size, mean_len,
        shard_mask_rate(float(masked), manifest.masking.get("max_predictions_per_seq"), mean_len),
        rows_per_batch=max(1, cfg.batch_size // (cfg.grad_accumulation * world_size)), steps=cfg.max_steps,
        memory_across_batches=cfg.stream_batches)


def trainer_settings(model_cfg: ModelConfig, cfg: PretrainConfig, data: TrainingData, device: torch.device,
                     dist: DistContext, paths: PretrainPaths, spmd_devices: int) -> TrainerSettings:
    xla_width = 0 if cfg.length_buckets else data.sequence_length  # 0: each bucket's own width
    return TrainerSettings(
        max_steps=cfg.max_steps, metrics_path=paths.metrics, max_grad_norm=cfg.max_grad_norm,
        log_every=cfg.log_every, bf16=cfg.bf16, grad_accumulation=cfg.grad_accumulation,
        loader_workers=cfg.loader_workers, train_flops_per_token=train_flops(model_cfg, cfg, data, dist.world_size),
        peak_flops=cfg.peak_flops * spmd_devices if cfg.peak_flops else None,  # SPMD: one process, several devices
        static_width=xla_width if device.type == "xla" else None,
        cudagraphs=cfg.compile and cfg.compile_mode == "reduce-overhead",
        real_tokens_first=cfg.unpad and cfg.unpad_layout == "fixed",
        tracking=cfg.tracking.target(paths.out / TENSORBOARD_DIR, f"{paths.run_dir.resolve().name}/pretrain"))


def build_trainer(model: torch.nn.Module, model_cfg: ModelConfig, cfg: PretrainConfig, data: TrainingData,
                  device: torch.device, dist: DistContext, paths: PretrainPaths, spmd_devices: int) -> Trainer:
    optimizer = optimizer_from_config(model, cfg)
    scheduler = scheduler_from_config(optimizer, cfg)
    paths.out.mkdir(parents=True, exist_ok=True)
    guard = StepGuard(cfg.spike_factor, cfg.max_skipped_steps, cfg.max_consecutive_skipped_steps)
    settings = trainer_settings(model_cfg, cfg, data, device, dist, paths, spmd_devices)
    # pretrain.freeze_encoder_steps (training/freeze.py): installed before the Trainer, whose first freeze sees it;
    # the optimiser above holds every parameter, the frozen ones just get no gradient until the warm-up ends
    freeze = install_encoder_freeze(model, cfg.freeze_encoder_steps)
    trainer = Trainer(model, optimizer, scheduler, data.batches, data.objective.loss, device, settings, dist=dist,
                      guard=guard)
    if freeze is not None:
        freeze.follow(trainer)
    return trainer
