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

`pretrain` tells the story of a run; each chapter is its own module: the checks (recipe_checks, run_checks), the
data (pretrain_data), the model (pretrain_model), the trainer (pretrain_trainer), where to start (resume, with
run_fingerprint), what is saved (pretrain_checkpoints) and reported (pretrain_summary).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from .backends import resolve_device
from .config import ModelConfig
from .distributed import from_environment
from .optim import scheduler_from_config
from .pretrain_checkpoints import RunSaver
from .pretrain_config import PretrainConfig
from .pretrain_data import open_training_data
from .pretrain_model import build_model
from .pretrain_summary import log_plan, run_summary
from .pretrain_trainer import build_trainer
from .recipe_checks import check_model_and_pretrain
from .resume import completed_summary, remove_staging_leftovers, resume_or_start
from .run_checks import check_compiler, check_process_layout
from .run_fingerprint import run_fingerprint
from .run_layout import PretrainPaths
from .stacking import StackingSchedule

logger = logging.getLogger(__name__)


def run_pretrain(model: ModelConfig, cfg: PretrainConfig, run_dir: Path) -> dict:
    """Pretrain on RUN/shards (train split) and write RUN/pretrain; returns the summary (also in
    RUN/pretrain/summary.json)."""
    return pretrain(model, cfg, Path(run_dir))


def pretrain(model_cfg: ModelConfig, cfg: PretrainConfig, run_dir: Path, stop_after: int | None = None) -> dict:
    """run_pretrain, plus `stop_after`: stop (without writing final/) once that many steps are done in total,
    as an interruption would — for tests of resuming and for training in slices."""
    check_model_and_pretrain(model_cfg, cfg)  # a recipe checked this at load time; direct callers too
    paths = PretrainPaths(Path(run_dir))
    tokenizer_sha256 = paths.tokenizer_sha256()
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    dist, device = from_environment(resolve_device(cfg.device, cfg.xla_cache_dir, cfg.xla_spmd))
    spmd_devices = check_process_layout(cfg, dist, device)
    check_compiler(cfg, device)

    data = open_training_data(model_cfg, cfg, paths, tokenizer_sha256, dist)
    fingerprint = run_fingerprint(model_cfg, cfg, tokenizer_sha256, data.batches)
    if (done := completed_summary(paths, fingerprint)) is not None:
        dist.shutdown()
        return done

    if dist.is_main:
        remove_staging_leftovers(paths.out)
    model = build_model(data, cfg, device, dist, tokenizer_sha256, paths.tokenizer)
    trainer = build_trainer(model, model_cfg, cfg, data, device, dist, paths, spmd_devices)
    stacking = StackingSchedule(cfg.stacking, data.arch_config, lambda opt: scheduler_from_config(opt, cfg),
                                cfg.compile)
    saver = RunSaver(paths, cfg, dist, fingerprint, stacking, model, data.arch_config)
    resumed_from = resume_or_start(trainer, saver, cfg)
    log_plan(saver.model, data.batches, cfg, device)

    trainer.train(stop_after=stop_after, on_step_end=saver.on_step_end)
    summary = run_summary(trainer, saver, data.batches, cfg, device, spmd_devices, resumed_from)
    if trainer.step >= cfg.max_steps:
        saver.save_final(trainer, summary)
        logger.info("pretrain: done, final model in %s (loss %s)", paths.final, summary.get("loss"))
    dist.shutdown()
    return summary
