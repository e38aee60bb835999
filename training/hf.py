"""Import Hugging Face BERT checkpoints (config.json + model.safetensors of a `BertModel`/`BertForPreTraining`)
into our `BertModel`: the encoder's parameter names are the same, so the import is a config translation and a
strict, shape-checked state-dict load. Used to take a published model as a reference or teacher.

    from training.hf import load_hf_bert_encoder
    encoder, config = load_hf_bert_encoder(sample_path("minilm"))   # eval mode
"""

from __future__ import annotations

from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import read_json_file

from .checkpoint import load_weights
from .models.bert import BertConfig, BertModel

# HF config key -> BertConfig field
_HF_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
}


def bert_config_from_hf(hf: dict, source: str = "config.json") -> BertConfig:
    """Translate a HF BERT config; refuses what our encoder does not implement (another activation or
    position-embedding type)."""
    if not isinstance(hf, dict):
        raise ContractError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    if hf.get("model_type") != "bert":
        raise ContractError(f"{source}: model_type is {hf.get('model_type')!r}, expected 'bert'")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise ContractError(f"{source}: hidden_act {hf['hidden_act']!r} is not supported (only exact 'gelu')")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ContractError(f"{source}: position_embedding_type {hf['position_embedding_type']!r} is not supported")
    values = {ours: hf[theirs] for theirs, ours in _HF_FIELDS.items() if theirs in hf}
    return BertConfig.from_dict(values, source=source)


def load_hf_bert_encoder(directory: str | Path) -> tuple[BertModel, BertConfig]:
    """A HF BERT directory -> (our BertModel with its weights, in eval mode, BertConfig)."""
    directory = Path(directory)
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise ContractError(f"{directory} must hold config.json and model.safetensors of a HF BERT model")
    config = bert_config_from_hf(read_json_file(config_path, f"no config.json in {directory}"), source=str(config_path))
    model = BertModel(config)
    load_weights(model, weights_path, rename=_hf_encoder_name)
    return model.eval(), config


def _hf_encoder_name(name: str) -> str | None:
    """HF state-dict name -> ours; None drops it (buffers and heads that BertModel does not have)."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    if name.endswith("position_ids") or name.startswith("cls."):
        return None
    return name
