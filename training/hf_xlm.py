"""XLM export to transformers (no `transformers` import: config.json keys, names and shapes only).
`training.hf.export_to_hf` dispatches here for checkpoints of architecture XlmForPreTraining.

    export_xlm_to_hf(RUN / "pretrain/final", "out/xlm-hf", layout="xlm-encoder")   # -> XLMModel directory

How our XLM (training/models/xlm.py: the BERT encoder + language embeddings, post-LN, learned absolute positions,
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
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import torch

from bertfactory.errors import ContractError

from .checkpoint import CONFIG_FILE, MODEL_FILE, load_pretrained, read_checkpoint_config
from .hf import _check_out, hf_tokenizer_config, write_hf_dir
from .models.xlm import XlmConfig, XlmForPreTraining

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
    _check_out(out, model_dir, overwrite)
    model, config, tokenizer_path = load_pretrained(model_dir)
    if not isinstance(model, XlmForPreTraining):
        raise ContractError(f"{model_dir / CONFIG_FILE}: architecture {type(model).__name__} is not XLM")
    _check_exportable(config, layout, str(model_dir / CONFIG_FILE))
    state = xlm_hf_state(model, str(model_dir / MODEL_FILE))
    special_ids = read_checkpoint_config(model_dir)["tokenizer"].get("special_ids", {})
    write_hf_dir(out, state, hf_xlm_config(config, special_ids), tokenizer_path,
                 hf_tokenizer_config(tokenizer_path, special_ids, config.max_position_embeddings))
    logger.info("exported %s -> %s (transformers XLMModel, %d tensors; MLM head and pooler left out)", model_dir,
                out, len(state))
    return out
