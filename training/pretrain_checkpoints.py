"""What a pretraining run saves: a resumable checkpoint every pretrain.save_every steps and where a raised max_steps
would branch off (a wsd schedule's decay start; the trainer's step-end callback, which also applies progressive
stacking) and, at the end, final/ with summary.json and the loss curve.

    saver = RunSaver(paths, cfg, dist, fingerprint, stacking, model, arch_config)
    trainer.train(on_step_end=saver.on_step_end)
    saver.save_final(trainer, summary)

Under torchrun every rank takes part (FSDP gathers the full weights and optimiser state from all of them; a memory
carried across batches is gathered too); rank 0 writes. `saver.model` / `saver.arch_config` are the model as it
stands: progressive stacking replaces it with a deeper one.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from bertfactory.io import atomic_write_json, content_hash

from .checkpoint import save_checkpoint, save_pretrained
from .extend import branch_step
from .distributed import DistContext
from .fsdp import full_model_state, is_sharded
from .loss_curve import write_loss_curve
from .pretrain_config import PretrainConfig
from .run_layout import PretrainPaths
from .stacking import StackingSchedule
from .trainer import Trainer

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


class RunSaver:
    def __init__(self, paths: PretrainPaths, cfg: PretrainConfig, dist: DistContext, fingerprint: dict,
                 stacking: StackingSchedule, model: torch.nn.Module, arch_config: Any):
        self.paths = paths
        self.cfg = cfg
        self.dist = dist
        self.fingerprint = fingerprint
        self.stacking = stacking
        self.model = model
        self.arch_config = arch_config
        # the end of a wsd schedule's stable phase (of a constant one: the last step): a raised max_steps continues
        # exactly from a checkpoint there, so one is written even off the save_every cadence. Not for schedules
        # that stretch with max_steps, whose shared steps end with the warmup (a checkpoint that early saves nothing)
        branch = branch_step(cfg.trajectory_fields())
        self.branch_step = branch if cfg.warmup_steps < branch <= cfg.max_steps else None

    def adopt(self, trainer: Trainer) -> None:
        """Take the trainer's model (and the depth its config records) after stacking replaced it."""
        self.model, self.arch_config = trainer.module, trainer.module.config

    def provenance(self, trainer: Trainer) -> dict[str, Any]:
        """config.json's `training` of a checkpoint or final/: where training stood and under which fingerprint."""
        return {"step": trainer.step, "tokens_seen": trainer.tokens_seen, "fingerprint": self.fingerprint,
                "fingerprint_sha256": content_hash(self.fingerprint), "metrics": dict(trainer.last_metrics)}

    def on_step_end(self, trainer: Trainer) -> None:
        """Stack when due, then write a checkpoint every save_every steps and at the branch step (the last one any
        longer run shares), but not at max_steps when nothing longer continues from there (final/ is written)."""
        if self.stacking.stack_if_due(trainer):  # progressive stacking: the deeper model replaces the trainer's
            self.adopt(trainer)
        due = trainer.step % self.cfg.save_every == 0 and trainer.step < self.cfg.max_steps
        if not (due or trainer.step == self.branch_step):
            return
        self.dist.barrier()  # every rank has finished the step before rank 0 snapshots it
        sharded = is_sharded(self.model)  # FSDP: every rank takes part in gathering the full state
        weights = full_model_state(self.model) if sharded else None
        # a memory carried across batches is gathered from every rank too (Trainer.state_dict)
        state = trainer.state_dict() if sharded or self.dist.is_main or trainer.carries_memory else None
        if self.dist.is_main:
            path = save_checkpoint(self.paths.checkpoints, trainer.step, self.model, self.arch_config,
                                   self.paths.tokenizer, self.provenance(trainer), state, self.cfg.keep_last,
                                   self.cfg.keep_best_by, weights=weights, also=(self.paths.metrics,))
            logger.info("pretrain: checkpoint %s", path)
        self.dist.barrier()  # nobody runs ahead (or resumes) while the checkpoint is being written

    def save_final(self, trainer: Trainer, summary: dict) -> None:
        """final/ (model, config, tokenizer), summary.json and loss_curve.png; a collective under FSDP."""
        weights = full_model_state(self.model) if is_sharded(self.model) else None
        if self.dist.is_main:
            set_aside_final(self.paths)  # an extended run's shorter final/: moved aside, never overwritten
            save_pretrained(self.model, self.arch_config, self.paths.tokenizer, self.paths.final,
                            training=self.provenance(trainer), weights=weights)
            atomic_write_json(self.paths.summary, summary)
            write_loss_curve(self.paths.metrics, self.paths.loss_curve)
        self.dist.barrier()


def set_aside_final(paths: PretrainPaths) -> None:
    """Move an existing final/ (the result of an earlier, shorter run that this one extends) to
    final.replaced-<time>-step<N>/ beside it; `bertfactory clean` deletes such folders when asked."""
    from bertfactory.replaced import replaced_name

    if not (paths.final / "config.json").is_file():
        return
    try:
        from .checkpoint import read_checkpoint_config

        step = read_checkpoint_config(paths.final).get("training", {}).get("step")
    except Exception:  # noqa: BLE001 - an unreadable config: still moved aside, named without its step
        step = None
    target = paths.final.with_name(replaced_name(paths.final.name, f"step{step}" if step is not None else "old"))
    paths.final.rename(target)
    logger.warning("pretrain: the earlier final model moved to %s", target)
