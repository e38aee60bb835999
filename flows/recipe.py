"""The recipe: one YAML file with a section per stage, each validated by the config class that lives next to
the stage's code. `load_recipe("configs/local.yaml", ["pretrain.max_steps=200"])` returns a typed Recipe.

Sections: corpus, preprocess (preprocessing.config), model (training.config), pretrain (training.pretrain_config), evaluate
(evaluation.config), refresh (below: corpus_refresh's watching). A missing section takes its class defaults (the paper-scale values); configs/local.yaml
overrides them down to the tiny embedded default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pydantic import Field, model_validator

from bertfactory.config import StrictModel, apply_overrides, load_yaml, validate
from evaluation.config import EvaluateConfig
from preprocessing.config import CorpusConfig, PreprocessConfig
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.recipe_checks import model_pretrain_problems


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

    @model_validator(mode="after")
    def _model_and_pretrain_fit(self) -> "Recipe":
        # combinations each section accepts alone but pretraining cannot run (training/recipe_checks.py)
        problems = model_pretrain_problems(self.model, self.pretrain)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    data = apply_overrides(load_yaml(path), list(overrides))
    source = str(path) + (f" with overrides {list(overrides)}" if overrides else "")
    return validate(Recipe, data, source)
