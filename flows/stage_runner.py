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
# settings of the evaluate and distill sections that do not change their results: left out of the stage key
# (pretrain's are PretrainConfig.RESUME_NEUTRAL)
RESULT_NEUTRAL = ("tracking", "num_threads")


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
        # only the settings that decide the result (PretrainConfig.trajectory_fields): logging, tracking, checkpoint
        # cadence, threads and the like never make a finished or resumable run stale
        return {"model": recipe.model.model_dump(mode="json"), "pretrain": recipe.pretrain.trajectory_fields()}, files
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
        return {"evaluate": recipe.evaluate.model_dump(mode="json", exclude=set(RESULT_NEUTRAL))}, files
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
    return portable_stage_key(stage, config, files, run_dir)


def portable_stage_key(stage: str, config: dict, files: list[Path], run_dir: Path) -> str:
    """The stage key with no machine's paths in it (bertfactory/portable_paths.py): config values that are absolute
    paths inside the run directory or the samples cache, and input files there, are named RUN/... and SAMPLES/...,
    so the same run on object storage continued by a machine whose working-copy root or samples cache lies
    elsewhere, or a moved local run directory, finds its stages up to date (a tapt recipe's corpus and tokenizer,
    a built-in task's data, a sample corpus). The key of the spelling before (absolute paths, samples named so
    except for evaluate's) is accepted too, so runs stamped before keep their outputs."""
    from bertfactory.portable_paths import portable_roots, portable_values

    roots = {name: root for name, root in portable_roots(run_dir).items() if name != "RUN"}  # RUN: _input_name's own
    return stamps.stage_key(stage, portable_values(config, run_dir), files, run_dir, roots=roots,
                            earlier=(config, roots if stage == "evaluate" else None))


def run_stage(stage: str, recipe: Recipe, run_dir: Path, key: str | None = None, force: bool = False) -> dict:
    """Run one stage unless it is up to date. Returns {'stage', 'status': 'ran'|'up-to-date', 'key', 'seconds',
    'summary'}. `force`: outputs that a changed setting cannot continue are moved aside instead of refused."""
    run_dir = Path(run_dir)
    recipe = run_sync.localize_recipe(recipe)  # model directories and files the recipe names by URL
    key = key or compute_key(stage, recipe, run_dir)
    continues = (lambda old, new: pretrain_continues(recipe, run_dir, old, new)) if stage == "pretrain" else None
    return run_cached(stage, run_dir, key, lambda: _entry_point(stage)(recipe, run_dir), force, continues)


def _value(config: dict, dotted: str):
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def pretrain_continues(recipe: Recipe, run_dir: Path, old: dict, new: dict) -> "stamps.Plan":
    """Pretraining's rule for outputs started under another key (training/extend.py): a raised max_steps whose
    schedule leaves the trained steps unchanged (or any, with pretrain.extend) resumes; other train shards replace
    the outputs (moved aside) unless pretrain.allow_shard_change; any other changed setting is refused, naming it."""
    from bertfactory.errors import ConfigError
    from training.extend import differing_fields, refusal, resumable_step, schedule_reason

    if "config" not in old:  # started by a bertfactory that did not record its settings: the checkpoints'
        # fingerprint decides (training/resume.py: an extension continues, another config is refused naming it)
        return stamps.Plan("keep", "outputs started by an earlier bertfactory; their fingerprint decides whether "
                                   "they continue")
    changed_inputs = differing_fields(old.get("inputs", {}), new["inputs"])
    if changed_inputs:
        if changed_inputs == ["RUN/shards/manifest.json"] and recipe.pretrain.allow_shard_change:
            return stamps.Plan("keep", "the train shards changed; continuing on them (pretrain.allow_shard_change)")
        return stamps.Plan("replace", f"the input corpus changed ({', '.join(changed_inputs)})")
    diffs = differing_fields(old["config"], new["config"])
    if not diffs:  # another bertfactory version, same settings and data: the checkpoints' fingerprint decides
        return stamps.Plan("keep", "same settings and data under another bertfactory version; resuming")
    old_pre, new_pre = old["config"].get("pretrain", {}), new["config"]["pretrain"]
    where = run_dir
    if diffs == ["pretrain.max_steps"] and new_pre["max_steps"] > old_pre["max_steps"]:
        steps = run_sync.checkpoint_steps(run_dir)
        if steps is None:
            from training.checkpoint import list_checkpoints

            steps = [step for step, _ in list_checkpoints(run_dir / "pretrain" / "checkpoints")]
        step = resumable_step(old_pre, new_pre, steps, recipe.pretrain.extend)
        if step is not None:
            return stamps.Plan("keep", f"max_steps raised from {old_pre['max_steps']} to {new_pre['max_steps']}: "
                                       f"extending the run from its checkpoint at step {step}", step)
        if not steps:  # nothing to continue from (save_every beyond the run): start over, the old run kept aside
            return stamps.Plan("replace", f"max_steps raised from {old_pre['max_steps']} to {new_pre['max_steps']} "
                                          "with no checkpoint to continue from")
        raise ConfigError(refusal("pretrain.max_steps", old_pre["max_steps"], new_pre["max_steps"], where,
                                  schedule_reason(old_pre, new_pre, max(steps))))
    # the setting that changes the trained steps (max_steps itself when it was lowered)
    first = next((d for d in diffs if d != "pretrain.max_steps"), diffs[0])
    also = [d for d in diffs if d != first]
    raise ConfigError(refusal(first, _value(old["config"], first), _value(new["config"], first), where,
                              "that changes the steps already trained"
                              + (f" (also changed: {', '.join(also)})" if also else "")))


def run_cached(stage: str, run_dir: Path, key: str, action: Callable[[], dict], force: bool = False,
               continues=None) -> dict:
    """The stamp protocol around any stage (flows.stamps.STAGES): skip when `key` is fresh, else plan what becomes of
    outputs started under another key (flows.stamps.plan: keep, move aside, or refuse), begin, `action()`, finish.
    Every flow's caching goes through here, so a result persists across processes and Prefect homes.
    For a run directory on object storage (the working copy of a URL) the stamps and outputs are pulled first
    and pushed after, the stamp last (flows/run_sync.py); for a local one those calls do nothing. Nothing is
    deleted: replaced outputs are moved aside, here and on the run location."""
    published = run_sync.pull_state(stage, run_dir)
    if stamps.is_fresh(run_dir, stage, key):
        if published is False:  # finished here, but the run location never got it (unreachable then): publish
            run_sync.push_outputs(stage, run_dir)
        logger.info("%s: up to date (key %s), skipping", stage, key[:12])
        return {"stage": stage, "status": "up-to-date", "key": key, "seconds": 0.0,
                "summary": stamps.recorded_summary(run_dir, stage)}
    decided = stamps.plan(run_dir, stage, key, force, continues, remote_outputs=published is not None)
    if decided.action == "replace":
        run_sync.set_aside(stage, run_dir, decided.why)
    stamps.begin(run_dir, stage, key, log=logger.warning, decided=decided)
    run_sync.after_begin(stage, run_dir, decided.step)
    logger.info("%s: running (key %s) in %s", stage, key[:12], run_dir)
    t0 = time.perf_counter()
    summary = action()
    seconds = time.perf_counter() - t0
    summary = json.loads(json.dumps(summary, default=str))
    stamps.finish(run_dir, stage, key, summary, seconds)
    run_sync.push_outputs(stage, run_dir)
    logger.info("%s: done in %.1f s", stage, seconds)
    return {"stage": stage, "status": "ran", "key": key, "seconds": round(seconds, 2), "summary": summary}
