"""Checkpoints: the pretrained-model directory (`save_pretrained` / `load_pretrained`) and resumable training
checkpoints (`save_checkpoint` / `latest_checkpoint` / `load_training_state`). Contract: docs/checkpoints.md.

A model directory holds `model.safetensors`, `config.json` and `tokenizer.json`; a training checkpoint
(`RUN/pretrain/checkpoints/step-N/`) adds `training_state.pt` (optimizer, scheduler, RNG states, data position),
loadable with `torch.load(path, weights_only=True)`. Every directory is written into a staging directory and
renamed into place, so a crash never leaves a half-written checkpoint under its final name. A training checkpoint's
config.json records the sha256 of model.safetensors and training_state.pt (`checksums`); `verify_checkpoint`
checks them before anything is loaded, so a file damaged after the write is detected instead of half-loaded.
Pruning keeps the newest `keep_last` checkpoints and, with `keep_best_by`, the one whose recorded metrics window
has the best value of that metric.

    from training.checkpoint import load_pretrained
    model, config, tokenizer_path = load_pretrained("runs/local/pretrain/final")
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertfactory.errors import ContractError
from bertfactory.io import apply_umask, publish_dir, read_json_file, sha256_file
from bertfactory.run_location import publish_checkpoint, read_remote_json, remote_complete_dirs

from .fsdp import is_sharded, load_full_model_state
from .models.registry import architecture_of, get_architecture

logger = logging.getLogger(__name__)

FORMAT = "bertfactory.checkpoint"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
STATE_FILE = "training_state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")


# ------------------------------------------------------------------------------------------- model directory


def tokenizer_info(tokenizer_path: Path) -> dict[str, Any]:
    """sha256, vocabulary size and special-token ids of a `tokenizers` JSON file."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tokenizer_path))
    except Exception as err:  # tokenizers raises a bare Exception for unreadable files
        raise ContractError(f"{tokenizer_path} is not a readable tokenizers JSON file: {err}") from None
    from bertfactory.tokens import special_token_ids

    special = special_token_ids(tok)  # whichever family's tokens it carries (BERT, RoBERTa, ALBERT)
    return {
        "file": TOKENIZER_FILE,
        "sha256": sha256_file(tokenizer_path),
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "special_ids": special,
    }


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _staging_dir(final: Path) -> Path:
    staging = final.with_name(f".{final.name}.staging-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    return staging


def _write_model_files(staging: Path, model: torch.nn.Module, config: Any, tokenizer_path: Path,
                       training: Mapping[str, Any] | None, weights: Mapping[str, torch.Tensor] | None = None) -> None:
    tokenizer_path = Path(tokenizer_path)
    if not tokenizer_path.is_file():
        raise ContractError(f"tokenizer {tokenizer_path} does not exist")
    info = tokenizer_info(tokenizer_path)
    if info["vocab_size"] > config.vocab_size:
        raise ContractError(
            f"tokenizer {tokenizer_path} has {info['vocab_size']} tokens but the model's vocab_size is {config.vocab_size}"
        )
    if weights is None and is_sharded(model):
        raise ContractError("an FSDP-sharded model's weights are gathered by every rank first "
                            "(training.fsdp.full_model_state); pass them as `weights`")
    source = model.state_dict() if weights is None else weights
    state = {k: v.detach().to("cpu").contiguous() for k, v in source.items()}
    save_file(state, str(staging / MODEL_FILE), metadata={"format": "pt"})  # one key: safetensors orders metadata keys randomly
    apply_umask(staging / MODEL_FILE)
    shutil.copyfile(tokenizer_path, staging / TOKENIZER_FILE)
    doc = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "architecture": architecture_of(model).name,
        "model": config.to_dict(),
        "tokenizer": info,
    }
    if training is not None:
        doc["training"] = dict(training)
    (staging / CONFIG_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for name in (MODEL_FILE, TOKENIZER_FILE, CONFIG_FILE):
        _fsync_file(staging / name)


def save_pretrained(model: torch.nn.Module, config: Any, tokenizer_path: str | Path, directory: str | Path,
                    training: Mapping[str, Any] | None = None,
                    weights: Mapping[str, torch.Tensor] | None = None) -> Path:
    """Write model.safetensors + config.json + tokenizer.json (copied) to `directory`, atomically (replacing any
    previous content). `training`: optional JSON-able provenance stored under config.json's `training`.
    `weights`: the full state dict to write instead of `model.state_dict()` (an FSDP model's, gathered)."""
    directory = Path(directory)
    staging = _staging_dir(directory)
    try:
        _write_model_files(staging, model, config, Path(tokenizer_path), training, weights)
        publish_dir(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


def hugging_face_kind(doc: Any) -> str | None:
    """What a Hugging Face config.json describes (its architectures, else its model_type); None for any other
    document (ours has a `format` and no `model_type`)."""
    if not isinstance(doc, dict) or "format" in doc or not isinstance(doc.get("model_type"), str):
        return None
    return ", ".join(map(str, doc.get("architectures") or [])) or f"model_type {doc['model_type']!r}"


def read_checkpoint_config(directory: str | Path) -> dict[str, Any]:
    """The validated config.json of a model directory (format, version, architecture, model, tokenizer)."""
    path = Path(directory) / CONFIG_FILE
    doc = read_json_file(path, f"no {CONFIG_FILE} in {directory}; is this a bertfactory model directory?")
    if not isinstance(doc, dict):
        raise ContractError(f"{path}: expected a JSON object")
    if (kind := hugging_face_kind(doc)) is not None:
        raise ContractError(f"{directory} is a Hugging Face model directory ({kind}), not a bertfactory model "
                            f"directory; convert it first with `bertfactory import-hf {directory} OUT` and give OUT")
    if doc.get("format") != FORMAT:
        raise ContractError(f"{path}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    if doc.get("version") not in SUPPORTED_VERSIONS:
        raise ContractError(
            f"{path}: checkpoint version {doc.get('version')!r} is not supported "
            f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    if not isinstance(doc.get("architecture"), str):
        raise ContractError(f"{path}: field 'architecture' is missing or not a string")
    # a former name (e.g. XLNetForPretraining) reads as today's, so comparisons with an objective's architecture hold
    doc["architecture"] = get_architecture(doc["architecture"], source=f"{path} field 'architecture'").name
    for field in ("model", "tokenizer"):
        if not isinstance(doc.get(field), dict):
            raise ContractError(f"{path}: field '{field}' is missing or not an object")
    return doc


def load_pretrained(directory: str | Path, device: str | torch.device = "cpu"):
    """Load a model directory -> (the model of its architecture in eval mode, its config, path of its
    tokenizer.json). Every architecture's model has `backbone()` (the encoder for fine-tuning).

    Validates config.json, that the tokenizer is the one the model was trained with (sha256), that the weights
    are the file a training checkpoint recorded (`checksums`, when config.json has them), and that they match the
    architecture exactly (names and shapes)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ContractError(f"model directory {directory} does not exist")
    doc = read_checkpoint_config(directory)
    arch = get_architecture(doc["architecture"], source=f"{directory / CONFIG_FILE} field 'architecture'")
    config = arch.config_from_dict(doc["model"], f"{directory / CONFIG_FILE} field 'model'")
    tokenizer_path = directory / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise ContractError(f"no {TOKENIZER_FILE} in {directory}")
    want_sha = doc["tokenizer"].get("sha256")
    if want_sha is not None and sha256_file(tokenizer_path) != want_sha:
        raise ContractError(
            f"{tokenizer_path} does not match the tokenizer recorded in {directory / CONFIG_FILE} "
            f"(field 'tokenizer.sha256' = {want_sha})"
        )
    verify_weights(directory, doc)
    model = arch.build(config)
    load_weights(model, directory / MODEL_FILE)
    model.to(device)
    model.eval()
    return model, config, tokenizer_path


def load_weights(model: torch.nn.Module, path: Path, rename: Callable[[str], str | None] | None = None) -> None:
    """Load safetensors weights into `model`, refusing missing/unexpected names and wrong shapes.
    `rename` maps stored names to the model's (None = skip the tensor), for foreign layouts."""
    if not path.is_file():
        raise ContractError(f"weights file {path} does not exist")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ContractError(f"{path} is not a readable safetensors file: {err}") from None
    if rename is not None:
        state = {new: v for k, v in state.items() if (new := rename(k)) is not None}
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ContractError(
            f"{path} does not match the model's architecture (config.json): "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(v.shape)}" for k, v in expected.items() if state[k].shape != v.shape]
    if wrong:
        raise ContractError(f"{path}: tensor shapes do not match config.json: {'; '.join(wrong[:5])}")
    if is_sharded(model):  # every rank read the full tensors; each keeps its shards
        load_full_model_state(model, state)
    else:
        model.load_state_dict(state, strict=True)


# --------------------------------------------------------------------------------------- training checkpoints


def rng_state() -> dict[str, Any]:
    """All RNG states as tensors / plain lists, so that `torch.load(..., weights_only=True)` can read them."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": np_kind, "keys": torch.from_numpy(np_keys.astype(np.int64)), "pos": int(np_pos),
                  "has_gauss": int(np_has_gauss), "cached_gaussian": float(np_gauss)},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_dir(checkpoints_dir: Path, step: int) -> Path:
    return Path(checkpoints_dir) / f"step-{step}"


CHECKPOINT_FILES = (MODEL_FILE, CONFIG_FILE, TOKENIZER_FILE, STATE_FILE)


def step_directories(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """Every published step-N directory, complete or not, oldest first."""
    found = []
    if Path(checkpoints_dir).is_dir():
        for p in Path(checkpoints_dir).iterdir():
            m = _STEP_DIR.match(p.name)
            if m and p.is_dir():
                found.append((int(m.group(1)), p))
    return sorted(found)


def missing_files(directory: Path) -> list[str]:
    """The files a checkpoint directory should hold and does not."""
    return [f for f in CHECKPOINT_FILES if not (Path(directory) / f).is_file()]


def list_checkpoints(checkpoints_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (published step-N directories holding every file), oldest first."""
    return [(step, p) for step, p in step_directories(checkpoints_dir) if not missing_files(p)]


def latest_checkpoint(checkpoints_dir: Path) -> tuple[int, Path] | None:
    found = list_checkpoints(checkpoints_dir)
    return found[-1] if found else None


CHECKSUMMED = (MODEL_FILE, STATE_FILE)


def save_checkpoint(checkpoints_dir: Path, step: int, model: torch.nn.Module, config: Any,
                    tokenizer_path: Path, training: Mapping[str, Any], state: Mapping[str, Any],
                    keep_last: int, keep_best_by: str | None = None,
                    weights: Mapping[str, torch.Tensor] | None = None, also: Sequence[Path] = ()) -> Path:
    """Write checkpoints_dir/step-N atomically (model files + training_state.pt, their sha256 in config.json's
    `checksums`), then delete all but the newest `keep_last` checkpoints and, with `keep_best_by`, the best one
    by that metric of `training["metrics"]` (see best_checkpoint). `weights`: as in save_pretrained.

    In the working copy of a run on object storage (bertfactory.run_location) the checkpoint then goes up to the run
    location with the files of `also` (the metrics through this step), its `.complete` marker last, and the pruned
    ones are removed there: a checkpoint exists remotely only once its marker does."""
    final = step_dir(checkpoints_dir, step)
    staging = _staging_dir(final)
    try:
        _write_model_files(staging, model, config, tokenizer_path, training, weights)
        torch.save(dict(state), staging / STATE_FILE)
        _fsync_file(staging / STATE_FILE)
        doc = json.loads((staging / CONFIG_FILE).read_text(encoding="utf-8"))
        doc["checksums"] = {name: sha256_file(staging / name) for name in CHECKSUMMED}
        (staging / CONFIG_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _fsync_file(staging / CONFIG_FILE)
        publish_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    best = best_checkpoint(checkpoints_dir, keep_best_by) if keep_best_by else None
    pruned = []
    for old_step, old in list_checkpoints(checkpoints_dir)[:-keep_last]:
        if best is None or old_step != best[0]:
            shutil.rmtree(old)
            pruned.append(old)
    pruned += _pruned_elsewhere(checkpoints_dir, keep_last, keep_best_by)
    publish_checkpoint(final, pruned, also=also)
    return final


def _pruned_elsewhere(checkpoints_dir: Path, keep_last: int, keep_best_by: str | None) -> list[Path]:
    """The checkpoints the run location holds and this working copy does not (saved on an earlier machine: a
    resumed run pulls only the one it resumes from) that the same rule prunes, over both together: all but the
    newest `keep_last` and the best by `keep_best_by` (its metric read from each one's config.json there). [] for a
    local run."""
    elsewhere = remote_complete_dirs(checkpoints_dir)
    local = list_checkpoints(checkpoints_dir)
    remote_only = sorted((int(m.group(1)), name) for name in elsewhere
                         if (m := _STEP_DIR.match(name)) and name not in {p.name for _, p in local})
    if not remote_only:
        return []
    steps = sorted([step for step, _ in local] + [step for step, _ in remote_only])
    kept = set(steps[-keep_last:])
    if keep_best_by:
        values = [(step, _recorded_metric(directory, keep_best_by)) for step, directory in local]
        values += [(step, _metric_of(read_remote_json(Path(checkpoints_dir) / name / CONFIG_FILE), keep_best_by))
                   for step, name in remote_only]
        scored = [(value, step) for step, value in values if value is not None]
        if scored:
            higher_is_better = keep_best_by.endswith("_acc")
            kept.add(max(scored)[1] if higher_is_better else min(scored, key=lambda vs: (vs[0], -vs[1]))[1])
    return [Path(checkpoints_dir) / name for step, name in remote_only if step not in kept]


def _recorded_metric(directory: Path, metric: str) -> float | None:
    try:
        doc = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _metric_of(doc, metric)


def _metric_of(doc: Any, metric: str) -> float | None:
    try:
        value = doc["training"]["metrics"][metric]
    except (KeyError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value == value else None  # NaN is never best


def best_checkpoint(checkpoints_dir: Path, metric: str) -> tuple[int, Path, float] | None:
    """(step, directory, value) of the checkpoint with the best recorded `metric` (losses: lowest, *_acc:
    highest; a tie goes to the newest), or None when no checkpoint recorded it."""
    higher_is_better = metric.endswith("_acc")
    best = None
    for step, directory in list_checkpoints(checkpoints_dir):
        value = _recorded_metric(directory, metric)
        if value is None:
            continue
        if best is None or (value >= best[2] if higher_is_better else value <= best[2]):
            best = (step, directory, value)
    return best


def verify_checkpoint(directory: Path) -> bool:
    """Check model.safetensors and training_state.pt against the sha256 recorded in config.json before loading
    anything: ContractError naming the damaged file; False when the checkpoint predates checksums (unverifiable,
    loaded as before); True when intact."""
    directory = Path(directory)
    doc = read_json_file(directory / CONFIG_FILE, f"no {CONFIG_FILE} in {directory}")
    recorded = doc.get("checksums") if isinstance(doc, dict) else None
    if recorded is None:
        return False
    for name in CHECKSUMMED:
        _verify_file(directory, recorded, name)
    return True


def verify_weights(directory: Path, doc: Mapping[str, Any]) -> None:
    """A training checkpoint's model.safetensors against the sha256 its config.json (`doc`) recorded, for the
    readers of its weights alone (load_pretrained: export, evaluate, a distillation teacher; pretrain.init_from):
    ContractError naming the damaged file. Model directories without `checksums` (final/, imports) pass."""
    recorded = doc.get("checksums")
    if recorded is not None and (Path(directory) / MODEL_FILE).is_file():  # a missing file: load_weights says so
        _verify_file(Path(directory), recorded, MODEL_FILE)


def _verify_file(directory: Path, recorded: Any, name: str) -> None:
    want = recorded.get(name) if isinstance(recorded, dict) else None
    if not isinstance(want, str):
        raise ContractError(f"{directory / CONFIG_FILE}: 'checksums.{name}' is missing")
    got = sha256_file(directory / name)
    if got != want:
        raise ContractError(f"{directory / name} is corrupted: its sha256 {got[:12]}... differs from "
                            f"{want[:12]}... recorded in {CONFIG_FILE} at save time")


def unreadable_pickle(path: Path, what: str, err: Exception) -> ContractError:
    """torch.load(weights_only=True)'s refusal of `path` in the user's terms. Torch's own message advises retrying
    with weights_only=False, which would execute whatever the file names: never pass that on."""
    text = str(err)
    if isinstance(err, pickle.UnpicklingError) or "weights_only" in text or "Weights only" in text:
        named = re.search(r"GLOBAL ([\w.]+)", text)  # the class or function the pickle would import and call
        found = f"it names the Python code {named.group(1)}" if named else "it holds pickled Python objects"
        return ContractError(f"{path} is not {what}: {found} besides tensors and plain data, which bertfactory never "
                             "loads because unpickling it would run code from the file; it was not written by "
                             "bertfactory or has been altered; use an intact copy")
    first = text.strip().splitlines()[0].split(". ")[0] if text.strip() else type(err).__name__
    return ContractError(f"{path} is not {what}: the file is damaged or not a PyTorch file ({first})")


def load_training_state(directory: Path) -> dict[str, Any]:
    path = Path(directory) / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for corrupt / foreign pickles
        raise unreadable_pickle(path, "a readable training state", err) from None
    if not isinstance(state, dict) or state.get("version") not in SUPPORTED_VERSIONS:
        raise ContractError(f"{path}: training state version {getattr(state, 'get', lambda _: None)('version')!r} "
                            f"is not supported (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    return state


def fingerprint_diff(saved: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "",
                     defaults: Mapping[str, Any] | None = None) -> list[str]:
    """Dotted names of the fields that differ between two nested dicts (for 'refuse to resume' messages).

    `defaults` (nested like `current`): a field absent from `saved` but equal to its default now is not a
    difference — config fields added in later versions default to the behaviour of the versions before them, so
    checkpoints written before a field existed still resume."""
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        name = f"{prefix}{key}"
        default = defaults.get(key, "<absent>") if isinstance(defaults, Mapping) else "<absent>"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            diffs += fingerprint_diff(a, b, name + ".", default if isinstance(default, Mapping) else None)
        elif a == "<absent>" and b == default:
            continue
        elif a != b:
            diffs.append(f"{name} (checkpoint {a!r}, now {b!r})")
    return diffs
