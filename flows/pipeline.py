"""The end-to-end flow: (tapt ->) preprocess -> pretrain -> evaluate, each stage a cached task (see flows.stages), with
validated parameters and the run directory locked for the whole run (flows/params.py, flows/lock.py).

    bertfactory run configs/local.yaml --run-dir runs/local
    python -c "from flows.pipeline import pipeline; pipeline('configs/local.yaml', 'runs/local')"
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from .params import StageParams, flow_guard
from .recipe import load_recipe
from .stages import _flow_run_name, recipe_stages, submit_stage


@flow(name="pipeline", flow_run_name=_flow_run_name, log_prints=True, validate_parameters=True)
def pipeline(config: str, run_dir: str, overrides: list[str] | None = None, force: bool = False) -> dict:
    """Run every stage of a recipe into `run_dir`; stages whose inputs did not change are skipped. force: move aside
    outputs that a changed setting cannot continue, instead of refusing (flows/stamps.py); nothing is deleted."""
    with flow_guard("pipeline", StageParams, config=config, run_dir=run_dir, overrides=overrides) as params:
        recipe = load_recipe(params.config, params.overrides)
        results = {}
        for stage in recipe_stages(recipe):  # a tapt section adds its stage first (flows/tapt.py)
            results[stage] = submit_stage(stage, recipe, Path(params.run_dir), force)
        return results
