"""What the relative-position members (XLNet, Transformer-XL) take from a recipe's `model` section: the shared
encoder fields, with the absolute-position options they do not have refused (see training/xlnet_config.py for
`model.xlnet` / `model.transformer_xl`).

    fields = relative_fields_from_model_config(model_cfg, vocab_size=8000, pad_token_id=0, member="XLNet")
"""

from __future__ import annotations

from typing import Any

from bertfactory.errors import ConfigError

# ModelConfig fields of the absolute-position encoder that these members do not have: set to anything but the
# default they would be silently ignored, so they are refused instead
_ABSOLUTE_ONLY = {"embedding_size": None, "share_layers": "none", "num_layer_groups": 1, "num_languages": 0,
                  "type_vocab_size": 2}


def relative_fields_from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int,
                                      member: str) -> dict[str, Any]:
    """The relative config fields a recipe's `model` section (training.config.ModelConfig) sets, for a tokenizer
    of `vocab_size` tokens; a ConfigError names any absolute-position option set to a non-default."""
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
