"""ModernBERT <-> transformers' ModernBertForMaskedLM, both ways (no `transformers` import: config.json keys, names
and shapes only). `training.hf.export_to_hf` dispatches here for checkpoints of architecture ModernBertForMaskedLM,
`training.hf.import_from_hf` for config.json model_type modernbert.

    export_modernbert_to_hf(RUN / "pretrain/final", "out/modernbert-hf")     # -> ModernBertForMaskedLM directory
    import_modernbert_from_hf(Path("some/modernbert"), Path("out/ours"), hf_config, seed=0)

Names (ours -> transformers), per layer i:
- `bert.embeddings.word_embeddings` / `.LayerNorm` -> `model.embeddings.tok_embeddings` / `.norm`;
- `attention.self.{query,key,value}` -> `model.layers.i.attn.Wqkv` (the three stacked in that order, as
  transformers splits its output), `attention.output.dense` -> `attn.Wo`, `attention.input_norm` -> `attn_norm`
  (none in layer 0 on either side), `intermediate.input_norm` -> `mlp_norm`, `intermediate.dense` -> `mlp.Wi` (the
  GELU half first, then the gate: transformers' chunk order), `output.dense` -> `mlp.Wo`;
- `bert.final_norm` -> `model.final_norm`; `mlm_head.dense` / `.LayerNorm` -> `head.dense` / `head.norm`,
  `mlm_head.bias` -> `decoder.bias` (the decoder weight is tied to the word embeddings on both sides, not stored).
Left out on export: the [CLS] pooler (transformers' classifiers pool with their own head; no pretraining loss
trains ours); initialised (seeded) on import, with the MLM head when the checkpoint is a bare ModernBertModel.

Config: global_attn_every_n_layers becomes transformers' `layer_types` (full_attention at i % n == 0), the two
rotary bases its `rope_parameters` (and the older `global_rope_theta` / `local_rope_theta` keys, for transformers
4.x), layer_norm_eps `norm_eps`. Dropout is a training-time difference only: ours applies hidden_dropout after each
block's output projection, transformers' mlp_dropout before the MLP's; export writes embedding_dropout and
mlp_dropout = hidden_dropout. Refused on import, naming the key: biases (attention_bias, mlp_bias, norm_bias), an
untied or bias-less decoder, activations other than exact GELU, rotary scaling, and layer patterns that are not
"global every n layers".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import torch

from bertfactory.errors import ContractError

from ..checkpoint import CONFIG_FILE
from .files import (HfImport, export_one_dir, finish_import, hf_tokenizer_file, load_mapped, read_hf_weights,
                    seeded)
from ..models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM

logger = logging.getLogger(__name__)

ARCHITECTURES = ("ModernBertForMaskedLM", "ModernBertModel")
_GLOBAL, _LOCAL = "full_attention", "sliding_attention"
# per-layer tensors other than the fused Wqkv: ours (under bert.encoder.layer.i.) -> transformers' (model.layers.i.)
_LAYER = {"attention.output.dense.weight": "attn.Wo.weight", "attention.input_norm.weight": "attn_norm.weight",
          "intermediate.input_norm.weight": "mlp_norm.weight", "intermediate.dense.weight": "mlp.Wi.weight",
          "output.dense.weight": "mlp.Wo.weight"}
_QKV = ("query", "key", "value")
_OUTSIDE = {"bert.embeddings.word_embeddings.weight": "model.embeddings.tok_embeddings.weight",
            "bert.embeddings.LayerNorm.weight": "model.embeddings.norm.weight",
            "bert.final_norm.weight": "model.final_norm.weight",
            "mlm_head.dense.weight": "head.dense.weight", "mlm_head.LayerNorm.weight": "head.norm.weight",
            "mlm_head.bias": "decoder.bias"}
_OPTIONAL_PARTS = {"bert.pooler.": "pooler", "mlm_head.": "MLM head"}


def layer_types(config: ModernBertConfig) -> list[str]:
    return [_GLOBAL if config.is_global(i) else _LOCAL for i in range(config.num_layers)]


def hf_modernbert_config(config: ModernBertConfig, special_ids: Mapping[str, int]) -> dict[str, Any]:
    """Our ModernBertConfig -> a transformers ModernBertConfig dict for ModernBertForMaskedLM."""
    doc = {
        "model_type": "modernbert",
        "architectures": ["ModernBertForMaskedLM"],
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "hidden_activation": "gelu",  # exact (erf) GELU in the GeGLU, as ours
        "classifier_activation": "gelu",  # the MLM head's
        "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": config.initializer_range,
        "norm_eps": config.layer_norm_eps,
        "norm_bias": False, "attention_bias": False, "mlp_bias": False, "classifier_bias": False,
        "decoder_bias": True,
        "attention_dropout": config.attention_dropout,
        "embedding_dropout": config.hidden_dropout,
        "mlp_dropout": config.hidden_dropout,
        "local_attention": config.local_attention,
        "layer_types": layer_types(config),
        "global_attn_every_n_layers": config.global_attn_every_n_layers,
        "rope_parameters": {_GLOBAL: {"rope_type": "default", "rope_theta": config.global_rope_theta},
                            _LOCAL: {"rope_type": "default", "rope_theta": config.local_rope_theta}},
        "global_rope_theta": config.global_rope_theta,
        "local_rope_theta": config.local_rope_theta,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
        "sparse_prediction": False,
        "dtype": "float32",
    }
    for key, name in (("bos_token_id", "cls"), ("cls_token_id", "cls"), ("eos_token_id", "sep"),
                      ("sep_token_id", "sep")):
        # null when the tokenizer has no such token (transformers' defaults are ModernBERT-base's ids)
        doc[key] = special_ids.get(name)
    return doc


def modernbert_hf_state(model: ModernBertForMaskedLM, source: str) -> dict[str, torch.Tensor]:
    """Our weights under transformers' ModernBertForMaskedLM names (fp32); the pooler is left out."""
    state = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()
             if not k.startswith("bert.pooler.")}
    out = {theirs: state.pop(ours) for ours, theirs in _OUTSIDE.items()}
    for i in range(model.config.num_layers):
        prefix = f"bert.encoder.layer.{i}."
        out[f"model.layers.{i}.attn.Wqkv.weight"] = torch.cat(
            [state.pop(f"{prefix}attention.self.{name}.weight") for name in _QKV])
        for ours, theirs in _LAYER.items():
            if prefix + ours in state:  # layer 0 has no attention input norm
                out[f"model.layers.{i}.{theirs}"] = state.pop(prefix + ours)
    if state:
        raise ContractError(f"{source}: no transformers ModernBertForMaskedLM name for parameter(s) "
                            f"{sorted(state)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def export_modernbert_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False,
                            layout: str | None = None) -> Path:
    """Write our ModernBERT model directory as a transformers ModernBertForMaskedLM directory `out` (the one
    layout: None, 'auto' or 'modernbert')."""
    model_dir, out = Path(model_dir), Path(out)
    if layout not in (None, "auto", "modernbert"):
        raise ContractError(f"{model_dir / CONFIG_FILE}: a ModernBERT checkpoint exports only as layout "
                            f"'modernbert' (transformers ModernBertForMaskedLM), got {layout!r}")
    return export_one_dir(model_dir, out, overwrite, ModernBertForMaskedLM, "ModernBERT", state=modernbert_hf_state,
                          hf_config=hf_modernbert_config, max_length=lambda config: config.max_position_embeddings,
                          left_out="pooler left out")


# ----------------------------------------------------------------------------------------------------- import


def _global_every(hf: Mapping[str, Any], layers: int, problems: list[str]) -> int:
    """global_attn_every_n_layers from transformers' `layer_types` (5.x) or the key itself (4.x)."""
    types = hf.get("layer_types")
    if types is None:
        return int(hf.get("global_attn_every_n_layers", 3))
    full = [i for i, kind in enumerate(types) if kind == _GLOBAL]
    every = full[1] if len(full) > 1 else max(layers, 1)
    expected = [_GLOBAL if i % every == 0 else _LOCAL for i in range(layers)]
    if list(types) != expected:
        problems.append(f"layer_types {types!r} (ours: full_attention every n layers from layer 0, "
                        "sliding_attention elsewhere)")
    return every


def _rope_theta(hf: Mapping[str, Any], kind: str, legacy_key: str, default: float, problems: list[str]) -> float:
    params = (hf.get("rope_parameters") or {}).get(kind) or {}
    if params.get("rope_type", "default") != "default":
        problems.append(f"rope_parameters.{kind}.rope_type {params['rope_type']!r} (ours: default, no scaling)")
    return float(params.get("rope_theta", hf.get(legacy_key, default)))


def modernbert_config_from_hf(hf: Mapping[str, Any], source: str) -> ModernBertConfig:
    """A transformers ModernBERT config.json -> our ModernBertConfig; refuses what ours does not compute."""
    problems = []
    archs = hf.get("architectures") or []
    if not isinstance(archs, list) or any(a not in ARCHITECTURES for a in archs):
        problems.append(f"architectures {archs!r}")
    for key, want in (("hidden_activation", "gelu"), ("classifier_activation", "gelu"), ("norm_bias", False),
                      ("attention_bias", False), ("mlp_bias", False), ("classifier_bias", False),
                      ("decoder_bias", True), ("tie_word_embeddings", True)):
        if hf.get(key, want) != want:
            problems.append(f"{key} {hf[key]!r} (ours: {want!r})")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size") if k not in hf]
    if missing:
        problems.append(f"missing key(s) {', '.join(missing)}")
        raise ContractError(f"{source}: cannot import as ModernBERT: {'; '.join(problems)}")
    every = _global_every(hf, hf["num_hidden_layers"], problems)
    thetas = (_rope_theta(hf, _GLOBAL, "global_rope_theta", 160_000.0, problems),
              _rope_theta(hf, _LOCAL, "local_rope_theta", 10_000.0, problems))
    if problems:
        raise ContractError(f"{source}: cannot import as ModernBERT: {'; '.join(problems)}. Supported: "
                            f"{', '.join(ARCHITECTURES)} without biases, exact GELU, a tied decoder with bias")
    values = {"vocab_size": hf["vocab_size"], "hidden_size": hf["hidden_size"], "num_layers": hf["num_hidden_layers"],
              "num_heads": hf["num_attention_heads"], "intermediate_size": hf["intermediate_size"],
              "max_position_embeddings": hf.get("max_position_embeddings", 8192),
              "hidden_dropout": float(hf.get("embedding_dropout", 0.0)),
              "attention_dropout": float(hf.get("attention_dropout", 0.0)),
              "layer_norm_eps": float(hf.get("norm_eps", 1e-5)),
              "initializer_range": float(hf.get("initializer_range", 0.02)),
              "pad_token_id": hf.get("pad_token_id") if hf.get("pad_token_id") is not None else 0,
              "global_attn_every_n_layers": every, "local_attention": hf.get("local_attention", 128),
              "global_rope_theta": thetas[0], "local_rope_theta": thetas[1]}
    return ModernBertConfig.from_dict(values, source=source)


def _ours_from_hf(hf_state: Mapping[str, torch.Tensor], config: ModernBertConfig, source: Path
                  ) -> dict[str, torch.Tensor]:
    # a bare ModernBertModel is saved without the "model." prefix
    state = {k if k.startswith(("model.", "head.", "decoder.")) else "model." + k: v for k, v in hf_state.items()}
    decoder = state.pop("decoder.weight", None)
    words = state.get("model.embeddings.tok_embeddings.weight")
    if decoder is not None and words is not None and not torch.equal(decoder, words):
        raise ContractError(f"{source}: decoder.weight differs from model.embeddings.tok_embeddings.weight (an "
                            "untied MLM decoder is not supported)")
    out = {ours: state.pop(theirs) for ours, theirs in _OUTSIDE.items() if theirs in state}
    h = config.hidden_size
    try:
        for i in range(config.num_layers):
            prefix = f"bert.encoder.layer.{i}."
            qkv = state.pop(f"model.layers.{i}.attn.Wqkv.weight")
            for index, name in enumerate(_QKV):
                out[f"{prefix}attention.self.{name}.weight"] = qkv[index * h:(index + 1) * h]
            for ours, theirs in _LAYER.items():
                if i == 0 and ours.startswith("attention.input_norm"):
                    continue
                out[prefix + ours] = state.pop(f"model.layers.{i}.{theirs}")
    except KeyError as err:
        raise ContractError(f"{source}: missing tensor {err.args[0]} (config.json says {config.num_layers} "
                            "layers)") from None
    if state:
        raise ContractError(f"{source}: tensor(s) {sorted(state)[:8]} belong to no supported ModernBERT architecture "
                            f"({', '.join(ARCHITECTURES)})")
    return out


def import_modernbert_from_hf(hf_dir: Path, out: Path, hf_config: Mapping[str, Any], seed: int = 0) -> HfImport:
    """A transformers ModernBertForMaskedLM / ModernBertModel directory -> our ModernBertForMaskedLM directory
    `out` (the pooler, and the MLM head of a bare ModernBertModel, initialised from torch seed `seed`)."""
    config_path = hf_dir / CONFIG_FILE
    config = modernbert_config_from_hf(hf_config, str(config_path))
    tokenizer_path = hf_tokenizer_file(hf_dir)
    state = _ours_from_hf(read_hf_weights(hf_dir), config, hf_dir)
    model = seeded(lambda: ModernBertForMaskedLM(config), seed)
    initialised, _ = load_mapped(model, state, hf_dir, config_path, _OPTIONAL_PARTS)
    archs = hf_config.get("architectures") or ["ModernBERT (no 'architectures' in config.json)"]
    return finish_import(model, config, tokenizer_path, out, hf_dir, archs[0], initialised, seed)
