"""TrainerSettings: the plain values that steer training.trainer.Trainer's loop (how long, how to clip, log,
account and feed it), kept apart from its collaborators (model, optimiser, scheduler, batches, objective, device,
distributed context, step guard).

    settings = TrainerSettings(max_steps=1000, metrics_path=Path("run/pretrain/metrics.jsonl"), log_every=50)
    trainer = Trainer(model, optimizer, scheduler, batches, objective, device, settings)

Pretraining derives them from a PretrainConfig (training/pretrain_trainer.py `trainer_settings`); distillation and the
benchmarks fill in the few they need and leave the rest at these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .tracking import TrackingTarget


@dataclass(frozen=True)
class TrainerSettings:
    """Values the training loop reads but never changes."""

    max_steps: int
    """optimiser steps in total: Trainer.train runs from its current step up to this one"""
    metrics_path: Path
    """metrics.jsonl: one record appended every `log_every` steps (and at max_steps), by rank 0 only"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this value before every update"""
    log_every: int = 100
    """steps per metrics window (averages of the window's losses, accuracies and throughput)"""
    bf16: bool = False
    """bf16 autocast on CUDA; ignored elsewhere (CPU trains in fp32 for exact reproducibility)"""
    grad_accumulation: int = 1
    """micro-batches per optimiser step (training/accumulation.py): must divide the per-process batch"""
    loader_workers: int = 0
    """threads building the next steps' batches (training/prefetch.py); 0 = built in the loop. Same batches"""
    train_flops_per_token: float | None = None
    """model FLOPs per trained token (training/flops.py), for the metrics' mfu; None = mfu null"""
    peak_flops: float | None = None
    """peak FLOP/s of one process's device(s) (all SPMD devices together on XLA); None = mfu null"""
    static_width: int | None = None
    """XLA: pad every batch to this many positions (0 = the loader's bucket width); None off XLA"""
    tracking: TrackingTarget | None = None
    """where each metrics.jsonl record also goes (training/tracking.py: TensorBoard, MLflow); None = nowhere else"""
    cudagraphs: bool = False
    """the model runs under CUDA graphs (pretrain.compile_mode reduce-overhead), whose every replay overwrites what
    the previous one returned: each micro-step starts a new replay and the trainer copies what it keeps past the
    micro-step (its scalars, the gradients summed over micro-steps) into tensors of its own (training/trainer.py)"""
    real_tokens_first: bool = False
    """every batch row must hold its real tokens first, padding at the end (pretrain.unpad_layout fixed, whose
    layout the device builds without checking it): the trainer checks each batch's attention_mask on the host,
    where it already is, and stops at the first row that breaks it"""

    def __post_init__(self) -> None:
        for name in ("max_steps", "log_every", "grad_accumulation"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainerSettings.{name} must be >= 1 (got {getattr(self, name)})")
        if self.loader_workers < 0:
            raise ValueError(f"TrainerSettings.loader_workers must be >= 0 (got {self.loader_workers})")
        if not self.max_grad_norm > 0:
            raise ValueError(f"TrainerSettings.max_grad_norm must be > 0 (got {self.max_grad_norm})")
