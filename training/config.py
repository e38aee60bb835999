"""The `model` section of a recipe (ModelConfig); the `pretrain` section is training/pretrain_config.py.

The encoder keys are BertConfig's (training/models/bert/settings.py: types, bounds and docs declared there once), but
for the three pretraining fills in (vocab_size may stay null = the tokenizer's size; pad_token_id from the tokenizer;
sentence_head from the objective); each member's own settings are a sub-section its architecture declares
(`Architecture.settings`: `model.electra`, `model.spanbert`, `model.xlnet`, `model.transformer_xl`, `model.xlm`,
`model.modernbert`, declared in training/models/<member>/settings.py). Nothing here imports torch: loading a recipe
stays light (tests/test_import_graph.py checks it). Each architecture turns the section into its config
(`Architecture.from_model_config`, training/models/registry.py).

Defaults are BERT-base as in Devlin et al. 2019 (12 layers, hidden 768, 12 heads, FFN 3072, 512 positions,
dropout 0.1). configs/local.yaml overrides them down to a tiny model for a 2-core CPU.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, create_model, model_validator

from bertfactory.config import StrictModel
from bertfactory.errors import ConfigError

# the torch-free declarations (not models.bert / models.registry, which build models): a recipe loads without torch
from .models.bert.settings import BertConfig, encoder_shape_problems
from .models.members import member_settings

# the recipe's defaults of the encoder fields a checkpoint must state: BERT-base
BERT_BASE = {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "intermediate_size": 3072,
             "max_position_embeddings": 512}
# BertConfig fields that pretraining fills in rather than the recipe
_FILLED_IN = ("pad_token_id", "sentence_head")


class _ModelSection(StrictModel):
    """The checks and conversion of ModelConfig (its fields are made below from BertConfig's)."""

    @model_validator(mode="after")
    def _consistent_shape(self) -> "_ModelSection":
        problems = encoder_shape_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_bert_config(self, vocab_size: int, pad_token_id: int) -> BertConfig:
        """The architecture for a tokenizer of `vocab_size` tokens (ModelConfig.vocab_size, when set, must
        cover it; a larger value pads the embedding matrix, e.g. to a multiple of 64 for GPU efficiency)."""
        size = self.vocab_size if self.vocab_size is not None else vocab_size  # type: ignore[attr-defined]
        if size < vocab_size:
            raise ConfigError(f"model.vocab_size={size} is smaller than the tokenizer's vocabulary ({vocab_size} tokens)")
        encoder = {name: getattr(self, name) for name in _ENCODER_KEYS if name != "vocab_size"}
        return BertConfig(vocab_size=size, pad_token_id=pad_token_id, **encoder)


def _encoder_fields() -> dict[str, Any]:
    """BertConfig's fields as recipe keys: the same types, bounds and descriptions, with BERT-base defaults."""
    fields: dict[str, Any] = {}
    for name, info in BertConfig.__pydantic_fields__.items():
        if name in _FILLED_IN:
            continue
        if name == "vocab_size":
            fields[name] = (int | None, Field(None, ge=1, description="vocabulary size; null = the tokenizer's size "
                                              "from the shard manifest"))
            continue
        default = BERT_BASE[name] if info.is_required() else info.default
        annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        fields[name] = (annotation, Field(default, description=info.description))
    return fields


_ENCODER_KEYS = tuple(_encoder_fields())

def _member_sections() -> dict[str, Any]:
    """Each member's settings sub-section (training/models/members.py, the Architecture.settings of
    registry.py), null = its defaults, described by the first paragraph of its dataclass's docstring."""
    sections: dict[str, Any] = {}
    for key, settings in member_settings().items():
        summary = " ".join((settings.__doc__ or "").split("\n\n")[0].split())
        sections[key] = (settings | None, Field(None, description=f"{summary} Null = its defaults."))
    return sections


ModelConfig = create_model(
    "ModelConfig",
    __base__=_ModelSection,
    __module__=__name__,
    __doc__="Architecture of the encoder (BertConfig's keys) and each member's own settings.",
    **_encoder_fields(),
    **_member_sections(),
)
