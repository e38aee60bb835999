"""The plain stage logic, without Prefect: a stage's input key, the stamp protocol around it, and its entry point.
`bertfactory ... --no-prefect` and the unit tests run stages through here; flows/stages.py wraps the same
`run_stage` in a Prefect task and flows (so the CLI's --no-prefect path never imports Prefect).

A stage run: compute its input key (flows.stamps) -> skip if the run directory already holds its outputs for
that key -> otherwise clear stale outputs, call the stage's entry point, stamp it.

    from flows.recipe import load_recipe
    from flows.stage_runner import run_stage
    run_stage("preprocess", load_recipe("configs/local.yaml"), Path("runs/local"))
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Callable

from bertfactory.errors import BertfactoryError, InputError

from . import run_sync, stamps
from .recipe import Recipe

logger = logging.getLogger("flows")

STAGE_ORDER = ("preprocess", "pretrain", "evaluate")


def recipe_stages(recipe: Recipe) -> tuple[str, ...]:
    """The stages `bertfactory run` runs for `recipe`, in order: tapt first when it has a tapt section."""
    return (("tapt",) if recipe.tapt is not None else ()) + STAGE_ORDER


def stage_inputs(stage: str, recipe: Recipe, run_dir: Path) -> tuple[dict, list[Path]]:
    """The config sections and input files whose content decides whether `stage` must run again."""
    from .tapt import require_tapt_outputs, tapt_inputs, with_tapt

    if stage == "tapt":
        return tapt_inputs(recipe)
    if recipe.tapt is not None and stage in ("preprocess", "evaluate"):
        require_tapt_outputs(run_dir, stage)
    recipe = with_tapt(recipe, run_dir)  # a tapt recipe's paths (flows/tapt.py); others unchanged
    if stage == "preprocess":
        from preprocessing.pipeline import input_files

        files = input_files(recipe.corpus)  # directories and globs expanded: a new file under them reruns the stage
        if recipe.corpus.parent:
            files.append(Path(recipe.corpus.parent) / "manifest.json")
        if recipe.preprocess.tokenizer.path:
            files.append(Path(recipe.preprocess.tokenizer.path))
        return recipe.model_dump(mode="json", include={"corpus", "preprocess"}), files
    if stage == "pretrain":
        manifest = run_dir / "shards" / "manifest.json"
        _require(manifest, "pretrain", "preprocess")
        files = [manifest, run_dir / "tokenizer/tokenizer.json"]
        if recipe.pretrain.tlm_shards:  # XLM's TLM pairs are training data too: rebuilt pairs retrain
            tlm = Path(recipe.pretrain.tlm_shards)
            files.append((tlm if tlm.is_absolute() else run_dir / tlm) / "manifest.json")
        return recipe.model_dump(mode="json", include={"model", "pretrain"}), files
    if stage == "evaluate":
        # the checkpoint actually evaluated (evaluate.checkpoint), not always pretrain/final
        final = recipe.evaluate.checkpoint_path(run_dir)
        if final == run_dir / "pretrain" / "final":
            _require(final / "model.safetensors", "evaluate", "pretrain")
        files = [final / "model.safetensors", final / "config.json", final / "tokenizer.json"]
        if recipe.evaluate.intrinsic.enabled:
            files.append(run_dir / "shards/manifest.json")
        # the task data decide the scores as much as the model: a changed file reruns the evaluation
        from evaluation.run import task_input_files

        files += task_input_files(recipe.evaluate, run_dir)
        return recipe.model_dump(mode="json", include={"evaluate"}), files
    raise BertfactoryError(f"unknown stage '{stage}'; stages: tapt (recipes with a tapt section), "
                           f"{', '.join(STAGE_ORDER)}")


def _require(path: Path, stage: str, upstream: str) -> None:
    if not path.is_file():
        raise BertfactoryError(
            f"{stage} needs {path}, which the {upstream} stage writes; run `bertfactory {upstream}` "
            f"(or `bertfactory run`) with the same --run-dir first"
        )


def _entry_point(stage: str) -> Callable[[Recipe, Path], dict]:
    from .tapt import run_tapt, with_tapt

    if stage == "tapt":
        return run_tapt
    entry = _stage_entry_point(stage)
    return lambda r, d: entry(with_tapt(r, d), d)


def _stage_entry_point(stage: str) -> Callable[[Recipe, Path], dict]:
    if stage == "preprocess":
        from preprocessing.pipeline import run_preprocess

        return lambda r, d: run_preprocess(r.corpus, r.preprocess, d)
    if stage == "pretrain":
        from training.pretrain import run_pretrain

        return lambda r, d: run_pretrain(r.model, r.pretrain, d)
    from evaluation.run import run_evaluate

    return lambda r, d: run_evaluate(r.evaluate, d)


def compute_key(stage: str, recipe: Recipe, run_dir: Path) -> str:
    run_sync.pull_inputs(stage, recipe, run_dir)  # a run on object storage: what the key hashes (flows/run_sync.py)
    config, files = stage_inputs(stage, recipe, run_dir)
    for f in files:
        if not f.is_file():
            raise InputError(f"{stage}: input file {f} does not exist")
    return stamps.stage_key(stage, config, files, run_dir)


def run_stage(stage: str, recipe: Recipe, run_dir: Path, key: str | None = None, force: bool = False) -> dict:
    """Run one stage unless it is up to date. Returns {'stage', 'status': 'ran'|'up-to-date', 'key', 'seconds',
    'summary'}."""
    run_dir = Path(run_dir)
    recipe = run_sync.localize_recipe(recipe)  # model directories and files the recipe names by URL
    key = key or compute_key(stage, recipe, run_dir)
    return run_cached(stage, run_dir, key, lambda: _entry_point(stage)(recipe, run_dir), force)


def run_cached(stage: str, run_dir: Path, key: str, action: Callable[[], dict], force: bool = False) -> dict:
    """The stamp protocol around any stage (flows.stamps.STAGES): skip when `key` is fresh, else begin, `action()`,
    finish. Every flow's caching goes through here, so a result persists across processes and Prefect homes.
    For a run directory on object storage (the working copy of a URL) the stamps and outputs are pulled first
    and pushed after, the stamp last (flows/run_sync.py); for a local one those calls do nothing."""
    published = run_sync.pull_state(stage, run_dir)
    if not force and stamps.is_fresh(run_dir, stage, key):
        if published is False:  # finished here, but the run location never got it (unreachable then): publish
            run_sync.push_outputs(stage, run_dir)
        logger.info("%s: up to date (key %s), skipping", stage, key[:12])
        return {"stage": stage, "status": "up-to-date", "key": key, "seconds": 0.0,
                "summary": stamps.recorded_summary(run_dir, stage)}
    run_sync.clear_stale(stage, run_dir, key)
    stamps.begin(run_dir, stage, key, log=logger.warning)
    run_sync.after_begin(stage, run_dir)
    logger.info("%s: running (key %s) in %s", stage, key[:12], run_dir)
    t0 = time.perf_counter()
    summary = action()
    seconds = time.perf_counter() - t0
    summary = json.loads(json.dumps(summary, default=str))
    stamps.finish(run_dir, stage, key, summary, seconds)
    run_sync.push_outputs(stage, run_dir)
    logger.info("%s: done in %.1f s", stage, seconds)
    return {"stage": stage, "status": "ran", "key": key, "seconds": round(seconds, 2), "summary": summary}
