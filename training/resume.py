"""Where a pretraining run starts: nothing to do (final/ holds this config's result), the newest intact checkpoint
of this config, or step 0. On CPU a resumed run reproduces the uninterrupted loss curve exactly.

    done = completed_summary(paths, fingerprint)            # the recorded summary, or None
    resumed_from = resume_or_start(trainer, saver, cfg)     # the checkpoint's step, or None

A checkpoint whose files fail their recorded sha256 is skipped for the previous intact one (with a warning); none
intact -> refused. A checkpoint of another config is refused naming the differing fields (training/run_fingerprint.py).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_text, read_json_file

from .checkpoint import list_checkpoints, load_training_state, load_weights, MODEL_FILE, verify_checkpoint
from .pretrain_checkpoints import RunSaver
from .pretrain_config import PretrainConfig
from .run_fingerprint import check_compatible
from .run_layout import PretrainPaths
from .trainer import Trainer

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def completed_summary(paths: PretrainPaths, fingerprint: dict) -> dict | None:
    """final/ already holds the result of this config: its recorded summary (status "already complete")."""
    if not (paths.final / MODEL_FILE).is_file():
        return None
    check_compatible(paths.final, fingerprint, "final model")
    logger.info("pretrain: %s already holds the result of this config; nothing to do", paths.final)
    summary = read_json_file(paths.summary, f"no {paths.summary}") if paths.summary.is_file() else {}
    return {**summary, "status": "already complete"}


def remove_staging_leftovers(out_dir: Path) -> None:
    """Staging directories of a process that died mid-save are never complete; nothing reads them."""
    for pattern in (".final.staging-*", "checkpoints/.step-*.staging-*"):
        for leftover in out_dir.glob(pattern):
            logger.info("pretrain: removing unfinished %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)


def truncate_metrics(path: Path, keep_through_step: int) -> None:
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


def intact_checkpoint(checkpoints_dir: Path) -> tuple[int, Path] | None:
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


def resume_or_start(trainer: Trainer, saver: RunSaver, cfg: PretrainConfig) -> int | None:
    """Load the newest intact checkpoint of this config into `trainer` (stacked as deep as the run was at its
    step) and return its step; without one, start from scratch (None), dropping metrics of an earlier attempt."""
    paths, dist = saver.paths, saver.dist
    latest = intact_checkpoint(paths.checkpoints)
    if latest is None:
        if dist.is_main and paths.metrics.exists():  # left by a run that stopped before its first checkpoint
            paths.metrics.unlink()
        logger.info("pretrain: starting from scratch in %s", paths.out)
        return None
    step, directory = latest
    check_compatible(directory, saver.fingerprint, "checkpoint", cfg.allow_shard_change)
    if saver.stacking.replay(trainer, step):  # the checkpoint holds the model as deep as it was at its step
        saver.adopt(trainer)
    load_weights(saver.model, directory / MODEL_FILE)
    trainer.load_state_dict(load_training_state(directory))
    if dist.is_main:
        truncate_metrics(paths.metrics, step)
    logger.warning("pretrain: resuming from step %d (checkpoint %s; %d steps in total)", step, directory,
                   cfg.max_steps)
    return step
