"""The recipe: one YAML file with a section per stage, each validated by the config class that lives next to
the stage's code. `load_recipe("configs/local.yaml", ["pretrain.max_steps=200"])` returns a typed Recipe.

Sections: corpus, preprocess (preprocessing.config), model, pretrain (training.config), evaluate
(evaluation.config). A missing section takes its class defaults (the paper-scale values); configs/local.yaml
overrides them down to the tiny embedded default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pydantic import Field

from bertfactory.config import StrictModel, apply_overrides, load_yaml, validate
from evaluation.config import EvaluateConfig
from preprocessing.config import CorpusConfig, PreprocessConfig
from training.config import ModelConfig, PretrainConfig


class Recipe(StrictModel):
    """A full recipe: what to read, how to preprocess, which model, how to pretrain and how to evaluate."""

    name: str = Field("bertfactory", description="a short name for runs of this recipe (used in flow-run names)")
    corpus: CorpusConfig = Field(default_factory=CorpusConfig, description="what to read and how to clean it")
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig, description="tokenizer, instances, masks, shards")
    model: ModelConfig = Field(default_factory=ModelConfig, description="architecture of the encoder")
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig, description="optimisation and checkpoints")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="intrinsic and fine-tuning evaluation")


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    data = apply_overrides(load_yaml(path), list(overrides))
    source = str(path) + (f" with overrides {list(overrides)}" if overrides else "")
    return validate(Recipe, data, source)
