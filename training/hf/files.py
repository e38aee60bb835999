"""What every Hugging Face importer and exporter shares (training/hf/bert.py for BERT and its layouts, hf/electra.py,
hf/modernbert.py, hf/xlnet.py, hf/xlm.py): the output-directory check, the staged HF directory writer, the export
of a member's checkpoint as one HF directory, reading HF weights in any of their three file formats, the seeded
build, the strict mapped load with optional parts, and the import's result. It imports none of those modules, so
each of them imports it without an import circle.

    check_output_dir(out, model_dir, overwrite)
    model, config, tokenizer_path, special_ids = load_for_export(model_dir, out, overwrite, ElectraForPreTraining,
                                                                 "ELECTRA")
    export_one_dir(model_dir, out, overwrite, XLNetForPreTraining, "XLNet", state=xlnet_hf_state, ...)
    write_hf_dir(out, state, hf_config, tokenizer_path, hf_tokenizer_config(tokenizer_path, special_ids, 512))
    model = seeded(lambda: BertForPreTraining(config), seed)
    initialised, dropped = load_mapped(model, state, hf_dir, hf_dir / "config.json", optional_parts)
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertfactory.errors import ContractError, InputError
from bertfactory.io import apply_umask, atomic_write_json, publish_dir, read_json_file
from bertfactory.tokens import role_tokens_of_file

from ..checkpoint import (CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, _fsync_file, _staging_dir, load_pretrained,
                         read_checkpoint_config, save_pretrained, tokenizer_info, unreadable_pickle)

logger = logging.getLogger(__name__)

HF_INDEX_FILE = "model.safetensors.index.json"
HF_TORCH_FILE = "pytorch_model.bin"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"

# HF config key -> BertConfig field
HF_BERT_FIELDS = {
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


# ------------------------------------------------------------------------------------------------ export


def check_output_dir(out: Path, source: Path, overwrite: bool) -> None:
    src, dst = source.resolve(), out.resolve()
    if dst == src or dst in src.parents or src in dst.parents:
        raise InputError(f"output {out} must not be, contain or lie inside the source {source}")
    if out.exists() and not out.is_dir():
        raise InputError(f"output {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise InputError(f"output directory {out} exists and is not empty; choose another path or pass --overwrite "
                         "(it is then replaced as a whole)")


def hf_tokenizer_config(tokenizer_path: Path, special_ids: Mapping[str, int], max_length: int | None
                        ) -> dict[str, Any]:
    """tokenizer_config.json of an export: the fast tokenizer class and our special tokens under HF's names."""
    special = {name: token for name, token in role_tokens_of_file(tokenizer_path).items() if name in special_ids}
    doc: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if max_length is not None:
        doc["model_max_length"] = max_length
    return {**doc, **{f"{name}_token": token for name, token in special.items()}}


def write_hf_files(directory: Path, state: Mapping[str, torch.Tensor], hf_config: Mapping[str, Any],
                   tokenizer_path: Path, tokenizer_config: Mapping[str, Any]) -> None:
    """model.safetensors, tokenizer.json, config.json and tokenizer_config.json into `directory` (fsynced)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(dict(state), str(directory / MODEL_FILE), metadata={"format": "pt"})
    apply_umask(directory / MODEL_FILE)
    shutil.copyfile(tokenizer_path, directory / TOKENIZER_FILE)
    for name in (MODEL_FILE, TOKENIZER_FILE):
        _fsync_file(directory / name)
    atomic_write_json(directory / CONFIG_FILE, dict(hf_config))
    atomic_write_json(directory / HF_TOKENIZER_CONFIG, dict(tokenizer_config))


def write_hf_dir(out: Path, state: Mapping[str, torch.Tensor], hf_config: Mapping[str, Any], tokenizer_path: Path,
                 tokenizer_config: Mapping[str, Any]) -> None:
    """`write_hf_files` into a staging directory, then published as `out` atomically."""
    staging = _staging_dir(out)
    try:
        write_hf_files(staging, state, hf_config, tokenizer_path, tokenizer_config)
        publish_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_for_export(model_dir: Path, out: Path, overwrite: bool, model_class: type, member: str
                    ) -> tuple[Any, Any, Path, dict[str, int]]:
    """The start of a member's export: the output-directory check, then `model_dir` loaded (config.json, tokenizer
    sha256 and weights validated) and refused unless a `model_class` (named `member` in the error) -> model, its
    config, the tokenizer's path and the tokenizer's special ids."""
    check_output_dir(out, model_dir, overwrite)
    model, config, tokenizer_path = load_pretrained(model_dir)  # validates config.json, tokenizer sha256, weights
    if not isinstance(model, model_class):
        raise ContractError(f"{model_dir / CONFIG_FILE}: architecture {type(model).__name__} is not {member}")
    special_ids = read_checkpoint_config(model_dir)["tokenizer"].get("special_ids", {})
    return model, config, tokenizer_path, special_ids


def export_one_dir(model_dir: Path, out: Path, overwrite: bool, model_class: type, member: str, *,
                   state: Callable[[Any, str], dict[str, torch.Tensor]],
                   hf_config: Callable[[Any, Mapping[str, int]], dict[str, Any]],
                   max_length: Callable[[Any], int | None], left_out: str,
                   check: Callable[[Any], None] | None = None) -> Path:
    """A member's checkpoint as one HF directory `out` (staged, published atomically): `load_for_export`, then
    `check(config)` (refuses what the HF class cannot hold), `state(model, weights file)` the HF tensors,
    `hf_config(config, special_ids)` its config.json (architectures[0] = the HF class), `max_length(config)` the
    tokenizer's model_max_length (None: none written); `left_out` says in the log which of our parts are not
    exported. The adapters of ModernBERT, XLM and XLNet export this way."""
    model, config, tokenizer_path, special_ids = load_for_export(model_dir, out, overwrite, model_class, member)
    if check is not None:
        check(config)
    tensors = state(model, str(model_dir / MODEL_FILE))
    doc = hf_config(config, special_ids)
    write_hf_dir(out, tensors, doc, tokenizer_path,
                 hf_tokenizer_config(tokenizer_path, special_ids, max_length(config)))
    logger.info("exported %s -> %s (transformers %s, %d tensors; %s)", model_dir, out, doc["architectures"][0],
                len(tensors), left_out)
    return out


# ------------------------------------------------------------------------------------------------ import


@dataclass(frozen=True)
class HfImport:
    """What `import_from_hf` did: the directory written, the HF architecture it read, and the parts of our model
    the HF checkpoint lacked (initialised as BertForPreTraining initialises them, with `seed`)."""

    path: Path
    architecture: str
    initialised: tuple[str, ...] = field(default_factory=tuple)
    seed: int = 0
    dropped: tuple[str, ...] = field(default_factory=tuple)  # HF tensors left out (`drop`, or parts ours lacks)


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    single, index = directory / MODEL_FILE, directory / HF_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        doc = read_json_file(index, f"no {HF_INDEX_FILE} in {directory}")
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict):
            raise ContractError(f"{index}: field 'weight_map' is missing or not an object")
        files = [directory / f for f in sorted(set(weight_map.values()))]
    elif (directory / HF_TORCH_FILE).is_file():
        # the pre-safetensors format: a pickle, read with weights_only=True so that it can hold tensors only
        path = directory / HF_TORCH_FILE
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError... for bad files
            raise unreadable_pickle(path, "a readable weights-only PyTorch state dict", err) from None
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ContractError(f"{path} does not hold a flat state dict of tensors")
        return dict(state)
    else:
        found = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
        raise ContractError(f"{directory} holds no {MODEL_FILE} (or {HF_INDEX_FILE}, or {HF_TORCH_FILE}). "
                            f"Found: {found}")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        if not path.is_file():
            raise ContractError(f"weights file {path} (named in {index}) does not exist")
        try:
            state.update(load_file(str(path)))
        except (SafetensorError, OSError) as err:
            raise ContractError(f"{path} is not a readable safetensors file: {err}") from None
    return state


def hf_tokenizer_file(hf_dir: Path) -> Path:
    tokenizer_path = hf_dir / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise ContractError(f"no {TOKENIZER_FILE} in {hf_dir}: our model directories need the fast-tokenizer file "
                            "(write it with a transformers fast tokenizer's save_pretrained)")
    return tokenizer_path


# transformers builds these classes' normaliser from tokenizer_config.json (do_lower_case, strip_accents,
# tokenize_chinese_chars; defaults True, None, True) over the one in tokenizer.json (4.x where they differ, 5.x always)
_BERT_TOKENIZER_CLASSES = frozenset(f"{name}Tokenizer{fast}" for name in ("Bert", "DistilBert", "Electra")
                                    for fast in ("", "Fast"))
# and RoBERTa's its byte-level pre-tokenizer's add_prefix_space (default false)
_ROBERTA_TOKENIZER_CLASSES = frozenset({"RobertaTokenizer", "RobertaTokenizerFast"})


def as_transformers_reads(hf_dir: Path, tokenizer_path: Path, work: Path) -> Path:
    """`tokenizer_path`, or a copy of it in `work` with the settings transformers' AutoTokenizer applies: a BERT
    tokenizer class in tokenizer_config.json sets lowercasing and accent stripping over tokenizer.json's BertNormalizer
    (a file saying `lowercase: false` under `do_lower_case: true` lowercases in transformers), a RoBERTa one the byte-
    level step's prefix space. Copied as it was, our model read `Quiet FILM` as [UNK] [UNK] where the HF model read
    `quiet film`, and `the film` as `t he Ġfilm` where it read `Ġthe Ġfilm`."""
    config_path = hf_dir / HF_TOKENIZER_CONFIG
    config = read_json_file(config_path, f"no {HF_TOKENIZER_CONFIG}") if config_path.is_file() else None
    kind = config.get("tokenizer_class") if isinstance(config, dict) else None
    if kind in _BERT_TOKENIZER_CLASSES:
        part, step = "normalizer", "BertNormalizer"
        wanted = {"lowercase": config.get("do_lower_case", True), "strip_accents": config.get("strip_accents"),
                  "handle_chinese_chars": config.get("tokenize_chinese_chars", True)}
    elif kind in _ROBERTA_TOKENIZER_CLASSES:  # its add_prefix_space (default false) over the byte-level step's
        part, step = "pre_tokenizer", "ByteLevel"
        wanted = {"add_prefix_space": config.get("add_prefix_space", False)}
    else:
        return tokenizer_path
    doc = read_json_file(tokenizer_path, f"no {TOKENIZER_FILE} in {hf_dir}")
    found = doc.get(part) if isinstance(doc, dict) else None
    if not isinstance(found, dict) or found.get("type") != step or \
            all(found.get(key) == value for key, value in wanted.items()):
        return tokenizer_path
    logger.warning("%s: %s (%s) sets the %s: %s, where %s says %s; the imported tokenizer.json follows "
                   "transformers", hf_dir, HF_TOKENIZER_CONFIG, kind, part, ", ".join(f"{k} {v}" for k, v in
                   wanted.items()), TOKENIZER_FILE, ", ".join(f"{k} {found.get(k)}" for k in wanted))
    adjusted = work / TOKENIZER_FILE
    atomic_write_json(adjusted, {**doc, part: {**found, **wanted}})
    return adjusted


def with_sentence_head(values: dict[str, Any], sentence_head: bool) -> dict[str, Any]:
    """`values` (BertConfig fields) plus `sentence_head`: a model without a sentence-pair head, e.g. RoBERTa's, is
    then built without `nsp_head`."""
    return {**values, "sentence_head": sentence_head}


def seeded(build: Callable[[], torch.nn.Module], seed: int) -> torch.nn.Module:
    """`build()` under torch seed `seed`, leaving the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def load_mapped(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path, source_config: Path,
                optional: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Load `state` (HF tensors under our names) into `model` (built seeded), strictly but for the parts in
    `optional` (our name prefix -> what it is): a part the HF checkpoint lacks keeps its initialisation, a part
    it has that `model` lacks (e.g. a pooler of a model built without one) is dropped. Returns (initialised parts,
    dropped parts); refuses a part present in part, other missing or unexpected names and wrong shapes."""
    expected = model.state_dict()
    dropped = []
    for prefix, part in optional.items():
        extra = [k for k in state if k.startswith(prefix)]
        if extra and not any(k.startswith(prefix) for k in expected):
            dropped.append(part)
            state = {k: v for k, v in state.items() if not k.startswith(prefix)}
    unexpected = sorted(set(state) - set(expected))
    absent = sorted(set(expected) - set(state))
    required = [k for k in absent if not k.startswith(tuple(optional))]
    if unexpected or required:
        raise ContractError(f"{source}: weights do not match {source_config}: missing {required[:5]}, unexpected "
                            f"{unexpected[:5]}")
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(expected[k].shape)}" for k in state
             if state[k].shape != expected[k].shape]
    if wrong:
        raise ContractError(f"{source}: tensor shapes do not match {source_config}: {'; '.join(wrong[:5])}")
    initialised = []
    for prefix, part in optional.items():
        names = [k for k in expected if k.startswith(prefix)]
        lacking = [k for k in names if k not in state]
        if lacking and len(lacking) != len(names):
            raise ContractError(f"{source}: the {part} is incomplete (missing {lacking}, has "
                                f"{sorted(set(names) - set(lacking))})")
        if lacking:
            initialised.append(part)
    model.load_state_dict({**expected, **{k: v.to(torch.float32) for k, v in state.items()}}, strict=True)
    return initialised, dropped


def finish_import(model: torch.nn.Module, config: Any, tokenizer_path: Path, out: Path, hf_dir: Path,
                  architecture: str, initialised: list[str], seed: int, dropped: tuple[str, ...] = ()) -> HfImport:
    """Refuse a tokenizer that can reach under half of the model's embedding rows, log what was initialised, write
    our model directory `out`, and say what was done."""
    rows = getattr(config, "vocab_size", None)
    tokens = tokenizer_info(tokenizer_path)["vocab_size"]
    if rows is not None and 2 * tokens < rows:
        # a published model pads its matrix by a few rows at most (ModernBERT 50,368 for 50,280 tokens): a tokenizer
        # this small is one saved without its vocabulary, and every word of a task would be read as unknown
        raise ContractError(f"{tokenizer_path} has {tokens} tokens for the model's {rows} embedding rows "
                            f"({hf_dir / 'config.json'}: vocab_size): {rows - tokens} rows can never be read and every "
                            "word outside those tokens is unknown. A tokenizer "
                            "saved without its vocabulary? (transformers 5's BertTokenizerFast takes vocab=, and ignores "
                            "vocab_file=); save the model's own tokenizer with save_pretrained")
    if initialised:
        logger.warning("%s (%s) has no %s: initialised as our %s does (seed %d); train them before relying on "
                       "them", hf_dir, architecture, ", ".join(initialised), type(model).__name__, seed)
    with tempfile.TemporaryDirectory() as work:
        save_pretrained(model, config, as_transformers_reads(Path(hf_dir), Path(tokenizer_path), Path(work)), out)
    return HfImport(path=out, architecture=architecture, initialised=tuple(initialised), seed=seed,
                    dropped=dropped)
