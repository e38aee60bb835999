"""A task's encoded inputs on disk, so that evaluating another checkpoint of the same run (or re-running after a
crash) does not tokenise the task again: `RUN/cache/tasks/<task>/` with `features.npz` (numpy arrays only, read
without pickle) and `meta.json`.

The cache is only valid for the tokenizer that made it: loading it for a checkpoint whose tokenizer.json has
another sha256 raises ContractError naming both sha256s (ids of one vocabulary mean other words in another —
the same refusal as for shards). A cache made from other data or settings (task file content, the columns
and label set it is read with, max_seq_len, doc_stride, example cuts) is stale and rebuilt.

    features = load_or_build(cache_dir, task_name, tokenizer_sha256, key, build=lambda: {...})
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Callable

import numpy as np

from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_json, content_hash

from .inputs import Features

logger = logging.getLogger(__name__)

FORMAT = "bertfactory.task-cache"
VERSION = 2  # 2: words of a byte-level tokenizer without a prefix space are encoded with their space
SPLITS = ("train", "dev", "test")
_LISTS = ("ids", "segments", "feature_rows", "token_labels", "word_starts", "token_spans", "max_context")
_ARRAYS = ("labels", "start_positions", "end_positions", "row_example")


def cache_key(task_name: str, source_sha256: str, examples: dict, settings: dict) -> str:
    """`examples`: what identifies the examples encoded, per split (evaluation/run.py: a hash of each split's
    examples as read: ids, texts, label ids)."""
    return content_hash({"task": task_name, "source": source_sha256, "examples": examples, "settings": settings,
                         "version": VERSION})


def _flatten(features: Features, prefix: str) -> dict[str, np.ndarray]:
    out = {}
    for name in _LISTS:
        items = getattr(features, name)
        if items is None:
            continue
        out[f"{prefix}{name}.lengths"] = np.array([len(x) for x in items], dtype=np.int64)
        flat = [np.asarray(x).reshape(-1) for x in items]
        out[f"{prefix}{name}.data"] = np.concatenate(flat) if flat else np.zeros(0)
    for name in _ARRAYS:
        value = getattr(features, name)
        if value is not None:
            out[f"{prefix}{name}"] = np.asarray(value)
    return out


def _unflatten(arrays, prefix: str, meta: dict) -> Features:
    values: dict = {}
    for name in _LISTS:
        if f"{prefix}{name}.lengths" not in arrays:
            values[name] = None
            continue
        lengths = arrays[f"{prefix}{name}.lengths"]
        data = arrays[f"{prefix}{name}.data"]
        width = 2 if name == "token_spans" else 1
        bounds = np.concatenate([[0], np.cumsum(lengths * width)])
        items = [data[bounds[i]: bounds[i + 1]] for i in range(len(lengths))]
        values[name] = [x.reshape(-1, 2) for x in items] if width == 2 else items
    for name in _ARRAYS:
        values[name] = arrays[f"{prefix}{name}"] if f"{prefix}{name}" in arrays else None
    return Features(task_type=meta["task_type"], num_examples=meta["num_examples"], truncated=meta["truncated"],
                    notes=meta["notes"], **values)


def load_or_build(cache_dir: Path, task_name: str, tokenizer_sha256: str, key: str,
                  build: Callable[[], dict[str, Features]]) -> dict[str, Features]:
    """The cached features of `task_name` when made by this tokenizer with this key; else build and store them."""
    directory = Path(cache_dir) / task_name
    meta_path = directory / "meta.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            meta = {}
        cached_sha = meta.get("tokenizer_sha256")
        if cached_sha and cached_sha != tokenizer_sha256:
            raise ContractError(
                f"the task cache {directory} was built with tokenizer sha256 {cached_sha}, but the checkpoint's "
                f"tokenizer.json has sha256 {tokenizer_sha256}: this run directory holds encodings of another "
                f"vocabulary. Evaluate this checkpoint in another run directory, or delete {directory} (or set "
                f"evaluate.cache_encodings: false)")
        if meta.get("format") == FORMAT and meta.get("key") == key and (directory / "features.npz").is_file():
            with np.load(directory / "features.npz", allow_pickle=False) as arrays:
                loaded = {s: _unflatten(arrays, f"{s}/", meta["splits"][s]) for s in SPLITS}
            logger.info("%s: encoded inputs read from %s", task_name, directory)
            return loaded
    features = build()
    directory.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for split in SPLITS:
        arrays.update(_flatten(features[split], f"{split}/"))
    tmp = directory / "features.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(directory / "features.npz")
    splits = {s: {"task_type": f.task_type, "num_examples": f.num_examples, "truncated": f.truncated,
                  "notes": dict(f.notes)} for s, f in features.items()}
    atomic_write_json(meta_path, {"format": FORMAT, "version": VERSION, "task": task_name, "key": key,
                                  "tokenizer_sha256": tokenizer_sha256, "splits": splits})
    return features


def features_equal(a: Features, b: Features) -> bool:
    """Field-by-field equality (arrays compared by value), for tests and sanity checks."""
    for f in dataclasses.fields(Features):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y) or not all(np.array_equal(np.asarray(p), np.asarray(q)) for p, q in zip(x, y)):
                return False
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True
