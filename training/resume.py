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

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import atomic_write_text, read_json_file

from .checkpoint import (list_checkpoints, load_training_state, load_weights, missing_files, MODEL_FILE,
                         step_directories, verify_checkpoint)
from .pretrain_checkpoints import RunSaver
from .pretrain_config import PretrainConfig
from .extend import resumable_step
from .optim import reset_learning_rate
from .run_fingerprint import check_compatible, extends, saved_fingerprint
from .run_layout import PretrainPaths
from .trainer import Trainer

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def completed_summary(paths: PretrainPaths, fingerprint: dict) -> dict | None:
    """final/ already holds the result of this config: its recorded summary (status "already complete")."""
    if not (paths.final / MODEL_FILE).is_file():
        return None
    if extends(saved_fingerprint(paths.final), fingerprint):
        # a larger max_steps: the run goes on from a checkpoint (resume_or_start); the old final/ is moved aside
        # when the new one is saved (RunSaver.save_final), never deleted
        logger.info("pretrain: %s holds the result of fewer steps (max_steps raised to %d); extending the run",
                    paths.final, fingerprint["pretrain"]["max_steps"])
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
    found = step_directories(checkpoints_dir)
    problems = []
    for step, directory in reversed(found):
        try:
            if missing := missing_files(directory):
                # a checkpoint is published whole (checkpoint.save_checkpoint): a file of it was deleted or lost
                raise ContractError(" and ".join(f"{directory / name} is missing" for name in missing)
                                    + " (deleted or lost since the checkpoint was written)")
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
    latest, longer, failure = None, False, None
    try:
        latest = intact_checkpoint(paths.checkpoints)
        if latest is not None and extends(saved := saved_fingerprint(latest[1]), saver.fingerprint):
            latest, longer = _extension_checkpoint(paths, latest, saved, saver.fingerprint, cfg, dist.is_main), True
    except (ConfigError, ContractError) as err:  # said on every rank, not raised by this one alone (a hang)
        failure = err
    agree_on_resume_step(dist, latest[0] if latest is not None else None, failure)
    if latest is None:
        if dist.is_main and paths.metrics.exists():  # left by a run that stopped before its first checkpoint
            paths.metrics.unlink()
        logger.info("pretrain: starting from scratch in %s", paths.out)
        return None
    step, directory = latest
    check_compatible(directory, saver.fingerprint, "checkpoint", cfg.allow_shard_change, allow_longer=longer)
    if saver.stacking.replay(trainer, step):  # the checkpoint holds the model as deep as it was at its step
        saver.adopt(trainer)
    load_weights(saver.model, directory / MODEL_FILE)
    trainer.load_state_dict(load_training_state(directory))
    if longer:  # the rate from here on is the new budget's (equal to the saved one unless --extend)
        reset_learning_rate(trainer.scheduler)
        logger.warning("pretrain: extending the run from step %d to %d steps", step, cfg.max_steps)
    if dist.is_main:
        truncate_metrics(paths.metrics, step)
    logger.warning("pretrain: resuming from step %d (checkpoint %s; %d steps in total)", step, directory,
                   cfg.max_steps)
    return step


def agree_on_resume_step(dist, step: int | None, failure: Exception | None = None) -> None:
    """Every rank must continue from the same step (None: from scratch), or the job hangs at its first collective
    with the ranks a few steps apart. Each node chooses from its own copy of the checkpoints (a run on object
    storage: every machine's working copy), so a node whose copy differs is refused here, on every rank, in one
    line naming each rank's choice. (flows/run_sync.py drops checkpoints the bucket never completed, which is what
    made copies differ; this is the check that the choice agrees, whatever made it differ.) `failure`: why this rank
    cannot choose (no intact checkpoint, an extension its schedule refuses); raised here on this rank, and named on
    the others, which would otherwise wait for it at their next collective (DistContext.fail_together)."""
    import socket

    dist.fail_together(failure, "resume")
    chosen = dist.gather((step, socket.gethostname()))
    if len({s for s, _ in chosen}) > 1:
        raise ContractError("the ranks of this job would resume from different checkpoints: " + ", ".join(
            f"rank {rank} (host {host}) from {'scratch' if s is None else f'step {s}'}"
            for rank, (s, host) in enumerate(chosen))
            + "; their nodes hold different checkpoints (RUN/pretrain/checkpoints): give every node the same ones "
              "(on object storage each node's working copy follows the bucket) and start the job again")


def _extension_checkpoint(paths: PretrainPaths, newest: tuple[int, Path], saved: dict, current: dict,
                          cfg: PretrainConfig, is_main: bool = True) -> tuple[int, Path]:
    """The checkpoint a raised max_steps continues: the newest whose steps the new schedule leaves unchanged (or
    the newest with pretrain.extend); ConfigError naming the schedule when there is none (training/extend.py)."""
    from .extend import refusal, schedule_reason

    candidates = {s: d for s, d in list_checkpoints(paths.checkpoints) if s <= newest[0]}
    step = resumable_step(saved["pretrain"], current["pretrain"], sorted(candidates), cfg.extend)
    if step is None:
        raise ConfigError(refusal("pretrain.max_steps", saved["pretrain"]["max_steps"], cfg.max_steps, paths.out.parent,
                                  schedule_reason(saved["pretrain"], current["pretrain"], newest[0])))
    if step != newest[0]:
        verify_checkpoint(candidates[step])
        logger.warning("pretrain: max_steps raised to %d: resuming from step %d, the last checkpoint whose steps the "
                       "%s schedule leaves unchanged (not from step %d)", cfg.max_steps, step, cfg.schedule, newest[0])
    if is_main:
        set_aside_later_checkpoints(paths.checkpoints, step)
    return step, candidates[step]


def set_aside_later_checkpoints(checkpoints_dir: Path, step: int) -> None:
    """An extended run continues from `step`: the old run's checkpoints after it (another trajectory: its decay)
    move to `step-N.replaced-<time>-old/` beside them, out of the resume's way and never deleted."""
    from bertfactory.replaced import move_aside

    for later, directory in list_checkpoints(checkpoints_dir):
        if later > step:
            try:
                target = move_aside(directory, f"before{step}")
            except FileNotFoundError:
                continue
            logger.warning("pretrain: the old run's checkpoint %s moved to %s", directory, target)
