"""XLNet <-> transformers (`XLNetLMHeadModel` / `XLNetModel`), both ways; no `transformers` import (config.json keys,
names and shapes only). `training.hf.export_to_hf` dispatches here for checkpoints of architecture
XLNetForPreTraining, `training.hf.import_from_hf` for config.json model_type xlnet.

    export_xlnet_to_hf(RUN / "pretrain/final", "out/xlnet-hf")     # -> XLNetLMHeadModel directory
    import_xlnet_from_hf("some/xlnet-hf", "out/ours")              # -> our XLNetForPreTraining directory

Names (ours `transformer.layer.{i}.` <-> HF `transformer.layer.{i}.`): HF keeps every projection as one
[d_model, n_head, d_head] tensor, ours as nn.Linear [n_head * d_head, d_model]: q, k, v, r (positions) are our
`attention.{query,key,value,position}.weight` transposed, `o` is `attention_output.dense.weight` as it is (both
reshaped, so the conversion is a bit-exact copy). r_w_bias / r_r_bias / r_s_bias / seg_embed are our
content_bias (u) / position_bias (v) / segment_bias (b) / segment_embeddings (index 0 = same segment on both sides);
`rel_attn.layer_norm`, `ff.layer_1`, `ff.layer_2`, `ff.layer_norm` are attention_output.LayerNorm,
intermediate.dense, output.dense, output.LayerNorm; `word_embedding`, `mask_emb` ([1, 1, d] there, [d] here) and
`lm_loss.bias` (our `lm_bias`; the decoder weight is tied to the word embeddings on both sides).

What does not map, and what happens to it:
- The attention output projection `o` has no bias on either side (nor in the original XLNet), so every XLNet of
  ours exports exactly.
- Our XLNetModel's [CLS] pooler (no pretraining loss trains it) has no place in HF XLNet: left out on export,
  initialised (seeded) on import and reported.
- HF XLNet has one dropout rate for everything (`dropout`); ours has a separate attention_dropout, which is not
  written (eval outputs do not depend on it). `predict_fraction` (our K of partial prediction) is a training
  setting with no HF key; an import uses our default.
- Refused on import: attn_type 'uni', bi_data, clamp_len > 0, same_length, an ff_activation other than exact
  'gelu', an untied LM head; all are settings our relative attention does not implement.
HF XLNet adds the segment term only when `token_type_ids` is passed: pass them (zeros for one segment), as ours
always applies it.
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
from ..models.xlnet.model import XLNetConfig, XLNetForPreTraining

logger = logging.getLogger(__name__)

ARCHITECTURES = ("XLNetLMHeadModel", "XLNetModel")
_PROJECTIONS = {"q": "attention.query.weight", "k": "attention.key.weight", "v": "attention.value.weight",
                "r": "attention.position.weight"}  # HF [d, n, dh] = ours.T reshaped
_OUTPUT = ("o", "attention_output.dense.weight")  # HF [d, n, dh] = ours reshaped
_SAME = {"r_w_bias": "attention.content_bias", "r_r_bias": "attention.position_bias",
         "r_s_bias": "attention.segment_bias", "seg_embed": "attention.segment_embeddings",
         "layer_norm.weight": "attention_output.LayerNorm.weight", "layer_norm.bias": "attention_output.LayerNorm.bias"}
_FEED_FORWARD = {"layer_1": "intermediate.dense", "layer_2": "output.dense", "layer_norm": "output.LayerNorm"}
_POOLER = "transformer.pooler."


def _layer_names(prefix_hf: str, prefix_ours: str) -> dict[str, str]:
    """HF name -> our name for one layer's tensors that copy as they are."""
    names = {f"{prefix_hf}rel_attn.{k}": f"{prefix_ours}{v}" for k, v in _SAME.items()}
    for hf, ours in _FEED_FORWARD.items():
        for param in ("weight", "bias"):
            names[f"{prefix_hf}ff.{hf}.{param}"] = f"{prefix_ours}{ours}.{param}"
    return names


# ---------------------------------------------------------------------------------------------------- configs


def hf_xlnet_config(config: XLNetConfig, special_ids: Mapping[str, int]) -> dict[str, Any]:
    """Our XLNetConfig -> a `transformers` XLNetConfig dict for XLNetLMHeadModel."""
    doc = {
        "model_type": "xlnet",
        "architectures": ["XLNetLMHeadModel"],
        "vocab_size": config.vocab_size,
        "d_model": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "d_inner": config.intermediate_size,
        "ff_activation": "gelu",  # exact erf GELU, as our Intermediate
        "untie_r": True,  # per-layer u, v, b, as ours
        "attn_type": "bi",
        "bi_data": False,
        "clamp_len": -1,
        "same_length": False,
        "dropout": config.dropout,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "mem_len": config.mem_len or None,
        "reuse_len": None,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    # XLNet's <s> / </s> ids are our [CLS] / [SEP] where the tokenizer has them (HF's defaults are XLNet's ids)
    doc.update({key: special_ids[name] for key, name in (("bos_token_id", "cls"), ("eos_token_id", "sep"))
                if name in special_ids})
    return doc


def xlnet_config_from_hf(hf: Mapping[str, Any], source: str) -> XLNetConfig:
    """A transformers XLNet config.json -> our XLNetConfig; refuses what our relative attention does not compute."""
    problems = []
    archs = hf.get("architectures") or []
    if not isinstance(archs, list) or any(a not in ARCHITECTURES for a in archs):
        problems.append(f"architectures {archs!r} not supported")
    checks = [("attn_type", "bi", "attn_type {!r} (only bidirectional 'bi')"),
              ("bi_data", False, "bi_data {!r} (bidirectional data pipeline positions)"),
              ("same_length", False, "same_length {!r}"),
              ("ff_activation", "gelu", "ff_activation {!r} (only exact 'gelu')"),
              ("tie_word_embeddings", True, "tie_word_embeddings {!r} (our LM decoder is the word embeddings)")]
    for key, want, message in checks:
        if hf.get(key, want) != want:
            problems.append(message.format(hf[key]))
    clamp = hf.get("clamp_len", -1)
    if not isinstance(clamp, int) or clamp > 0:
        problems.append(f"clamp_len {clamp!r} (our relative positions are not clamped; only -1)")
    missing = [k for k in ("vocab_size", "d_model", "n_layer", "n_head", "d_inner") if k not in hf]
    if missing:
        problems.append(f"missing key(s) {', '.join(missing)}")
    if problems:
        raise ContractError(f"{source}: cannot import as XLNet: {'; '.join(problems)}. Supported: "
                            f"{', '.join(ARCHITECTURES)} with attn_type 'bi', no bi_data, clamp_len -1, exact gelu")
    dropout = hf.get("dropout", 0.1)
    values = {"vocab_size": hf["vocab_size"], "hidden_size": hf["d_model"], "num_layers": hf["n_layer"],
              "num_heads": hf["n_head"], "intermediate_size": hf["d_inner"], "dropout": dropout,
              "attention_dropout": dropout, "layer_norm_eps": hf.get("layer_norm_eps", 1e-12),
              "initializer_range": hf.get("initializer_range", 0.02), "pad_token_id": hf.get("pad_token_id", 0),
              "mem_len": hf.get("mem_len") or 0}
    return XLNetConfig.from_dict(values, source=source)


# ----------------------------------------------------------------------------------------------------- export


def xlnet_hf_state(model: XLNetForPreTraining, source: str) -> dict[str, torch.Tensor]:
    """Our XLNetForPreTraining state -> XLNetLMHeadModel names (fp32, contiguous); the pooler is left out; refuses
    any tensor it has no name for."""
    config = model.config
    d, n = config.hidden_size, config.num_heads
    state = {k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    out = {"transformer.word_embedding.weight": state.pop("transformer.word_embeddings.weight"),
           "transformer.mask_emb": state.pop("transformer.mask_emb").reshape(1, 1, d),
           "lm_loss.bias": state.pop("lm_bias")}
    for name in [k for k in state if k.startswith(_POOLER)]:
        del state[name]
    for i in range(config.num_layers):
        ours, hf = f"transformer.layer.{i}.", f"transformer.layer.{i}."
        for key, name in _PROJECTIONS.items():
            out[f"{hf}rel_attn.{key}"] = state.pop(ours + name).T.reshape(d, n, d // n)
        out[f"{hf}rel_attn.{_OUTPUT[0]}"] = state.pop(ours + _OUTPUT[1]).reshape(d, n, d // n)
        for theirs, name in _layer_names(hf, ours).items():
            out[theirs] = state.pop(name)
    if state:
        raise ContractError(f"{source}: no transformers XLNet name for parameter(s) {sorted(state)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def export_xlnet_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False,
                       layout: str | None = None) -> Path:
    """Write our XLNet model directory as a transformers XLNetLMHeadModel directory `out` (staged, published
    atomically): config.json, model.safetensors, tokenizer.json, tokenizer_config.json."""
    model_dir, out = Path(model_dir), Path(out)
    if layout not in (None, "auto", "xlnet"):
        raise ContractError(f"{model_dir / CONFIG_FILE}: an XLNet checkpoint exports only as layout 'xlnet' "
                            f"(got {layout!r})")

    def check(config: XLNetConfig) -> None:
        if config.attention_dropout != config.dropout:
            logger.warning("%s: attention_dropout %s is not written (transformers XLNet uses dropout %s everywhere)",
                           model_dir, config.attention_dropout, config.dropout)

    return export_one_dir(model_dir, out, overwrite, XLNetForPreTraining, "XLNet", state=xlnet_hf_state,
                          hf_config=hf_xlnet_config, max_length=lambda config: None, left_out="pooler left out",
                          check=check)


# ----------------------------------------------------------------------------------------------------- import


def _ours_from_hf(hf_state: Mapping[str, torch.Tensor], config: XLNetConfig, source: Path
                  ) -> dict[str, torch.Tensor]:
    d, n = config.hidden_size, config.num_heads
    state = {("transformer." + k if k.startswith(("word_embedding.", "mask_emb", "layer.")) else k): v
             for k, v in hf_state.items()}  # a bare XLNetModel's names
    tied = state.pop("lm_loss.weight", None)
    out = {"transformer.word_embeddings.weight": state.pop("transformer.word_embedding.weight", None),
           "transformer.mask_emb": state.pop("transformer.mask_emb", None)}
    if "lm_loss.bias" in state:
        out["lm_bias"] = state.pop("lm_loss.bias")
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise ContractError(f"{source}: missing tensor(s) for {missing}")
    if tied is not None and not torch.equal(tied, out["transformer.word_embeddings.weight"]):
        raise ContractError(f"{source}: lm_loss.weight differs from transformer.word_embedding.weight (an untied LM "
                            "head is not supported)")
    out["transformer.mask_emb"] = out["transformer.mask_emb"].reshape(-1)
    for i in range(config.num_layers):
        hf, ours = f"transformer.layer.{i}.", f"transformer.layer.{i}."
        try:
            for key, name in _PROJECTIONS.items():
                out[ours + name] = state.pop(f"{hf}rel_attn.{key}").reshape(d, d).T
            o = state.pop(f"{hf}rel_attn.{_OUTPUT[0]}")
            out[ours + _OUTPUT[1]] = o.reshape(d, d)
            for theirs, name in _layer_names(hf, ours).items():
                out[name] = state.pop(theirs)
        except KeyError as err:
            raise ContractError(f"{source}: missing tensor {err.args[0]} (config.json says {config.num_layers} "
                                "layers)") from None
        except RuntimeError as err:  # reshape of a tensor of the wrong size
            raise ContractError(f"{source}: layer {i} does not match config.json: {err}") from None
    if state:
        raise ContractError(f"{source}: tensor(s) {sorted(state)[:8]} belong to no supported XLNet architecture "
                            f"({', '.join(ARCHITECTURES)})")
    return {k: v.contiguous() for k, v in out.items()}


def import_xlnet_from_hf(hf_dir: Path, out: Path, hf_config: Mapping[str, Any], seed: int = 0) -> HfImport:
    """A transformers XLNetLMHeadModel / XLNetModel directory -> our XLNetForPreTraining directory `out`. Parts the
    checkpoint lacks (the pooler always; the LM bias for XLNetModel) are initialised from torch seed `seed`."""
    config_path = hf_dir / CONFIG_FILE
    config = xlnet_config_from_hf(hf_config, str(config_path))
    tokenizer_path = hf_tokenizer_file(hf_dir)
    state = _ours_from_hf(read_hf_weights(hf_dir), config, hf_dir)
    model = seeded(lambda: XLNetForPreTraining(config), seed)
    initialised, _ = load_mapped(model, state, hf_dir, config_path, {_POOLER: "pooler", "lm_bias": "LM bias"})
    archs = hf_config.get("architectures") or ["XLNet (no 'architectures' in config.json)"]
    return finish_import(model, config, tokenizer_path, out, hf_dir, archs[0], initialised, seed)
