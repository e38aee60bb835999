"""The Prefect flow `distill`: the distillation stage (distillation/stage.py, its public `run_distill`) as a
cached, retried, locked flow with artifacts, like the recipe stages in flows/stages.py.

Its stamp (RUN/.bertfactory/distill.json, flows/stamps.py) keys on the distillation config, the teacher's files
(our checkpoint, or the HF directory), the shards' manifest (general distillation) and the task's data, so a rerun
with nothing changed returns the recorded results without training.

    bertfactory distill configs/distill-local.yaml --run-dir runs/local --prefect
    python -c "from flows.distill_flow import distill; distill('configs/distill-local.yaml', 'runs/local')"
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from bertfactory.samples import resolve_input, sample_path

from . import stamps
from .params import StageParams, flow_guard
from .stages import _flow_run_name, _is_transient, run_cached

_MODEL_FILES = ("model.safetensors", "config.json", "tokenizer.json")


def distill_inputs(cfg, run_dir: Path) -> list[Path]:
    """The files whose content decides the distillation results besides its config (a DistillConfig)."""
    from evaluation.tasks.registry import BUILTIN_SAMPLES

    paths: list[Path] = []
    if cfg.teacher.hf is not None:
        paths.append(resolve_input(cfg.teacher.hf))
    else:
        paths += [run_dir / cfg.teacher.checkpoint / name for name in _MODEL_FILES]
    manifest = run_dir / cfg.shards / "manifest.json"
    if manifest.is_file():
        paths.append(manifest)
    if cfg.task in BUILTIN_SAMPLES:
        paths.append(sample_path(BUILTIN_SAMPLES[cfg.task]))
    files: list[Path] = []
    for path in paths:
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return files


def run_distill_stage(cfg, run_dir: Path, force: bool = False) -> dict:
    """Distil unless RUN/distill holds the results of the same config and inputs (the stage stamp)."""
    from bertfactory.errors import BertfactoryError
    from distillation.stage import run_distill

    run_dir = Path(run_dir)
    from .run_sync import working_copy

    if (wc := working_copy(run_dir)) is not None:  # a run on object storage: the teacher and what it read
        wc.pull_tree("pretrain/final")
        wc.pull(["shards/manifest.json", "tokenizer/tokenizer.json", ".bertfactory/distill.json",
                 ".bertfactory/distill.started.json"])
    files = distill_inputs(cfg, run_dir)
    missing = [f for f in files if not f.is_file()]
    if missing and cfg.teacher.hf is not None:  # the teacher's directory itself: the only path whose files are listed
        shown = f" ({missing[0]})" if str(missing[0]) != cfg.teacher.hf else ""
        raise BertfactoryError(f"teacher.hf {cfg.teacher.hf}: no such directory{shown}; give a Hugging Face BERT "
                               "directory or sample:NAME (e.g. sample:minilm)")
    if missing:
        raise BertfactoryError(f"distill needs {missing[0]}, which does not exist (teacher.checkpoint "
                               f"{cfg.teacher.checkpoint}, relative to the run directory); for our teacher run "
                               "`bertfactory run` (or pretrain) with the same --run-dir first, or point "
                               "teacher.checkpoint (or teacher.hf) at the teacher")
    from .stage_runner import RESULT_NEUTRAL, portable_stage_key

    # tracking and threads do not change the results: left out of the key (toggling them never reruns)
    key = portable_stage_key("distill", cfg.model_dump(mode="json", exclude=set(RESULT_NEUTRAL)), files, run_dir)
    return run_cached("distill", run_dir, key, lambda: run_distill(cfg, run_dir), force)


@task(name="stage", task_run_name="distill", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60],
      retry_condition_fn=_is_transient)
def distill_task(config_json: dict, run_dir: str) -> dict:
    from distillation.config import DistillConfig

    from .artifacts import publish_distill_artifacts

    result = run_distill_stage(DistillConfig.model_validate(config_json), Path(run_dir))
    publish_distill_artifacts(Path(run_dir), result)
    return result


@flow(name="distill", flow_run_name=_flow_run_name, log_prints=True, validate_parameters=True)
def distill(config: str, run_dir: str, overrides: list[str] | None = None) -> dict:
    """Distil the run's teacher into the students of `config` (a distill YAML) -> RUN/distill."""
    from distillation.stage import load_distill_config

    with flow_guard("distill", StageParams, config=config, run_dir=run_dir, overrides=overrides) as params:
        cfg = load_distill_config(params.config, params.overrides)
        return distill_task(cfg.model_dump(mode="json"), str(Path(params.run_dir).resolve()))
