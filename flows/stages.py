"""One Prefect flow per stage (`preprocess`, `pretrain`, `evaluate`) and the task that runs a stage.

A stage run: compute its input key (flows.stamps) -> skip if the run directory already holds its outputs for
that key -> otherwise clear stale outputs, call the stage's entry point, stamp it, publish artifacts. The same
function (`run_stage`, flows/stage_runner.py, which imports no Prefect) runs without Prefect for
`bertfactory ... --no-prefect` and in unit tests.

    bertfactory preprocess configs/local.yaml --run-dir runs/local
    python -c "from flows.stages import preprocess; preprocess('configs/local.yaml', 'runs/local')"
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from bertfactory.errors import BertfactoryError

from .artifacts import publish_stage_artifacts
from .recipe import Recipe, load_recipe
# the plain stage logic, importable from here too (the Prefect flows of other modules use it with these)
from .stage_runner import STAGE_ORDER, compute_key, recipe_stages, run_cached, run_stage  # noqa: F401


def _is_transient(task, task_run, state) -> bool:
    """Retry only failures that a retry can fix (I/O hiccups, a preempted worker), never bad config or input."""
    try:
        exc = state.result(raise_on_failure=False)
    except Exception as err:  # the result itself could not be read: treat as transient
        exc = err
    if isinstance(exc, BertfactoryError):
        return False
    return isinstance(exc, (OSError, TimeoutError, ConnectionError, EOFError)) and not isinstance(
        exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    )


# Caching is done by the stage stamp (flows.stamps), not by Prefect's result cache: a Prefect cache record
# holds an absolute path into one PREFECT_HOME's result storage and knows nothing of the run directory's
# outputs, so a run directory whose outputs were deleted would be trusted wrongly, and one used from another
# PREFECT_HOME crashes reading a path outside the base path (measured with prefect 3.8). The stamp checks both.
@task(
    name="stage",
    task_run_name="{stage}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[10, 60],
    retry_condition_fn=_is_transient,
)
def stage_task(stage: str, recipe_json: dict, run_dir: str, force: bool = False) -> dict:
    """Run one stage (skipped inside when up to date) and publish its artifacts. `force`: outputs that a changed
    setting cannot continue are moved aside instead of refused (flows/stamps.py)."""
    recipe = Recipe.model_validate(recipe_json)
    result = run_stage(stage, recipe, Path(run_dir), force=force)
    publish_stage_artifacts(stage, Path(run_dir), result)
    return result


def submit_stage(stage: str, recipe: Recipe, run_dir: Path, force: bool = False) -> dict:
    return stage_task(stage, recipe.model_dump(mode="json"), str(Path(run_dir).resolve()), force)


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    return f"{flow_run.flow_name}:{Path(params.get('config', 'recipe')).stem}@{Path(params.get('run_dir') or 'runs').name}"


def _stage_flow(stage: str):
    @flow(name=stage, flow_run_name=_flow_run_name, log_prints=True, validate_parameters=True)
    def stage_flow(config: str, run_dir: str, overrides: list[str] | None = None, force: bool = False) -> dict:
        from .params import StageParams, flow_guard

        with flow_guard(stage, StageParams, config=config, run_dir=run_dir, overrides=overrides) as params:
            recipe = load_recipe(params.config, params.overrides)
            return submit_stage(stage, recipe, Path(params.run_dir), force)

    stage_flow.__doc__ = (f"Run the {stage} stage of a recipe into a run directory (skipped when up to date). force: "
                          "move aside outputs that a changed setting cannot continue, instead of refusing.")
    return stage_flow


preprocess = _stage_flow("preprocess")
pretrain = _stage_flow("pretrain")
evaluate = _stage_flow("evaluate")
FLOWS = {"preprocess": preprocess, "pretrain": pretrain, "evaluate": evaluate}
