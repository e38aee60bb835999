"""XLM <-> transformers, the encoder both ways (no `transformers` import: config.json keys, names and shapes only).
`training.hf.export_to_hf` dispatches here for checkpoints of architecture XlmForPreTraining,
`training.hf.import_from_hf` for config.json model_type xlm.

    export_xlm_to_hf(RUN / "pretrain/final", "out/xlm-hf", layout="xlm-encoder")   # -> XLMModel directory
    import_xlm_from_hf(Path("some/xlm-hf"), Path("out/ours"), hf_config, seed=0)    # -> our XlmForPreTraining

How our XLM (training/models/xlm/model.py: the BERT encoder + language embeddings, post-LN, learned absolute positions,
exact GELU) maps onto transformers' XLM (XLMModel / XLMWithLMHeadModel):
- encoder: maps exactly. `bert.embeddings.{word_embeddings, position_embeddings, language_embeddings, LayerNorm}`
  -> `embeddings`, `position_embeddings`, `lang_embeddings`, `layer_norm_emb`; per layer i
  `attention.self.{query,key,value}` / `attention.output.dense` -> `attentions.i.{q,k,v,out}_lin`,
  `attention.output.LayerNorm` -> `layer_norm1.i`, `intermediate.dense` / `output.dense` -> `ffns.i.lin{1,2}`,
  `output.LayerNorm` -> `layer_norm2.i` (post-LN both, learned positions: sinusoidal_embeddings false).
- our single token-type row (XLM recipes use type_vocab_size 1) is a constant added to every token: it is folded
  into the position rows (HF XLM has no token-type table; it adds *word* embeddings for token_type_ids, so do not
  pass token_type_ids to the exported model). With num_languages 1 the language row is folded in the same way
  (HF XLM creates lang_embeddings only for n_langs > 1); with more, they map to lang_embeddings, and HF adds them
  only when `langs` is passed (ours defaults every token to `language_id`, written as config.json `lang_id`).
- refused, naming the part: the masked-LM head. Ours is BERT's (dense, GELU, LayerNorm, then the tied decoder);
  HF's XLMPredLayer is the tied projection alone, so `mlm_head.dense` / `mlm_head.LayerNorm` have no place and
  layout `xlm` (XLMWithLMHeadModel) is refused; layout `xlm-encoder` writes the encoder as XLMModel (what
  fine-tuning uses: AutoModel, XLMForSequenceClassification, ...), leaving the head out. Also refused:
  type_vocab_size > 1, factorised embeddings, shared layers and an FFN width other than 4 x hidden (HF XLM fixes
  it), each naming the config field. The [CLS] pooler (no XLM loss trains it) is left out.

Import (XLMModel / XLMWithLMHeadModel -> our XlmForPreTraining) is the inverse: the token-type row and, without
HF language embeddings, the single language row are zeros (exact); learned or sinusoidal HF positions are both a
stored table and load as our learned positions; the HF prediction layer (`pred_layer.proj`, tied) is dropped and
reported, and our MLM head (its transform has no HF counterpart) and pooler are initialised (seeded). A config
with `causal: true` (a CLM model) is imported with a note: call our model with causal=True. Refused: relu
(`gelu_activation: false`), adaptive softmax (`asm`), a decoder (`is_encoder: false`).
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
from ..models.xlm.model import XlmConfig, XlmForPreTraining

logger = logging.getLogger(__name__)

LAYOUTS = ("xlm", "xlm-encoder")
_LAYER = {"attention.self.query": "attentions.{}.q_lin", "attention.self.key": "attentions.{}.k_lin",
          "attention.self.value": "attentions.{}.v_lin", "attention.output.dense": "attentions.{}.out_lin",
          "attention.output.LayerNorm": "layer_norm1.{}", "intermediate.dense": "ffns.{}.lin1",
          "output.dense": "ffns.{}.lin2", "output.LayerNorm": "layer_norm2.{}"}


def _check_exportable(config: XlmConfig, layout: str | None, source: str) -> None:
    if layout in (None, "auto", "xlm"):
        raise ContractError(f"{source}: cannot export as transformers XLMWithLMHeadModel: parameters "
                            "mlm_head.dense and mlm_head.LayerNorm (our masked-LM head's transform: dense, GELU, "
                            "LayerNorm before the tied decoder) have no place in its XLMPredLayer, which is the tied "
                            "projection alone; export the encoder as XLMModel with layout 'xlm-encoder'")
    if layout not in LAYOUTS:
        raise ContractError(f"{source}: an XLM checkpoint exports only as layout 'xlm-encoder' (got {layout!r})")
    problems = []
    if config.type_vocab_size != 1:
        problems.append(f"model.type_vocab_size={config.type_vocab_size} (HF XLM has no token-type embeddings; "
                        "only a single row, folded into the positions, maps)")
    if config.embedding_width != config.hidden_size:
        problems.append(f"model.embedding_size={config.embedding_size} (HF XLM has no factorised embeddings)")
    if config.share_layers != "none":
        problems.append(f"model.share_layers={config.share_layers!r} (HF XLM shares no layers)")
    if config.intermediate_size != 4 * config.hidden_size:
        problems.append(f"model.intermediate_size={config.intermediate_size} (HF XLM's FFN is 4 x hidden = "
                        f"{4 * config.hidden_size})")
    if problems:
        raise ContractError(f"{source}: cannot export as transformers XLMModel: {'; '.join(problems)}")


def hf_xlm_config(config: XlmConfig, special_ids: Mapping[str, int]) -> dict[str, Any]:
    """Our XlmConfig -> a transformers XLMConfig dict for XLMModel."""
    doc = {
        "model_type": "xlm",
        "architectures": ["XLMModel"],
        "vocab_size": config.vocab_size,
        "emb_dim": config.hidden_size,
        "n_layers": config.num_layers,
        "n_heads": config.num_heads,
        "dropout": config.hidden_dropout,
        "attention_dropout": config.attention_dropout,
        "gelu_activation": True,  # exact erf GELU, as our Intermediate
        "sinusoidal_embeddings": False,
        "causal": False,  # bidirectional use; a CLM-trained model still loads, pass causal True to use it so
        "asm": False,
        "n_langs": config.num_languages,
        "use_lang_emb": True,
        "lang_id": config.language_id,
        "max_position_embeddings": config.max_position_embeddings,
        "layer_norm_eps": config.layer_norm_eps,
        "init_std": config.initializer_range,
        "embed_init_std": config.initializer_range,
        "is_encoder": True,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    for key, name in (("bos_token_id", "cls"), ("eos_token_id", "sep"), ("unk_index", "unk"),
                      ("mask_index", "mask"), ("mask_token_id", "mask")):
        if name in special_ids:
            doc[key] = special_ids[name]
    return doc


def xlm_hf_state(model: XlmForPreTraining, source: str) -> dict[str, torch.Tensor]:
    """Our XLM encoder under XLMModel names (fp32); the MLM head and pooler are left out."""
    config = model.config
    state = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()
             if not k.startswith(("mlm_head.", "bert.pooler."))}
    languages = state.pop("bert.embeddings.language_embeddings.weight")
    # constants added to every token: the token-type row, and the language row when HF has no language table
    constant = state.pop("bert.embeddings.token_type_embeddings.weight")[0]
    out = {}
    if config.num_languages > 1:
        out["lang_embeddings.weight"] = languages
    else:
        constant = constant + languages[config.language_id]
    out["position_embeddings.weight"] = state.pop("bert.embeddings.position_embeddings.weight") + constant
    out["embeddings.weight"] = state.pop("bert.embeddings.word_embeddings.weight")
    for param in ("weight", "bias"):
        out[f"layer_norm_emb.{param}"] = state.pop(f"bert.embeddings.LayerNorm.{param}")
    for i in range(config.num_layers):
        for ours, theirs in _LAYER.items():
            for param in ("weight", "bias"):
                out[f"{theirs.format(i)}.{param}"] = state.pop(f"bert.encoder.layer.{i}.{ours}.{param}")
    if state:
        raise ContractError(f"{source}: no transformers XLMModel name for parameter(s) {sorted(state)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def export_xlm_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False,
                     layout: str | None = None) -> Path:
    """Write our XLM model directory's encoder as a transformers XLMModel directory `out` (layout 'xlm-encoder';
    'xlm' / auto is refused, see the module docstring)."""
    model_dir, out = Path(model_dir), Path(out)
    return export_one_dir(model_dir, out, overwrite, XlmForPreTraining, "XLM", state=xlm_hf_state,
                          hf_config=hf_xlm_config, max_length=lambda config: config.max_position_embeddings,
                          left_out="MLM head and pooler left out",
                          check=lambda config: _check_exportable(config, layout, str(model_dir / CONFIG_FILE)))


# ----------------------------------------------------------------------------------------------------- import

ARCHITECTURES = ("XLMModel", "XLMWithLMHeadModel")


def xlm_config_from_hf(hf: Mapping[str, Any], source: str) -> XlmConfig:
    """A transformers XLM config.json -> our XlmConfig (FFN 4 x emb_dim as HF's); refuses what ours does not compute."""
    problems = []
    archs = hf.get("architectures") or []
    if not isinstance(archs, list) or any(a not in ARCHITECTURES for a in archs):
        problems.append(f"architectures {archs!r} not supported")
    for key, want, why in (("gelu_activation", True, "relu feed-forward"), ("asm", False, "adaptive softmax"),
                           ("is_encoder", True, "a decoder")):
        if hf.get(key, want) != want:
            problems.append(f"{key} {hf[key]!r} ({why})")
    vocab = hf.get("vocab_size", hf.get("n_words"))
    missing = [k for k, v in (("vocab_size", vocab), ("emb_dim", hf.get("emb_dim")), ("n_layers", hf.get("n_layers")),
                              ("n_heads", hf.get("n_heads"))) if v is None]
    if missing:
        problems.append(f"missing key(s) {', '.join(missing)}")
    if problems:
        raise ContractError(f"{source}: cannot import as XLM: {'; '.join(problems)}. Supported: "
                            f"{', '.join(ARCHITECTURES)} with GELU, no adaptive softmax, encoder")
    languages = hf.get("n_langs", 1) if hf.get("use_lang_emb", True) and hf.get("n_langs", 1) > 1 else 1
    language_id = hf.get("lang_id", 0) if 0 <= hf.get("lang_id", 0) < languages else 0
    values = {"vocab_size": vocab, "hidden_size": hf["emb_dim"], "num_layers": hf["n_layers"],
              "num_heads": hf["n_heads"], "intermediate_size": 4 * hf["emb_dim"],
              "max_position_embeddings": hf.get("max_position_embeddings", 512), "type_vocab_size": 1,
              "hidden_dropout": hf.get("dropout", 0.1), "attention_dropout": hf.get("attention_dropout", 0.1),
              "layer_norm_eps": hf.get("layer_norm_eps", 1e-12), "initializer_range": hf.get("init_std", 0.02),
              "pad_token_id": hf.get("pad_token_id", hf.get("pad_index", 2)), "num_languages": languages,
              "language_id": language_id}
    return XlmConfig.from_dict(values, source=source)


def _ours_from_hf(hf_state: Mapping[str, torch.Tensor], config: XlmConfig, source: Path
                  ) -> tuple[dict[str, torch.Tensor], list[str]]:
    state = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in hf_state.items()
             if not k.endswith("position_ids")}
    dropped = sorted(k for k in state if k.startswith("pred_layer."))
    for name in dropped:
        del state[name]
    h = config.hidden_size
    try:
        words = state.pop("embeddings.weight")
        out = {"bert.embeddings.word_embeddings.weight": words,
               "bert.embeddings.position_embeddings.weight": state.pop("position_embeddings.weight"),
               "bert.embeddings.token_type_embeddings.weight": words.new_zeros(1, h),
               "bert.embeddings.language_embeddings.weight": (state.pop("lang_embeddings.weight")
                                                              if config.num_languages > 1 else words.new_zeros(1, h))}
        for param in ("weight", "bias"):
            out[f"bert.embeddings.LayerNorm.{param}"] = state.pop(f"layer_norm_emb.{param}")
        for i in range(config.num_layers):
            for ours, theirs in _LAYER.items():
                for param in ("weight", "bias"):
                    out[f"bert.encoder.layer.{i}.{ours}.{param}"] = state.pop(f"{theirs.format(i)}.{param}")
    except KeyError as err:
        raise ContractError(f"{source}: missing tensor {err.args[0]} (config.json says {config.num_layers} layers, "
                            f"{config.num_languages} language embedding row(s))") from None
    if state:
        raise ContractError(f"{source}: tensor(s) {sorted(state)[:8]} belong to no supported XLM architecture "
                            f"({', '.join(ARCHITECTURES)})")
    return out, [f"{name} (the HF tied prediction layer; our MLM head is initialised)" for name in dropped]


def import_xlm_from_hf(hf_dir: Path, out: Path, hf_config: Mapping[str, Any], seed: int = 0) -> HfImport:
    """A transformers XLMModel / XLMWithLMHeadModel directory -> our XlmForPreTraining directory `out` (the
    encoder exact; MLM head and pooler initialised from torch seed `seed`)."""
    config_path = hf_dir / CONFIG_FILE
    config = xlm_config_from_hf(hf_config, str(config_path))
    tokenizer_path = hf_tokenizer_file(hf_dir)
    state, dropped = _ours_from_hf(read_hf_weights(hf_dir), config, hf_dir)
    model = seeded(lambda: XlmForPreTraining(config), seed)
    initialised, _ = load_mapped(model, state, hf_dir, config_path, {"bert.pooler.": "pooler", "mlm_head.": "MLM head"})
    if hf_config.get("causal"):
        dropped.append("config causal: true (a CLM model; call ours with causal=True)")
        logger.warning("%s is a causal (CLM) XLM: call our model with causal=True", hf_dir)
    archs = hf_config.get("architectures") or ["XLM (no 'architectures' in config.json)"]
    return finish_import(model, config, tokenizer_path, out, hf_dir, archs[0], initialised, seed, tuple(dropped))
