"""Which `transformers` class layout an export of our BertForPreTraining writes, and the RoBERTa and ALBERT layouts
(the BERT layout is training/hf.py's own). No `transformers` import: names, shapes and config.json keys only.

- `bert`: BertForPreTraining (training/hf.py).
- `roberta`: RobertaForMaskedLM. Names `roberta.*` and `lm_head.{dense,layer_norm,bias}`; the pooler is kept
  (`roberta.pooler.dense`, as in the released roberta-base; AutoModel loads it, the masked-LM class ignores it);
  the next-sentence head is left out (RoBERTa has none: under objective `mlm` it is never trained). HF RoBERTa
  numbers the position of the t-th real token padding_idx + 1 + t, so our position rows are written from row
  pad_id + 1 on (rows before it stay zero: only padding reads row pad_id) and max_position_embeddings grows by
  pad_id + 1 (roberta-base: 512 + 2 = 514).
- `albert`: AlbertForPreTraining. HF ALBERT shares whole layers within `num_hidden_groups` groups, so our
  share_layers `all` (G groups -> G HF groups) and `none` (L groups of one layer each) map exactly; `attention` /
  `ffn` (sharing one sub-block only) cannot be expressed and are refused. Without factorised embeddings (E = H) HF
  still applies `embedding_hidden_mapping_in`, written as the identity. The SOP head is `sop_classifier`
  (our `nsp_head`; trained on sentence-order labels under objective `mlm_sop`).

`choose_layout` picks the layout from the checkpoint: structure first (factorised embeddings or shared layers can
only be ALBERT), then the objective recorded by pretraining (config.json `training.fingerprint.pretrain.objective`:
mlm_nsp -> bert, mlm -> roberta, mlm_sop -> albert), then type_vocab_size 1 -> roberta, else bert.

    layout = choose_layout(doc, config, requested=None, source="RUN/pretrain/final/config.json")
    state, hf_config = export_layout(layout, model, config, special_ids, base_config)
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from bertfactory.errors import ContractError

from .models.bert import BertConfig

LAYOUTS = ("bert", "roberta", "albert")
HF_CLASSES = {"bert": "BertForPreTraining", "roberta": "RobertaForMaskedLM", "albert": "AlbertForPreTraining"}
OBJECTIVE_LAYOUTS = {"mlm_nsp": "bert", "mlm": "roberta", "mlm_sop": "albert"}

_ROBERTA_HEADS = {
    "mlm_head.dense.weight": "lm_head.dense.weight",
    "mlm_head.dense.bias": "lm_head.dense.bias",
    "mlm_head.LayerNorm.weight": "lm_head.layer_norm.weight",
    "mlm_head.LayerNorm.bias": "lm_head.layer_norm.bias",
    "mlm_head.bias": "lm_head.bias",
}
_ALBERT_OUTSIDE_LAYERS = {
    "bert.embeddings_project.weight": "albert.encoder.embedding_hidden_mapping_in.weight",
    "bert.embeddings_project.bias": "albert.encoder.embedding_hidden_mapping_in.bias",
    "bert.pooler.dense.weight": "albert.pooler.weight",
    "bert.pooler.dense.bias": "albert.pooler.bias",
    "mlm_head.dense.weight": "predictions.dense.weight",
    "mlm_head.dense.bias": "predictions.dense.bias",
    "mlm_head.LayerNorm.weight": "predictions.LayerNorm.weight",
    "mlm_head.LayerNorm.bias": "predictions.LayerNorm.bias",
    "mlm_head.bias": "predictions.bias",
    "nsp_head.classifier.weight": "sop_classifier.classifier.weight",
    "nsp_head.classifier.bias": "sop_classifier.classifier.bias",
}
# inside one of our layer modules -> inside HF's AlbertLayer
_ALBERT_LAYER = {
    "attention.self.query": "attention.query",
    "attention.self.key": "attention.key",
    "attention.self.value": "attention.value",
    "attention.output.dense": "attention.dense",
    "attention.output.LayerNorm": "attention.LayerNorm",
    "intermediate.dense": "ffn",
    "output.dense": "ffn_output",
    "output.LayerNorm": "full_layer_layer_norm",
}


def recorded_objective(doc: Mapping[str, Any]) -> str | None:
    """The pretraining objective a checkpoint's config.json records (None for imported or hand-saved models)."""
    node: Any = doc
    for key in ("training", "fingerprint", "pretrain", "objective"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, str) else None


def choose_layout(doc: Mapping[str, Any], config: BertConfig, requested: str | None, source: str) -> str:
    """The layout to export (`requested`, or chosen as the module docstring says when None / "auto"); refuses a
    layout that cannot express the checkpoint, naming the config field."""
    factorised = config.embedding_width != config.hidden_size
    shared = config.share_layers != "none"
    if requested in (None, "auto"):
        if factorised or shared:
            layout = "albert"
        else:
            objective = recorded_objective(doc)
            layout = OBJECTIVE_LAYOUTS.get(objective or "", "roberta" if config.type_vocab_size == 1 else "bert")
    elif requested in LAYOUTS:
        layout = requested
    else:
        raise ContractError(f"unknown export layout {requested!r}; choose auto or one of {', '.join(LAYOUTS)}")
    problems = []
    if config.num_languages:
        problems.append(f"model.num_languages={config.num_languages} (language embeddings: no transformers "
                        f"{HF_CLASSES[layout]} has them)")
    if layout in ("bert", "roberta") and (factorised or shared):
        problems.append(f"transformers {HF_CLASSES[layout]} has no factorised embeddings or shared layers "
                        f"(model.embedding_size={config.embedding_size}, model.share_layers={config.share_layers!r}); "
                        "export it with layout albert")
    if layout == "albert" and config.share_layers in ("attention", "ffn"):
        problems.append(f"model.share_layers={config.share_layers!r}: transformers ALBERT shares whole layers only "
                        "(num_hidden_groups), so sharing only the attention or only the feed-forward block cannot be "
                        "expressed; only share_layers 'all' or 'none' export to ALBERT")
    if problems:
        raise ContractError(f"{source}: cannot export as layout {layout!r}: {'; '.join(problems)}")
    return layout


def export_layout(layout: str, model: torch.nn.Module, config: BertConfig, special_ids: Mapping[str, int],
                  base_config: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(HF state dict, HF config.json) of `model` in `layout` ("roberta" or "albert"); `base_config` is the BERT
    layout's config.json (training/hf.py hf_config_from_bert), whose shared keys are kept."""
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()}
    if layout == "roberta":
        return _roberta_state(state, config), _roberta_config(config, special_ids, base_config)
    if layout == "albert":
        return _albert_state(state, config), _albert_config(config, base_config)
    raise ContractError(f"export_layout: layout {layout!r} is training/hf.py's or unknown; this module writes "
                        "roberta and albert")


def _unknown(name: str, layout: str) -> ContractError:
    return ContractError(f"no transformers {HF_CLASSES[layout]} name for parameter {name!r}")


def _roberta_state(state: Mapping[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    offset = config.pad_token_id + 1
    out = {}
    for name, tensor in state.items():
        if name.startswith("nsp_head."):
            continue
        if name == "bert.embeddings.position_embeddings.weight":
            rows = tensor.new_zeros(tensor.shape[0] + offset, tensor.shape[1])
            rows[offset:] = tensor
            out["roberta.embeddings.position_embeddings.weight"] = rows
        elif name.startswith("bert."):
            out["roberta." + name[len("bert."):]] = tensor
        elif name in _ROBERTA_HEADS:
            out[_ROBERTA_HEADS[name]] = tensor
        else:
            raise _unknown(name, "roberta")
    return out


def _roberta_config(config: BertConfig, special_ids: Mapping[str, int], base: Mapping[str, Any]) -> dict[str, Any]:
    doc = {**base, "model_type": "roberta", "architectures": [HF_CLASSES["roberta"]],
           "max_position_embeddings": config.max_position_embeddings + config.pad_token_id + 1}
    # RoBERTa's <s> / </s> are our [CLS] / [SEP]
    doc.update({key: special_ids[name] for key, name in (("bos_token_id", "cls"), ("eos_token_id", "sep"))
                if name in special_ids})
    return doc


def _albert_state(state: Mapping[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        if name.startswith("bert.embeddings."):
            out["albert." + name[len("bert."):]] = tensor
        elif name in _ALBERT_OUTSIDE_LAYERS:
            out[_ALBERT_OUTSIDE_LAYERS[name]] = tensor
        elif name.startswith("bert.encoder.layer."):
            # one of our layer modules = one HF layer group of a single layer (share_layers all or none)
            module, _, inner = name[len("bert.encoder.layer."):].partition(".")
            block, _, param = inner.rpartition(".")
            if block not in _ALBERT_LAYER:
                raise _unknown(name, "albert")
            out[f"albert.encoder.albert_layer_groups.{module}.albert_layers.0.{_ALBERT_LAYER[block]}.{param}"] = tensor
        else:
            raise _unknown(name, "albert")
    if "bert.embeddings_project.weight" not in state:  # E = H: HF ALBERT still projects, by the identity
        h = config.hidden_size
        out["albert.encoder.embedding_hidden_mapping_in.weight"] = torch.eye(h)
        out["albert.encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(h)
    return out


def _albert_config(config: BertConfig, base: Mapping[str, Any]) -> dict[str, Any]:
    groups = config.num_layer_groups if config.share_layers == "all" else config.num_layers
    return {**base, "model_type": "albert", "architectures": [HF_CLASSES["albert"]],
            "embedding_size": config.embedding_width, "num_hidden_groups": groups, "inner_group_num": 1,
            "hidden_act": "gelu", "classifier_dropout_prob": config.hidden_dropout}
