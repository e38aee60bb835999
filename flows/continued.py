"""Continued pretraining on a corpus version (corpus_refresh with continue_pretraining): RUN/continued/vN is a run
directory whose tokenizer and shards are RUN/corpora/tokenizer and RUN/corpora/vN (relative symlinks), pretrained by
the ordinary pretrain stage (flows/stages.py: stamps, resume, artifacts) starting from the latest checkpoint's
weights (pretrain.init_from):

    the latest checkpoint = RUN/continued/vK/pretrain/final of the highest K < N that has one, else
                            RUN/pretrain/final, else none: version N is pretrained from scratch with the recipe's
                            pretrain section (so a first refresh with --continue-pretraining trains the base model)
    continued steps       = refresh.continue_steps, warmup capped at a tenth of them; the optimiser starts fresh

The stage stamp makes it idempotent and resumable: a refresh that finds nothing new but an unfinished continuation
of the latest version resumes it from its last checkpoint.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bertfactory.errors import ContractError

from .recipe import Recipe
from .run_sync import working_copy
from .stages import run_stage

logger = logging.getLogger("flows")

CONTINUED = "continued"


def continued_dir(run_dir: Path, version: int) -> Path:
    return Path(run_dir) / CONTINUED / f"v{version}"


def latest_checkpoint(run_dir: Path, before: int) -> Path | None:
    """The model to continue from for version `before` (see the module docstring), None for none."""
    if (wc := working_copy(run_dir)) is not None:  # a run on object storage: the candidates' final models
        for rel in [f"{CONTINUED}/v{k}/pretrain/final" for k in range(before - 1, 0, -1)] + ["pretrain/final"]:
            wc.pull_tree(rel)
    for k in range(before - 1, 0, -1):
        final = continued_dir(run_dir, k) / "pretrain" / "final"
        if (final / "model.safetensors").is_file():
            return final
    final = Path(run_dir) / "pretrain" / "final"
    return final if (final / "model.safetensors").is_file() else None


def _link(link: Path, target: str) -> None:
    """A relative symlink (the run directory stays movable); an existing one must point at the same place."""
    if link.is_symlink():
        if os.readlink(link) == target:
            return
        raise ContractError(f"{link} points at {os.readlink(link)}, expected {target}; remove it")
    if link.exists():
        raise ContractError(f"{link} exists and is not the link to {target} that continued pretraining needs; remove it")
    link.symlink_to(target, target_is_directory=True)


def prepare(recipe: Recipe, run_dir: Path, version: int) -> tuple[Recipe, Path, Path | None]:
    """The recipe and run directory of the continued pretraining on `version`, and the model it starts from."""
    work = continued_dir(run_dir, version)
    work.mkdir(parents=True, exist_ok=True)
    _link(work / "tokenizer", "../../corpora/tokenizer")
    _link(work / "shards", f"../../corpora/v{version}")
    start = latest_checkpoint(run_dir, version)
    if start is None:
        return recipe, work, None
    steps = recipe.refresh.continue_steps
    pretrain = recipe.pretrain.model_copy(update={
        "init_from": str(start.resolve()), "max_steps": steps,
        "warmup_steps": min(recipe.pretrain.warmup_steps, steps // 10),
        "save_every": min(recipe.pretrain.save_every, steps)})
    return recipe.model_copy(update={"pretrain": pretrain}), work, start


def continue_pretraining(recipe: Recipe, run_dir: Path, version: int) -> str | None:
    """Pretrain on corpus `version` from the latest checkpoint; its final model directory, or None when it was
    already done (the stage stamp is fresh)."""
    continued, work, start = prepare(recipe, Path(run_dir), version)
    logger.info("continued pretraining on corpus version %d in %s, %s", version, work,
                f"from {start} for {continued.pretrain.max_steps} steps" if start else
                f"from scratch (no earlier checkpoint) for {continued.pretrain.max_steps} steps")
    result = run_stage("pretrain", continued, work)
    if result["status"] == "up-to-date":
        return None
    from .artifacts import in_flow_run, publish_stage_artifacts

    if in_flow_run():
        publish_stage_artifacts("pretrain", work, result)
    return str(work / "pretrain" / "final")
