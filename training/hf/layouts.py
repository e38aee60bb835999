"""Which `transformers` class layout an export of our BertForPreTraining writes, and the RoBERTa and ALBERT layouts
(the BERT layout is training/hf/bert.py's own). No `transformers` import: names, shapes and config.json keys only.

- `bert`: BertForPreTraining (training/hf/bert.py).
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

A model without a sentence-pair head (`sentence_head` false) exports as AlbertForMaskedLM under `albert`.
`import_layout` is the inverse for RoBERTa (RobertaForMaskedLM / RobertaModel -> no sentence head) and ALBERT
(AlbertForPreTraining / AlbertForMaskedLM / AlbertModel; num_hidden_groups G < L -> share_layers all in G groups,
G = L -> none; inner_group_num > 1 and hidden_act gelu_new are refused).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from bertfactory.errors import ContractError

from .files import HF_BERT_FIELDS, with_sentence_head
from ..models.bert.model import BertConfig

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
    layout's config.json (training/hf/bert.py hf_config_from_bert), whose shared keys are kept."""
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()}
    if layout == "roberta":
        return _roberta_state(state, config), _roberta_config(config, special_ids, base_config)
    if layout == "albert":
        hf_config = _albert_config(config, base_config)
        if "nsp_head.classifier.weight" not in state:  # built without a sentence-order head
            hf_config["architectures"] = ["AlbertForMaskedLM"]
        return _albert_state(state, config), hf_config
    raise ContractError(f"export_layout: layout {layout!r} is training/hf/bert.py's or unknown; this module writes "
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


# --------------------------------------------------------------------------------------------------- import

ROBERTA_ARCHITECTURES = ("RobertaForMaskedLM", "RobertaModel")
ALBERT_ARCHITECTURES = ("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel")
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")  # non-persistent in HF; old files hold them


def encoder_config_problems(hf: Mapping[str, Any], architectures: tuple[str, ...], archs: Any = None,
                            hint: str = "") -> list[str]:
    """What in a transformers BERT-style config.json (BERT, RoBERTa, ALBERT, ELECTRA) our encoder cannot compute:
    an architecture not in `architectures` (`archs` overrides the file's list, `hint` follows the complaint), an
    activation other than exact GELU, relative positions, decoder flags, an untied decoder, missing sizes."""
    problems = []
    archs = (hf.get("architectures") or []) if archs is None else archs
    if not isinstance(archs, list) or any(a not in architectures for a in archs):
        problems.append(f"architectures {archs!r} not supported{hint}")
    if hf.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act {hf['hidden_act']!r} is not supported (our encoder and MLM head use exact erf "
                        "'gelu'; 'gelu_new' is the tanh approximation)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {hf['position_embedding_type']!r} is not supported")
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            problems.append(f"{flag} is true")
    if hf.get("tie_word_embeddings", True) is not True:
        problems.append("tie_word_embeddings is false (our MLM decoder is the word-embedding matrix)")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "max_position_embeddings") if k not in hf]
    if missing:
        problems.append(f"missing key(s) {', '.join(missing)}")
    return problems


def import_layout(hf: Mapping[str, Any], hf_state: Mapping[str, torch.Tensor], source: str
                  ) -> tuple[BertConfig, dict[str, torch.Tensor], list[str]]:
    """A transformers RoBERTa (RobertaForMaskedLM / RobertaModel) or ALBERT (AlbertForPreTraining /
    AlbertForMaskedLM / AlbertModel) config.json and state dict -> (our BertConfig, the tensors under our
    BertForPreTraining names, notes on HF tensors left out). The inverse of `export_layout`; refuses what our
    encoder cannot compute, naming the config key or tensor."""

    model_type = hf.get("model_type")
    architectures = ROBERTA_ARCHITECTURES if model_type == "roberta" else ALBERT_ARCHITECTURES
    problems = encoder_config_problems(hf, architectures)
    pad = hf.get("pad_token_id", 1 if model_type == "roberta" else 0)
    if model_type == "roberta" and isinstance(hf.get("max_position_embeddings"), int) \
            and hf["max_position_embeddings"] <= pad + 1:
        problems.append(f"max_position_embeddings {hf['max_position_embeddings']} leaves no position for a real "
                        f"token (RoBERTa numbers them from pad_token_id + 1 = {pad + 1})")
    if model_type == "albert":
        if hf.get("inner_group_num", 1) != 1:
            problems.append(f"inner_group_num {hf['inner_group_num']} (each ALBERT layer applying several inner "
                            "layers) is not supported; only 1")
        layers, groups = hf.get("num_hidden_layers"), hf.get("num_hidden_groups", 1)
        if isinstance(layers, int) and isinstance(groups, int) and (groups < 1 or layers % groups):
            problems.append(f"num_hidden_layers {layers} is not a multiple of num_hidden_groups {groups}")
    if problems:
        raise ContractError(f"{source}: cannot import as {model_type}: {'; '.join(problems)}. Supported: "
                            f"{', '.join(architectures)} with hidden_act 'gelu', absolute positions, tied decoder")
    values = {ours: hf[theirs] for theirs, ours in HF_BERT_FIELDS.items() if theirs in hf and hf[theirs] is not None}
    values["pad_token_id"] = pad
    if model_type == "roberta":
        values["max_position_embeddings"] = hf["max_position_embeddings"] - pad - 1
        values = with_sentence_head(values, False)  # RoBERTa has no sentence-pair head
        config = BertConfig.from_dict(values, source=source)
        state, notes = _roberta_import_state(hf_state, config, source)
        return config, state, notes
    embedding = hf.get("embedding_size", 128)
    groups = hf.get("num_hidden_groups", 1)
    values["embedding_size"] = None if embedding == hf["hidden_size"] else embedding
    if groups != hf["num_hidden_layers"]:
        values.update(share_layers="all", num_layer_groups=groups)
    config = BertConfig.from_dict(with_sentence_head(values, True), source=source)
    return config, _albert_import_state(hf_state, config, source), []


def _tied(decoder: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor], source: str) -> None:
    """The HF decoder weight / bias must equal our tied partners (`decoder`: HF name -> our partner's name)."""
    for hf_name, (tensor, ours) in decoder.items():
        partner = state.get(ours)
        if partner is not None and not torch.equal(tensor, partner):
            raise ContractError(f"{source}: {hf_name} differs from the tensor it is tied to ({ours}); an untied "
                                "MLM decoder is not supported")


def _bare(name: str, prefix: str) -> str:
    """A bare base model's name (RobertaModel / AlbertModel: `embeddings.*`) under the pretraining class's
    prefix (`roberta.embeddings.*`)."""
    return prefix + name if name.startswith(("embeddings.", "encoder.", "pooler.")) else name


def _roberta_import_state(hf_state: Mapping[str, torch.Tensor], config: BertConfig, source: str
                          ) -> tuple[dict[str, torch.Tensor], list[str]]:
    heads = {theirs: ours for ours, theirs in _ROBERTA_HEADS.items()}
    offset = config.pad_token_id + 1
    out, decoder, unknown, notes = {}, {}, [], []
    for name, tensor in hf_state.items():
        name = _bare(name, "roberta.")
        if name.startswith("roberta.") and name.endswith(_BUFFERS):
            continue
        if name == "roberta.embeddings.position_embeddings.weight":
            out["bert.embeddings.position_embeddings.weight"] = tensor[offset:]  # row pad+1+t is position t
        elif name.startswith("roberta."):
            out["bert." + name[len("roberta."):]] = tensor
        elif name in heads:
            out[heads[name]] = tensor
        elif name == "lm_head.decoder.weight":
            decoder[name] = (tensor, "bert.embeddings.word_embeddings.weight")
        elif name == "lm_head.decoder.bias":
            decoder[name] = (tensor, "mlm_head.bias")
        else:
            unknown.append(name)
    if unknown:
        raise ContractError(f"{source}: tensor(s) {', '.join(sorted(unknown)[:8])} belong to no supported RoBERTa "
                            f"architecture ({', '.join(ROBERTA_ARCHITECTURES)})")
    _tied(decoder, out, source)
    return out, notes


def _albert_import_state(hf_state: Mapping[str, torch.Tensor], config: BertConfig, source: str
                         ) -> dict[str, torch.Tensor]:
    outside = {theirs: ours for ours, theirs in _ALBERT_OUTSIDE_LAYERS.items()}
    layer = {theirs: ours for ours, theirs in _ALBERT_LAYER.items()}
    group_prefix = "albert.encoder.albert_layer_groups."
    out, decoder, unknown = {}, {}, []
    projection = {}
    for name, tensor in hf_state.items():
        name = _bare(name, "albert.")
        if name.startswith("albert.") and name.endswith(_BUFFERS):
            continue
        if name.startswith("albert.encoder.embedding_hidden_mapping_in."):
            projection[name] = tensor
        elif name.startswith("albert.embeddings."):
            out["bert." + name[len("albert."):]] = tensor
        elif name in outside:
            out[outside[name]] = tensor
        elif name.startswith(group_prefix):
            group, _, rest = name[len(group_prefix):].partition(".")
            head, _, rest = rest.partition(".")
            inner, _, rest = rest.partition(".")
            block, _, param = rest.rpartition(".")
            if head != "albert_layers" or inner != "0" or block not in layer:
                unknown.append(name)
                continue
            out[f"bert.encoder.layer.{group}.{layer[block]}.{param}"] = tensor
        elif name == "predictions.decoder.weight":
            decoder[name] = (tensor, "bert.embeddings.word_embeddings.weight")
        elif name == "predictions.decoder.bias":
            decoder[name] = (tensor, "mlm_head.bias")
        else:
            unknown.append(name)
    if unknown:
        raise ContractError(f"{source}: tensor(s) {', '.join(sorted(unknown)[:8])} belong to no supported ALBERT "
                            f"architecture ({', '.join(ALBERT_ARCHITECTURES)}, inner_group_num 1)")
    _tied(decoder, out, source)
    weight = projection.get("albert.encoder.embedding_hidden_mapping_in.weight")
    bias = projection.get("albert.encoder.embedding_hidden_mapping_in.bias")
    if weight is None or bias is None:
        raise ContractError(f"{source}: albert.encoder.embedding_hidden_mapping_in.weight / .bias is missing")
    if config.embedding_size is not None:
        out["bert.embeddings_project.weight"], out["bert.embeddings_project.bias"] = weight, bias
    elif not (torch.equal(weight, torch.eye(config.hidden_size, dtype=weight.dtype))
              and not bias.any()):
        # E = H: our encoder has no projection; HF's must then be the identity (as our export writes it)
        raise ContractError(f"{source}: embedding_size = hidden_size = {config.hidden_size} but "
                            "albert.encoder.embedding_hidden_mapping_in is not the identity; our encoder projects "
                            "only factorised embeddings (embedding_size < hidden_size)")
    return out
