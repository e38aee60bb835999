"""Hugging Face transformers interop (no `transformers` import: configs and safetensors files only): one table, by
checkpoint `architecture` for export and by HF config.json `model_type` for import, built from the members' rows
(`Member.hf` in training/models/<member>/settings.py), each naming its adapter module here and the adapter's
functions. This module imports no torch (the CLI builds its help and `--layout` choices from the table); an
adapter is imported when a checkpoint needs it.

- bert.py: BERT / RoBERTa / ALBERT (and SpanBERT's export as a masked LM); also `load_hf_bert_encoder`,
  `warm_start_from_hf` (pretrain.init_from naming a HF BERT directory) and the BERT config translation
- layouts.py: the RoBERTa / ALBERT layouts of BERT's checkpoints; files.py: what every adapter shares (seeded build,
  strict mapped load with optional parts, the staged HF directory writer, the tokenizer files)
- electra.py, xlnet.py, xlm.py, modernbert.py: those members

    from training.hf import export_to_hf, import_from_hf
    export_to_hf("runs/x/pretrain/final", "out/hf")          # by the checkpoint's architecture
    import_from_hf("path/to/hf-model", "out/model")            # by config.json's model_type

Contract: docs/checkpoints.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bertfactory.errors import ContractError, InputError
from bertfactory.io import read_json_file

from ..models.members import MEMBERS, Member

CONFIG_FILE = "config.json"  # as training/checkpoint.py's (which imports torch)


@dataclass(frozen=True)
class HfEntry:
    member: Member
    adapter: str  # module under training/hf/
    function: str  # its export or import function


# checkpoint `architecture` -> its exporter; HF `model_type` -> its importer
EXPORTS: dict[str, HfEntry] = {m.architecture: HfEntry(m, m.hf.adapter, m.hf.export) for m in MEMBERS
                               if m.hf is not None and m.hf.export is not None}
IMPORTS: dict[str, HfEntry] = {model_type: HfEntry(m, m.hf.adapter, function) for m in MEMBERS if m.hf is not None
                               for model_type, function in m.hf.imports}
# `bertfactory export --layout` values: auto, then each member's layouts
LAYOUTS: tuple[str, ...] = ("auto", *dict.fromkeys(layout for m in MEMBERS if m.hf is not None
                                                   for layout in m.hf.layouts))


def _function(entry: HfEntry) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"{__name__}.{entry.adapter}"), entry.function)


def exported_members() -> str:
    """'BERT, SpanBERT, ...': the members with an export, for the CLI's help."""
    return ", ".join(dict.fromkeys(entry.member.name for entry in EXPORTS.values()))


def export_classes() -> str:
    """'BERT as BertForPreTraining / ..., ...': what each member's checkpoint is exported as, for the CLI's help."""
    return ", ".join(f"{m.name} as {' / '.join(m.hf.exports)}" for m in MEMBERS if m.hf is not None and m.hf.export)


def imported_classes() -> str:
    """The transformers classes import_from_hf reads, for the CLI's help."""
    return ", ".join(m.hf.reads for m in MEMBERS if m.hf is not None and m.hf.reads)


def export_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False, layout: str | None = None) -> Path:
    """Write our model directory `model_dir` (RUN/pretrain/final, a checkpoints/step-N) as a `transformers`
    directory `out` (staged, then published atomically) through the adapter of its `architecture`; `layout` (one
    of LAYOUTS; None = "auto") picks among the layouts that adapter writes."""
    from ..checkpoint import read_checkpoint_config
    from .files import check_output_dir

    model_dir, out = Path(model_dir), Path(out)
    check_output_dir(out, model_dir, overwrite)
    if not model_dir.is_dir():
        raise ContractError(f"model directory {model_dir} does not exist")
    if is_hf_model_dir(model_dir):
        raise ContractError(f"{model_dir / CONFIG_FILE} is a Hugging Face transformers directory already, not one of "
                            "our model directories: load it with transformers as it is, or convert it to ours with "
                            "`bertfactory import-hf`")
    architecture = read_checkpoint_config(model_dir)["architecture"]  # validates config.json
    if architecture not in EXPORTS:
        raise ContractError(f"{model_dir / CONFIG_FILE}: architecture {architecture!r} has no transformers export "
                            f"(exported: {', '.join(EXPORTS)})")
    return _function(EXPORTS[architecture])(model_dir, out, overwrite, layout)


def import_from_hf(hf_dir: str | Path, out: str | Path, seed: int = 0, overwrite: bool = False,
                   treat_as: str | None = None, drop: tuple[str, ...] = ()) -> Any:
    """Write a HF directory (config.json, safetensors or weights-only pytorch_model.bin weights, tokenizer.json)
    as one of our model directories `out` (`training.checkpoint.load_pretrained` loads it), through the adapter of
    its config.json `model_type` (IMPORTS); others are refused. Weights are converted to fp32; parts of our model the
    checkpoint lacks are initialised as our model initialises them, from torch seed `seed` (the global RNG is left
    untouched), and listed in the returned HfImport. `treat_as` + `drop` (model_type bert only) import a BERT
    subclass (training/hf/bert.py)."""
    from .files import check_output_dir

    hf_dir, out = Path(hf_dir), Path(out)
    if not hf_dir.is_dir():
        raise InputError(f"Hugging Face directory {hf_dir} does not exist")
    check_output_dir(out, hf_dir, overwrite)
    config_path = hf_dir / CONFIG_FILE
    hf_config = read_json_file(config_path, f"no {CONFIG_FILE} in {hf_dir}; is this a Hugging Face model directory?")
    if isinstance(hf_config, dict) and "model_type" not in hf_config and "format" in hf_config:
        raise ContractError(f"{config_path} is one of our model directories already (format "
                            f"{hf_config['format']!r}), not a Hugging Face one: use it as it is, or write it as a "
                            "transformers directory with `bertfactory export`")
    model_type = hf_config.get("model_type") if isinstance(hf_config, dict) else "bert"  # bert's reader refuses it
    if model_type not in IMPORTS:
        from .bert import SUPPORTED

        raise ContractError(f"{config_path}: model_type {model_type!r} cannot be imported. Supported: {SUPPORTED}; "
                            f"and model_type {', '.join(t for t in IMPORTS if t != 'bert')} (docs/checkpoints.md)")
    if model_type != "bert":
        if treat_as is not None or drop:
            raise InputError(f"--treat-as / --drop apply to model_type 'bert' only; {config_path} is {model_type!r}")
        return _function(IMPORTS[model_type])(hf_dir, out, hf_config, seed)
    return _function(IMPORTS[model_type])(hf_dir, out, hf_config, seed, treat_as=treat_as, drop=tuple(drop))


def is_hf_model_dir(directory: str | Path) -> bool:
    """Whether `directory` holds a Hugging Face model (config.json with a model_type) rather than one of ours."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        return False
    doc = read_json_file(path, f"no {CONFIG_FILE} in {directory}")
    return isinstance(doc, dict) and "model_type" in doc and "format" not in doc
