"""The training loop shared by every objective: batches -> objective(model, batch) -> backward -> clip ->
AdamW step -> schedule step, with windowed metrics appended to metrics.jsonl, a tqdm progress bar and periodic
checkpoints. Everything that decides the trajectory (weights, optimizer, scheduler, RNG states, data position,
the open metrics window) is in `state_dict()`, so a run resumed from a checkpoint continues bit-for-bit on CPU.

Used by training.pretrain (`run_pretrain`); see there for how it is wired.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from bertfactory.io import append_jsonl

from .backends import autocast_context
from .checkpoint import FORMAT_VERSION, rng_state, set_rng_state
from .data import PretrainBatches
from .objectives import Objective
from .optim import clip_gradients

logger = logging.getLogger(__name__)

def _is_loss(key: str) -> bool:
    """Losses an objective reports (`loss`, `mlm_loss`, `disc_loss`, ...): averaged per step into metrics.jsonl."""
    return key == "loss" or key.endswith("_loss")


def _is_count(key: str) -> bool:
    """`<name>_correct` / `<name>_count` pairs: summed over the window, reported as `<name>_acc`."""
    return key.endswith("_correct") or key.endswith("_count")


@dataclass
class Window:
    """Sums over the steps since the last metrics line."""

    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    mlm_correct: int = 0
    mlm_count: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # other objectives' *_correct / *_count

    def add(self, out: dict, tokens: int, seconds: float) -> None:
        self.steps += 1
        self.tokens += tokens
        self.seconds += seconds
        for key, value in out.items():
            if value is None:
                continue
            if _is_loss(key):
                self.sums[key] = self.sums.get(key, 0.0) + float(value)
            elif key == "mlm_correct":
                self.mlm_correct += int(value)
            elif key == "mlm_count":
                self.mlm_count += int(value)
            elif _is_count(key):
                self.counts[key] = self.counts.get(key, 0) + int(value)

    def means(self) -> dict[str, float]:
        means = {key: value / self.steps for key, value in self.sums.items()}
        if self.mlm_count:
            means["mlm_acc"] = self.mlm_correct / self.mlm_count
        for key, count in sorted(self.counts.items()):
            name = key[: -len("_count")]
            if key.endswith("_count") and count:
                means[f"{name}_acc"] = self.counts.get(f"{name}_correct", 0) / count
        means["tokens_per_s"] = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return means

    def to_state(self) -> dict[str, Any]:
        return {"steps": self.steps, "tokens": self.tokens, "seconds": self.seconds, "mlm_correct": self.mlm_correct,
                "mlm_count": self.mlm_count, "sums": dict(self.sums), "counts": dict(self.counts)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Window":
        return cls(**{**state, "sums": dict(state["sums"]), "counts": dict(state.get("counts", {}))})


class Trainer:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, batches: PretrainBatches,
                 objective: Objective, device: torch.device, max_steps: int, max_grad_norm: float,
                 log_every: int, metrics_path: Path, bf16: bool = False):
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.batches = batches
        self.objective = objective
        self.device = device
        self.max_steps = max_steps
        self.max_grad_norm = max_grad_norm
        self.log_every = log_every
        self.metrics_path = metrics_path
        self.autocast = autocast_context(device, bf16)
        self.step = 0  # optimiser steps completed
        self.tokens_seen = 0
        self.train_seconds = 0.0
        self.window = Window()
        self.last_metrics: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        pos = self.batches.position(self.step)
        return {
            "version": FORMAT_VERSION,
            "step": self.step,
            "data": {"next_step": self.step, "epoch": pos.epoch, "batch_in_epoch": pos.batch_in_epoch,
                     "variant": pos.variant, "batch_size": self.batches.batch_size, "seed": self.batches.seed},
            "tokens_seen": self.tokens_seen,
            "train_seconds": self.train_seconds,
            "window": self.window.to_state(),
            "last_metrics": dict(self.last_metrics),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.tokens_seen = int(state["tokens_seen"])
        self.train_seconds = float(state["train_seconds"])
        self.window = Window.from_state(state["window"])
        self.last_metrics = dict(state.get("last_metrics", {}))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])

    # -------------------------------------------------------------------------------------------- loop

    def train_step(self, batch: dict[str, torch.Tensor]) -> dict:
        self.model.train()
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        with self.autocast:
            out = self.objective(self.model, batch)
        out["loss"].backward()
        clip_gradients(self.model, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        scalars = {k: v for k, v in out.items() if v is not None and (_is_loss(k) or _is_count(k))
                   and not (isinstance(v, torch.Tensor) and v.dim() != 0)}
        tensors = [k for k, v in scalars.items() if isinstance(v, torch.Tensor) and v.dim() == 0]
        if tensors:  # one device->host copy for all of them (float64 holds float32 losses and int64 counts exactly)
            values = torch.stack([scalars[k].detach().to(torch.float64) for k in tensors]).tolist()
            scalars.update(zip(tensors, values))
        return scalars

    def _log(self) -> None:
        record = {"step": self.step, "lr": self.scheduler.get_last_lr()[0], "tokens": self.tokens_seen,
                  "epoch": round(self.step / self.batches.steps_per_epoch, 4), **self.window.means()}
        append_jsonl(self.metrics_path, [record])
        self.last_metrics = record
        self.window = Window()
        logger.info("step %d/%d loss %.4f mlm_acc %.4f lr %.3g %.0f tokens/s", self.step, self.max_steps,
                    record.get("loss", float("nan")), record.get("mlm_acc", float("nan")), record["lr"],
                    record["tokens_per_s"])

    def train(self, stop_after: int | None = None,
              on_step_end: Callable[["Trainer"], None] | None = None) -> None:
        """Run from self.step to max_steps (or to `stop_after` steps in total, e.g. to stop early on purpose).
        `on_step_end` is called after every step (checkpointing lives there)."""
        end = self.max_steps if stop_after is None else min(self.max_steps, stop_after)
        bar = tqdm(total=self.max_steps, initial=self.step, desc="pretrain", unit="step", disable=None,
                   dynamic_ncols=True)
        try:
            while self.step < end:
                started = time.perf_counter()
                batch = self.batches.batch(self.step)
                tokens = int(batch["attention_mask"].sum())
                out = self.train_step(batch)
                seconds = time.perf_counter() - started
                self.step += 1
                self.tokens_seen += tokens
                self.train_seconds += seconds
                self.window.add(out, tokens, seconds)
                bar.update(1)
                bar.set_postfix(loss=f"{out['loss']:.3f}", tok_s=f"{tokens / seconds:.0f}", refresh=False)
                if self.step % self.log_every == 0 or self.step == self.max_steps:
                    self._log()
                if on_step_end is not None:
                    on_step_end(self)
        finally:
            bar.close()
