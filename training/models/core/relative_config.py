"""The config body the relative-position members share (RelativeConfig: XLNet's and Transformer-XL's configs add
their own settings to it, xlnet.py / transformer_xl.py), and what they take from a recipe's `model` section: the
shared encoder fields, with the absolute-position options they do not have refused. Neither member has absolute
positions: `model.max_position_embeddings`, `type_vocab_size`, `embedding_size` and layer sharing do not apply to
them (and are refused when set to non-defaults, so a recipe never silently means something else).

    config = relative_config_from_model_config(XLNetConfig, model_cfg, vocab_size=8000, pad_token_id=0,
                                               member="XLNet", section="xlnet")
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from bertfactory.errors import ConfigError

from .config_schema import MODEL_CONFIG, CheckpointConfig, config_problems, settings_dict

R = TypeVar("R", bound="RelativeConfig")


@dataclass(frozen=True, config=MODEL_CONFIG)
class RelativeConfig(CheckpointConfig):
    """The architecture fields of a relative-attention model (what `config.json` stores under `model`, followed by
    the member's own settings)."""

    vocab_size: int = Field(ge=1, description="rows of the (tied) word embeddings")
    hidden_size: int = Field(ge=1, description="width of every layer; even, for the sinusoidal relative encodings")
    num_layers: int = Field(ge=1, description="number of relative transformer layers")
    num_heads: int = Field(ge=1, description="attention heads per layer; must divide hidden_size")
    intermediate_size: int = Field(ge=1, description="width of the feed-forward inner layer")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on embeddings and sub-layer outputs "
                           "(the recipe's model.hidden_dropout)")
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on attention probabilities")
    layer_norm_eps: float = Field(1e-12, gt=0.0, description="LayerNorm epsilon")
    initializer_range: float = Field(0.02, gt=0.0, description="std of the normal weight initialisation")
    pad_token_id: int = Field(0, ge=0, description="the tokenizer's [PAD] id")

    @model_validator(mode="after")
    def _consistent_shape(self) -> "RelativeConfig":
        problems = []
        if self.hidden_size % self.num_heads:
            problems.append(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.hidden_size % 2:
            problems.append(f"hidden_size must be even for the sinusoidal relative encodings (got {self.hidden_size})")
        if not self.pad_token_id < self.vocab_size:
            problems.append(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

# ModelConfig fields of the absolute-position encoder that these members do not have: set to anything but the
# default they would be silently ignored, so they are refused instead
_ABSOLUTE_ONLY = {"embedding_size": None, "share_layers": "none", "num_layer_groups": 1, "num_languages": 0,
                  "type_vocab_size": 2}


def relative_config_from_model_config(config_cls: type[R], model_cfg: Any, vocab_size: int, pad_token_id: int,
                                      member: str, section: str) -> R:
    """`config_cls` (a RelativeConfig) from a recipe's `model` section (training.config.ModelConfig) and its
    sub-section `model.<section>` (None = the member's defaults), for a tokenizer of `vocab_size` tokens; a
    ConfigError names the section and what is wrong."""
    fields = _relative_fields(model_cfg, vocab_size, pad_token_id, member)
    try:
        return config_cls(**fields, **settings_dict(getattr(model_cfg, section)))
    except ValidationError as err:
        raise ConfigError(f"model / model.{section}: {config_problems(config_cls, err)}") from None


def _relative_fields(model_cfg: Any, vocab_size: int, pad_token_id: int, member: str) -> dict[str, Any]:
    """The RelativeConfig fields the `model` section sets; a ConfigError names any absolute-position option set to
    a non-default."""
    wrong = [f"model.{k}={getattr(model_cfg, k)!r}" for k, default in _ABSOLUTE_ONLY.items()
             if getattr(model_cfg, k) != default]
    if wrong:
        raise ConfigError(f"{member} has relative positions and no such options: {', '.join(wrong)}; remove them")
    size = model_cfg.vocab_size if model_cfg.vocab_size is not None else vocab_size
    if size < vocab_size:
        raise ConfigError(f"model.vocab_size={size} is smaller than the tokenizer's vocabulary ({vocab_size} tokens)")
    return {"vocab_size": size, "hidden_size": model_cfg.hidden_size, "num_layers": model_cfg.num_layers,
            "num_heads": model_cfg.num_heads, "intermediate_size": model_cfg.intermediate_size,
            "dropout": model_cfg.hidden_dropout, "attention_dropout": model_cfg.attention_dropout,
            "layer_norm_eps": model_cfg.layer_norm_eps, "initializer_range": model_cfg.initializer_range,
            "pad_token_id": pad_token_id}
