"""Registers the relative-position members (XLNet, Transformer-XL) as checkpoint architectures, with how a recipe's
`model` section becomes their configs (see training/xlnet_config.py for `model.xlnet` / `model.transformer_xl`)."""

from __future__ import annotations

from typing import Any

from bertfactory.errors import ConfigError

from .registry import Architecture, register_architecture
from .transformer_xl import TransformerXLConfig, TransformerXLLM
from .xlnet import XLNetConfig, XLNetForPretraining

# ModelConfig fields of the absolute-position encoder that these members do not have: set to anything but the
# default they would be silently ignored, so they are refused instead
_ABSOLUTE_ONLY = {"embedding_size": None, "share_layers": "none", "num_layer_groups": 1, "num_languages": 0,
                  "type_vocab_size": 2}


def _shared_fields(model_cfg: Any, vocab_size: int, pad_token_id: int, member: str) -> dict[str, Any]:
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


def xlnet_config_from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> XLNetConfig:
    settings = model_cfg.xlnet.model_dump() if model_cfg.xlnet is not None else {}
    try:
        return XLNetConfig(**_shared_fields(model_cfg, vocab_size, pad_token_id, "XLNet"), **settings)
    except ValueError as err:
        raise ConfigError(f"model / model.xlnet: {err}") from None


def transformer_xl_config_from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> TransformerXLConfig:
    settings = model_cfg.transformer_xl.model_dump() if model_cfg.transformer_xl is not None else {}
    try:
        return TransformerXLConfig(**_shared_fields(model_cfg, vocab_size, pad_token_id, "Transformer-XL"), **settings)
    except ValueError as err:
        raise ConfigError(f"model / model.transformer_xl: {err}") from None


register_architecture(Architecture(
    name="XLNetForPretraining",
    config_from_dict=lambda data, source: XLNetConfig.from_dict(data, source=source),
    build=XLNetForPretraining,
    from_model_config=xlnet_config_from_model_config,
    description="XLNet: permutation LM with two-stream relative attention; the content stream is the backbone",
))
register_architecture(Architecture(
    name="TransformerXLLM",
    config_from_dict=lambda data, source: TransformerXLConfig.from_dict(data, source=source),
    build=TransformerXLLM,
    from_model_config=transformer_xl_config_from_model_config,
    description="Transformer-XL: causal LM with segment-level recurrence (no encoder for fine-tuning)",
))
