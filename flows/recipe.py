"""The recipe: one YAML file with a section per stage, each validated by the config class that lives next to
the stage's code. `load_recipe("configs/local.yaml", ["pretrain.max_steps=200"])` returns a typed Recipe.

Sections: corpus, preprocess (preprocessing.config), model (training.config), pretrain (training.pretrain_config), evaluate
(evaluation.config), refresh (below: corpus_refresh's watching), tapt (flows/tapt_config.py: task-adaptive pretraining
of a published model, a stage before preprocess; null = none). A missing section takes its class defaults (the paper-scale values); configs/local.yaml
overrides them down to the tiny embedded default.

A recipe is named by a path (`runs/my.yaml`) or by the name of a bundled one (`local`, `bert-base.yaml`, or the
repository-relative `configs/local.yaml` from any directory): the files of configs/ ship with the package as
`bertfactory.recipes` (`resolve_recipe`, `bundled_recipes`; `bertfactory recipes list`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Sequence

from pydantic import Field, model_validator

from bertfactory.config import StrictModel, apply_overrides, did_you_mean, load_yaml, validate
from bertfactory.errors import ConfigError
from evaluation.config import EvaluateConfig
from preprocessing.config import CorpusConfig, PreprocessConfig
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.recipe_checks import model_pretrain_problems, unread_member_settings

from .tapt_config import TaptConfig, tapt_problems


class RefreshConfig(StrictModel):
    """How `corpus_refresh` (flows/refresh.py) watches its sources and continues pretraining."""

    wikipedia_jobs: list[str] = Field(
        default_factory=lambda: ["articlesdump"], min_length=1,
        description="Wikipedia dumps layout: the dumpstatus.json jobs whose files are read once the job is done "
        "(articlesdump = pages-articles, articlesmultistreamdump = the multistream variant)")
    list_attempts: int = Field(4, ge=1, description="tries to list or read a source location before failing "
                               "with its URL (only transient failures are retried)")
    list_backoff_s: float = Field(2.0, ge=0.0, description="seconds before the second try; doubled for each next one")
    continue_steps: int = Field(1000, ge=1, description="continued pretraining: optimiser steps on each new corpus "
                                "version, starting from the latest checkpoint's weights")


class Recipe(StrictModel):
    """A full recipe: what to read, how to preprocess, which model, how to pretrain and how to evaluate."""

    name: str = Field("bertfactory", description="a short name for runs of this recipe (used in flow-run names)")
    corpus: CorpusConfig = Field(default_factory=CorpusConfig, description="what to read and how to clean it")
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig, description="tokenizer, instances, masks, shards")
    model: ModelConfig = Field(default_factory=ModelConfig, description="architecture of the encoder")
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig, description="optimisation and checkpoints")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="intrinsic and fine-tuning evaluation")
    refresh: RefreshConfig = Field(default_factory=RefreshConfig, description="corpus refresh: source watching and "
                                   "continued pretraining (docs/orchestration.md)")
    tapt: TaptConfig | None = Field(None, description="task-adaptive pretraining of a published model: import it, "
                                    "pretrain on the tasks' unlabeled training texts from its weights, evaluate it "
                                    "beside the unadapted one (flows/tapt.py); null = none")

    @model_validator(mode="before")
    @classmethod
    def _empty_sections_take_their_defaults(cls, data):
        # `pretrain:` with every key commented out is YAML's null: the section's defaults, as for a section left out
        # (it was refused as "Input should be a valid dictionary"); tapt: null keeps its meaning (no tapt)
        if isinstance(data, dict):
            data = {key: {} if value is None and key in _SECTIONS else value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _model_and_pretrain_fit(self) -> "Recipe":
        # combinations each section accepts alone but pretraining cannot run (training/recipe_checks.py)
        problems = (model_pretrain_problems(self.model, self.pretrain) + unread_member_settings(self.model, self.pretrain)
                    + tapt_problems(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self


_SECTIONS = ("corpus", "preprocess", "model", "pretrain", "evaluate", "refresh")  # Recipe's sections with defaults

RECIPES_PACKAGE = "bertfactory.recipes"  # configs/, mapped in pyproject.toml
RECIPE_SUFFIXES = (".yaml", ".yml")


def bundled_recipes_dir() -> Path:
    """The directory of the bundled recipes: the installed package's (editable: configs/ itself), or, when the project
    runs from a source tree that was never installed (PYTHONPATH=.), the tree's configs/."""
    try:
        return Path(str(resources.files(RECIPES_PACKAGE)))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "configs"


def bundled_recipes() -> dict[str, Path]:
    """Name (file stem) -> file of every bundled recipe, sorted by name."""
    root = bundled_recipes_dir()
    return {f.stem: f for f in sorted(root.iterdir()) if f.suffix in RECIPE_SUFFIXES and f.is_file()}


def _bundled_name(spec: str) -> str | None:
    """The bundled recipe `spec` may name: `local`, `local.yaml` or `configs/local.yaml` (the spelling of the
    repository's docs, valid from any directory); None for any other path."""
    path = Path(spec)
    if path.suffix and path.suffix not in RECIPE_SUFFIXES:
        return None
    if len(path.parts) == 1 or (len(path.parts) == 2 and path.parts[0] == "configs"):
        return path.stem
    return None


def bundled_recipe(spec: str | Path) -> Path | None:
    """The bundled recipe `spec` names (`local`, `local.yaml`, `configs/local.yaml`), or None."""
    return bundled_recipes().get(_bundled_name(str(spec)) or "")


def resolve_recipe(spec: str | Path) -> Path:
    """The recipe file `spec` names: an existing file first (a local file shadows a bundled recipe of the same
    name), else a bundled recipe; ConfigError naming both places otherwise."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise ConfigError(f"recipe {spec}: not a file (a recipe is one YAML file)")
    bundled = bundled_recipe(spec)
    if bundled is not None:
        return bundled
    close = did_you_mean(_bundled_name(str(spec)) or "", bundled_recipes())
    raise ConfigError(f"config file not found: {spec}{'; ' + close if close else ''} (no such file from {Path.cwd()}, "
                      "and no bundled recipe of that name: `bertfactory recipes list` shows them)")


def config_kind(data: dict) -> str:
    """'distill' for a distillation config (distillation/config.py: its `teacher` section), 'recipe' for a pipeline
    recipe, from the top-level keys alone (`bertfactory recipes list` shows it)."""
    return "distill" if "teacher" in data else "recipe"


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    spec, path = path, resolve_recipe(path)
    data = load_yaml(path)
    if config_kind(data) == "distill":  # not a list of unknown keys, one per distillation setting
        raise ConfigError(f"{spec} is a distillation config (it has a teacher section), not a pipeline recipe: run a "
                          f"distillation config with `bertfactory distill {spec} --run-dir RUN` (kind `distill` in "
                          "`bertfactory recipes list`)")
    data = apply_overrides(data, list(overrides))
    source = str(path) + (f" with overrides {list(overrides)}" if overrides else "")
    return validate(Recipe, data, source)
