"""Typed flow parameters and the preamble every flow runs before its work (`flow_guard`).

Prefect checks the parameter *types* of a flow run (validate_parameters); these models check what types cannot:
the recipe file exists, the run directory is named, overrides are KEY=VALUE, sources are non-empty. A deployment
triggered with a bad parameter fails at once with a message naming the parameter, in the flow run's state and log,
before any lock is taken or file written:

    with flow_guard("pretrain", StageParams, config=config, run_dir=run_dir, overrides=overrides) as params:
        ...   # parameters valid, stage logs forwarded to Prefect, run directory locked (flows/lock.py)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, TypeVar

from pydantic import Field, field_validator

from bertfactory.config import StrictModel, validate
from bertfactory.errors import ConfigError

from bertfactory.run_location import resolve_run_dir

from .lock import run_dir_lock
from .logs import forward_stage_logs

P = TypeVar("P", bound="StageParams")


class StageParams(StrictModel):
    """The parameters every flow takes: a recipe, overrides and the run directory it writes."""

    config: str = Field(min_length=1, description="recipe (or distillation config) YAML path, as seen by the worker, "
                        "or a bundled recipe's name (local, bert-base, distill-local: `bertfactory recipes list`)")
    run_dir: str = Field(min_length=1, description="run directory (docs/run-directory.md); locked while the flow runs")
    overrides: list[str] = Field(default_factory=list, description="KEY=VALUE recipe overrides, like the CLI's --set")

    @field_validator("config")
    @classmethod
    def _config_exists(cls, value: str) -> str:
        # a path, or a bundled recipe's name, resolved as every command resolves it (flows/recipe.py): the file the
        # flow reads (a deployment given `config: bert-base` was refused as "no such file")
        from .recipe import resolve_recipe

        try:
            return str(resolve_recipe(value))
        except ConfigError as err:
            raise ValueError(str(err)) from None

    @field_validator("overrides", mode="before")
    @classmethod
    def _none_is_empty(cls, value):
        return [] if value is None else value

    @field_validator("overrides")
    @classmethod
    def _key_value(cls, value: list[str]) -> list[str]:
        bad = [o for o in value if "=" not in o or not o.split("=", 1)[0].strip()]
        if bad:
            raise ValueError(f"overrides must be KEY=VALUE (e.g. pretrain.max_steps=200); not: {bad}")
        return value


class RefreshParams(StageParams):
    """corpus_refresh: which locations to watch and whether to continue pretraining on a new version."""

    sources: list[str] | None = Field(None, description="locations to watch (dirs, globs, fsspec URLs, a Wikipedia "
                                      "dumps directory, a CC-News warc.paths listing); null = the recipe's corpus.inputs")
    continue_pretraining: bool = Field(False, description="after a new version, continue pretraining on it from the "
                                       "latest checkpoint (refresh.continue_steps steps)")

    @field_validator("sources")
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not s.strip() for s in value)):
            raise ValueError("sources must be a non-empty list of locations, or null for the recipe's corpus.inputs")
        return value


@contextmanager
def flow_guard(flow: str, model: type[P], **params) -> Iterator[P]:
    """Validate `params` (ConfigError naming the parameter), forward stage logs, hold the run directory's lock."""
    checked = validate(model, params, f"the parameters of flow {flow!r}")
    forward_stage_logs()
    # a URL run directory (s3://, gs://) is checked (one line naming it and what to install or set) and worked on
    # in its local working copy, synced around each stage (docs/cluster.md); the flow run keeps the URL it was given
    work = resolve_run_dir(checked.run_dir)
    work.mkdir(parents=True, exist_ok=True)
    if str(work) != checked.run_dir:
        checked = checked.model_copy(update={"run_dir": str(work)})
    with run_dir_lock(checked.run_dir, flow):
        yield checked
