"""Hugging Face BERT interop, the adapter of BERT, RoBERTa, ALBERT and SpanBERT's export (no `transformers`
import: configs and safetensors files only). training/hf/__init__.py's table sends these checkpoints and model types
here; the other members have their own adapters beside this one.

- `load_hf_bert_encoder(hf_dir)`: a HF BERT directory -> our `BertModel` (to take a published model as a reference
  or teacher).
- `export_bert_to_hf(model_dir, out, layout=None)`: one of our BERT-family model directories (RUN/pretrain/final, a
  checkpoints/step-N) -> a `transformers` `BertForPreTraining` directory (config.json, model.safetensors,
  tokenizer.json, tokenizer_config.json), loadable with `AutoModelForPreTraining` / `AutoModelForMaskedLM` /
  `AutoModel`; RoBERTa- and ALBERT-style checkpoints as `RobertaForMaskedLM` / `AlbertForPreTraining` instead
  (layouts and how one is chosen: training/hf/layouts.py); SpanBERT as `BertForMaskedLM`.
- `warm_start_from_hf(model, hf_dir, tokenizer_path)`: pretrain.init_from naming a HF BERT directory (continued
  pretraining of a published model, e.g. TAPT of MiniLM): its encoder into our freshly built model, the heads it
  lacks left fresh (training/pretrain_model.py logs "MLM head initialised fresh: not in <path>").
- `import_bert_from_hf(hf_dir, out, hf_config, seed)`: a HF `BertModel`, `BertForPreTraining` or `BertForMaskedLM`
  directory -> one of our model directories (`training.checkpoint.load_pretrained` loads it); heads the HF
  checkpoint lacks are initialised as `BertForPreTraining` initialises them (seeded) and listed in the returned
  `HfImport`; `import_bert_layout` the same for model_type roberta / albert (training/hf/layouts.py). The pieces
  every adapter shares (seeded build, strict mapped load with optional parts, the staged HF directory writer) are
  training/hf/files.py.

The encoder's parameter names are the same on both sides (`bert.*`); the heads map as
`mlm_head.{dense,LayerNorm}` <-> `cls.predictions.transform.{dense,LayerNorm}`, `mlm_head.bias` <->
`cls.predictions.bias`, `nsp_head.classifier` <-> `cls.seq_relationship`. The MLM decoder is tied to the word
embeddings on both sides and not stored. Contract: docs/checkpoints.md.

    from training.hf.bert import load_hf_bert_encoder
    encoder, config = load_hf_bert_encoder(sample_path("minilm"))   # eval mode
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import read_json_file

from ..checkpoint import CONFIG_FILE, MODEL_FILE, load_pretrained, load_weights, read_checkpoint_config
from .files import (HF_BERT_FIELDS, HfImport, check_output_dir, finish_import, hf_tokenizer_config,
                       hf_tokenizer_file, load_mapped, read_hf_weights, seeded, with_sentence_head, write_hf_dir)
from .layouts import choose_layout, encoder_config_problems, export_layout, import_layout
from ..models.bert.model import BertConfig, BertForPreTraining, BertModel

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("BertModel", "BertForPreTraining", "BertForMaskedLM")
SUPPORTED = (f"model_type 'bert', architectures {', '.join(SUPPORTED_ARCHITECTURES)}, hidden_act 'gelu', "
             "position_embedding_type 'absolute', tied MLM decoder, encoder only (no is_decoder / cross-attention)")

# our head parameter -> HF name (the encoder `bert.*` is named alike)
_HEADS_TO_HF = {
    "mlm_head.dense.weight": "cls.predictions.transform.dense.weight",
    "mlm_head.dense.bias": "cls.predictions.transform.dense.bias",
    "mlm_head.LayerNorm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm_head.LayerNorm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm_head.bias": "cls.predictions.bias",
    "nsp_head.classifier.weight": "cls.seq_relationship.weight",
    "nsp_head.classifier.bias": "cls.seq_relationship.bias",
}
_HEADS_FROM_HF = {v: k for k, v in _HEADS_TO_HF.items()}
_TIED_DECODER = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                 "cls.predictions.decoder.bias": "mlm_head.bias"}
# parts of our BertForPreTraining a HF checkpoint may lack (initialised on import), by parameter-name prefix
_OPTIONAL_PARTS = {"bert.pooler.": "pooler", "mlm_head.": "MLM head", "nsp_head.": "NSP head"}


# ------------------------------------------------------------------------------------------------ configs


def bert_config_from_hf(hf: Any, source: str = "config.json", treat_as: str | None = None) -> BertConfig:
    """Translate a HF BERT config.json; refuses what our BertForPreTraining does not implement, listing what is
    supported. `treat_as` (one of SUPPORTED_ARCHITECTURES) overrides the config's `architectures`, for
    checkpoints of a BERT subclass (e.g. AntiBERTy = BertForMaskedLM + classifiers) — their extra heads must then
    be dropped explicitly on import."""
    if not isinstance(hf, dict):
        raise ContractError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    problems = []
    if hf.get("model_type") != "bert":
        problems.append(f"model_type is {hf.get('model_type')!r}, expected 'bert'")
    if treat_as is not None and treat_as not in SUPPORTED_ARCHITECTURES:
        raise ContractError(f"treat_as={treat_as!r} is not a supported architecture; choose one of "
                            f"{', '.join(SUPPORTED_ARCHITECTURES)}")
    archs = [treat_as] if treat_as is not None else hf.get("architectures") or []
    problems += encoder_config_problems(hf, SUPPORTED_ARCHITECTURES, archs, hint=(
        " (a BERT subclass with extra heads can be imported with --treat-as BertForMaskedLM --drop PREFIX for each "
        "extra head)"))
    if problems:
        raise ContractError(f"{source}: {'; '.join(problems)}. Supported: {SUPPORTED}")
    values = {ours: hf[theirs] for theirs, ours in HF_BERT_FIELDS.items() if theirs in hf and hf[theirs] is not None}
    return BertConfig.from_dict(values, source=source)


def hf_config_from_bert(config: BertConfig) -> dict[str, Any]:
    """Our BertConfig -> a `transformers` BertConfig dict for `BertForPreTraining`."""
    doc = {theirs: getattr(config, ours) for theirs, ours in HF_BERT_FIELDS.items()}
    doc.update({
        "model_type": "bert",
        "architectures": ["BertForPreTraining"],
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "is_decoder": False,
        "add_cross_attention": False,
        "dtype": "float32",
    })
    return doc


# ---------------------------------------------------------------------------------------------- encoder only


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


# --------------------------------------------------------------------------------------------------- export


def export_bert_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False,
                      layout: str | None = None) -> Path:
    """Write our BERT-family model directory `model_dir` (BertForPreTraining, or SpanBertForPreTraining as a masked
    LM) as a `transformers` directory `out` (staged, then published atomically) in `layout`: "bert"
    (BertForPreTraining), "roberta" (RobertaForMaskedLM) or "albert" (AlbertForPreTraining); None or "auto" chooses
    from the checkpoint (training/hf/layouts.py). The `training` provenance of config.json is not carried over.
    The other members' checkpoints go to their adapters: training.hf.export_to_hf."""
    model_dir, out = Path(model_dir), Path(out)
    check_output_dir(out, model_dir, overwrite)
    if not model_dir.is_dir():
        raise ContractError(f"model directory {model_dir} does not exist")
    architecture = read_checkpoint_config(model_dir)["architecture"]
    if architecture not in ("BertForPreTraining", "SpanBertForPreTraining"):
        raise ContractError(f"{model_dir / CONFIG_FILE}: architecture {architecture!r} is not exported in BERT's "
                            "layouts (training.hf.export_to_hf sends each architecture to its adapter)")
    model, config, tokenizer_path = load_pretrained(model_dir)  # validates config.json, tokenizer sha256, weights
    if architecture == "SpanBertForPreTraining":
        model, config = _span_bert_as_masked_lm(model, config)
    doc = read_checkpoint_config(model_dir)
    layout = choose_layout(doc, config, layout, str(model_dir / CONFIG_FILE))
    special_ids = doc["tokenizer"].get("special_ids", {})
    if layout == "bert":
        state = {}
        for name, tensor in model.state_dict().items():
            hf_name = name if name.startswith("bert.") else _HEADS_TO_HF.get(name)
            if hf_name is None:  # a parameter this exporter does not know: refuse rather than drop it silently
                raise ContractError(f"{model_dir / MODEL_FILE}: no Hugging Face name for parameter {name!r}")
            state[hf_name] = tensor.detach().to("cpu", torch.float32).contiguous()
        hf_config = hf_config_from_bert(config)
        if "cls.seq_relationship.weight" not in state:  # built without a sentence-pair head: the masked-LM class
            hf_config["architectures"] = ["BertForMaskedLM"]
    else:
        state, hf_config = export_layout(layout, model, config, special_ids, hf_config_from_bert(config))
    write_hf_dir(out, state, hf_config, tokenizer_path,
                 hf_tokenizer_config(tokenizer_path, special_ids, config.max_position_embeddings))
    logger.info("exported %s -> %s (transformers %s, %d tensors)", model_dir, out, hf_config["architectures"][0],
                len(state))
    return out


def _span_bert_as_masked_lm(model: torch.nn.Module, config: BertConfig) -> tuple[BertForPreTraining, BertConfig]:
    """SpanBERT has no transformers class (its published checkpoints are BERT's layout): its encoder and MLM head
    as a BertForPreTraining without a sentence head, exported as a masked LM; the span boundary head (SBO) has no
    place there and is left out."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(BertConfig)}
    bert_config = BertConfig(**with_sentence_head(fields, False))
    masked_lm = BertForPreTraining(bert_config)
    masked_lm.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("sbo_head.")})
    logger.info("SpanBERT: the span boundary head (sbo_head) has no transformers place; exporting the encoder and "
                "MLM head")
    return masked_lm, bert_config


# --------------------------------------------------------------------------------------------------- import


def _ours_from_hf(hf_state: dict[str, torch.Tensor], source: Path,
                  drop: tuple[str, ...] = ()) -> tuple[dict[str, torch.Tensor], list[str]]:
    """HF names -> ours, and the HF names dropped because they start with a prefix in `drop`; refuses names that
    neither BertModel, BertForPreTraining nor BertForMaskedLM have and an untied MLM decoder."""
    ours: dict[str, torch.Tensor] = {}
    tied: dict[str, torch.Tensor] = {}
    unknown = []
    dropped = []
    for name, tensor in hf_state.items():
        if drop and name.startswith(drop):
            dropped.append(name)
            continue
        if name.endswith("LayerNorm.gamma"):  # TF-converted checkpoints
            name = name[: -len("gamma")] + "weight"
        elif name.endswith("LayerNorm.beta"):
            name = name[: -len("beta")] + "bias"
        if name.endswith("embeddings.position_ids"):
            continue
        if name.startswith(("embeddings.", "encoder.", "pooler.")):  # a bare BertModel
            name = "bert." + name
        if name in _TIED_DECODER:
            tied[name] = tensor
        elif name.startswith("bert."):
            ours[name] = tensor
        elif name in _HEADS_FROM_HF:
            ours[_HEADS_FROM_HF[name]] = tensor
        else:
            unknown.append(name)
    if unknown:
        raise ContractError(f"{source}: tensor(s) {', '.join(sorted(unknown)[:8])} belong to no supported "
                            f"architecture. Supported: {SUPPORTED}")
    for name, tensor in tied.items():
        partner = ours.get(_TIED_DECODER[name])
        if partner is not None and not torch.equal(tensor, partner):
            raise ContractError(f"{source}: {name} differs from {_TIED_DECODER[name]} (an untied MLM decoder is not "
                                f"supported). Supported: {SUPPORTED}")
    return ours, sorted(dropped)


def import_bert_from_hf(hf_dir: Path, out: Path, hf_config: dict[str, Any], seed: int = 0,
                        treat_as: str | None = None, drop: tuple[str, ...] = ()) -> HfImport:
    """model_type bert (training.hf.import_from_hf checks the directories and reads config.json): parts of our
    model the checkpoint lacks (pooler, MLM head, NSP head) are initialised as our model initialises them, from
    torch seed `seed` (the global RNG is left untouched), and listed in the result. `treat_as` + `drop` import a
    BERT subclass: read it as that architecture and leave out the HF tensors whose names start with a prefix in
    `drop` (they are listed in the result)."""
    config_path = hf_dir / CONFIG_FILE
    config = bert_config_from_hf(hf_config, source=str(config_path), treat_as=treat_as)
    tokenizer_path = hf_tokenizer_file(hf_dir)
    state, dropped = _ours_from_hf(read_hf_weights(hf_dir), hf_dir, tuple(drop))
    model = seeded(lambda: BertForPreTraining(config), seed)
    initialised, _ = load_mapped(model, state, hf_dir, config_path, _OPTIONAL_PARTS)
    archs = hf_config.get("architectures") or []
    architecture = archs[0] if archs else "unknown (no 'architectures' in config.json)"
    if treat_as is not None:
        architecture = f"{architecture} read as {treat_as}"
    return finish_import(model, config, tokenizer_path, out, hf_dir, architecture, initialised, seed,
                         tuple(dropped))


def import_bert_layout(hf_dir: Path, out: Path, hf_config: dict[str, Any], seed: int) -> HfImport:
    """model_type roberta / albert: names and config through training/hf/layouts.py, then as BERT."""
    config_path = hf_dir / CONFIG_FILE
    tokenizer_path = hf_tokenizer_file(hf_dir)
    config, state, notes = import_layout(hf_config, read_hf_weights(hf_dir), str(config_path))
    model = seeded(lambda: BertForPreTraining(config), seed)
    initialised, dropped = load_mapped(model, state, hf_dir, config_path, _OPTIONAL_PARTS)
    archs = hf_config.get("architectures") or []
    architecture = archs[0] if archs else f"{hf_config['model_type']} (no 'architectures' in config.json)"
    return finish_import(model, config, tokenizer_path, out, hf_dir, architecture, initialised, seed,
                         tuple(notes + dropped))


# ---------------------------------------------------------------------------------------- warm start


# the BertConfig fields a HF checkpoint's weights must agree with, as recipe keys (model.<field>)
_SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size")


def warm_start_from_hf(model: torch.nn.Module, hf_dir: Path, tokenizer_path: Path | None) -> tuple[list[str], list[str]]:
    """pretrain.init_from naming a Hugging Face BERT directory (e.g. the MiniLM sample, a BertModel without MLM
    head): load its encoder (and the heads it has) into `model`, our BertForPreTraining just built from the
    pretraining seed; the parts the checkpoint lacks keep that fresh initialisation (the MLM decoder is the word
    embedding matrix, so it starts as the checkpoint's embeddings), parts `model` lacks (an NSP head under objective
    mlm) are left out. Returns (fresh parts, left-out parts) for the caller to log. ConfigError in one line when
    the directory is not a BERT, its shape differs from the recipe's model section, or its tokenizer gives other
    ids than the shards' (`tokenizer_path`)."""
    hf_dir = Path(hf_dir)
    where = f"pretrain.init_from {hf_dir}"
    config_path = hf_dir / CONFIG_FILE
    hf_config = read_json_file(config_path, f"no {CONFIG_FILE} in {hf_dir}")
    if type(model) is not BertForPreTraining:
        raise ConfigError(f"{where} is a Hugging Face directory: starting from one is supported for BERT objectives "
                          f"(mlm, mlm_nsp); this objective trains a {type(model).__name__} - import it with "
                          "`bertfactory import-hf` and start from that model directory")
    if hf_config.get("model_type") != "bert":
        raise ConfigError(f"{where}: model_type {hf_config.get('model_type')!r}; a Hugging Face directory as "
                          "init_from must be a BERT (model_type bert) - import others with `bertfactory import-hf` "
                          "and start from that model directory")
    theirs = bert_config_from_hf(hf_config, source=str(config_path))
    if tokenizer_path is not None:
        _check_same_vocabulary(hf_dir, Path(tokenizer_path), where)
    ours = model.config
    wrong = [f"{name} {getattr(theirs, name)} (model.{name}: {getattr(ours, name)})" for name in _SHAPE_FIELDS
             if getattr(theirs, name) != getattr(ours, name)]
    if wrong:
        raise ConfigError(f"{where}: its {CONFIG_FILE} does not fit the recipe's model: {', '.join(wrong)}; set the "
                          "model section to the checkpoint's shape")
    state, _ = _ours_from_hf(read_hf_weights(hf_dir), hf_dir)
    return load_mapped(model, state, hf_dir, config_path, _OPTIONAL_PARTS)


def _hf_vocabulary(hf_dir: Path) -> tuple[dict[str, int], Path]:
    """token -> id of a HF directory's tokenizer: tokenizer.json, else the bare vocab.txt (line number - 1)."""
    from tokenizers import Tokenizer

    if (hf_dir / "tokenizer.json").is_file():
        path = hf_dir / "tokenizer.json"
        return Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True), path
    path = hf_dir / "vocab.txt"
    if not path.is_file():
        raise ConfigError(f"pretrain.init_from {hf_dir}: no tokenizer.json or vocab.txt; without its vocabulary the "
                          "shards' token ids cannot be checked against the checkpoint's embeddings")
    lines = path.read_text(encoding="utf-8").split("\n")
    return {token.rstrip("\r"): i for i, token in enumerate(lines) if token.rstrip("\r")}, path


def _check_same_vocabulary(hf_dir: Path, tokenizer_path: Path, where: str) -> None:
    """The shards' token ids must index the checkpoint's embedding rows: the same token -> id map."""
    from tokenizers import Tokenizer

    theirs, source = _hf_vocabulary(hf_dir)
    ours = Tokenizer.from_file(str(tokenizer_path)).get_vocab(with_added_tokens=True)
    if theirs == ours:
        return
    differ = sorted(t for t in set(ours) | set(theirs) if ours.get(t) != theirs.get(t))
    sample = ", ".join(f"{t!r} {theirs.get(t)} vs {ours.get(t)}" for t in differ[:3])
    raise ConfigError(f"{where}: its tokenizer ({source}, {len(theirs)} tokens) gives other ids than the shards' "
                      f"({tokenizer_path}, {len(ours)} tokens; {len(differ)} tokens differ, e.g. {sample}); "
                      f"preprocess with preprocess.tokenizer.path: {source}")
