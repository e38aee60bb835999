"""Finished fine-tuning runs kept on disk while their task is evaluated, so that an evaluation stopped part-way
(killed, preempted, out of time) continues from the runs it finished instead of from the task's first run. A
task's evaluation is many independent runs (each model x learning rate x seed; at the parity settings on MiniLM one
run is ~10-25 minutes on 2 cores), and before this a stop threw all of them away.

    cache = RunCache(run_dir / "eval" / "parts" / "runs" / task, key, keep_states=cfg.save_best)
    finetune_model(..., cache=cache)     # reuses the runs finished under `key`, writes each new one as it ends
    cache.clear()                        # once the task's part (RUN/eval/tasks/<task>.json) is written

One file per run, `<16 hex>.json` (the sha256 of model name, learning rate and seed), written atomically when the run
ends: format `bertfactory.finetune-run`, version 1, the key, the model name, the rate and seed, and the RunResult
(evaluation.finetune) without its weights. `keep_states` (evaluate.save_best: the task's best run writes its
weights) adds `<same>.pt` with the run's best weights, written before the JSON, so a JSON file always has them.

The key is the task's part key (evaluation.run.task_key: checkpoint(s), task data, settings, device, version) plus
the threads each run uses: a run at another thread count rounds differently (docs/results.md, "Determinism"), so a
resumed evaluation reuses only runs it would have computed bit for bit itself. A file under another key, or one
that cannot be read, is not reused (logged) and is overwritten by the run made again.

A run directory on object storage (its working copy, bertfactory.run_location): each run also goes to the run
location as soon as it is written there, its `.pt` before its JSON (the JSON commits the run: a reader never sees
one whose weights are missing), and the cache starts from the runs the location holds, so an evaluation stopped on
one machine continues on another, or on a fresh working copy. Only the JSON files are pulled up front; a reused
run's `.pt` (~130 MB for MiniLM) is fetched only when that run is the task's best (`state`). `clear` removes the
task's runs from the location too. A transfer that fails is the one-line storage.StorageError naming the URL. For a
local run directory nothing is transferred.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path

import torch

from bertfactory import storage
from bertfactory.io import AtomicFile, atomic_write_text
from bertfactory.run_location import WorkingCopy

from .finetune import RunResult

logger = logging.getLogger(__name__)

FORMAT = "bertfactory.finetune-run"
VERSION = 1


def _stem(model: str, learning_rate: float, seed: int) -> str:
    return hashlib.sha256(f"{model}\0{learning_rate!r}\0{seed}".encode()).hexdigest()[:16]


class RunCache:
    """The finished runs of one task's evaluation under one key; see the module docstring."""

    def __init__(self, directory: Path, key: str, keep_states: bool = False):
        self.directory = Path(directory)
        self.key = key
        self.keep_states = keep_states
        # on object storage the run location is the truth: runs finished on another machine are there, not here
        self._copy = WorkingCopy.of(self.directory)
        self._remote_names: set[str] = set()  # the names under the task's folder in the run location
        if self._copy is not None:
            self._sync()

    def _rel(self, path: Path) -> str:
        return path.resolve().relative_to(self._copy.root).as_posix()

    def _sync(self) -> None:
        """Pull the run location's finished runs (their JSON; the weights wait for `state`), then send the ones
        only this working copy holds (its process died between writing a run and uploading it)."""
        base = self._rel(self.directory)
        self._remote_names = set(storage.list_files(self._copy.remote(base)))
        self._copy.pull([f"{base}/{name}" for name in sorted(self._remote_names) if name.endswith(".json")])
        here = sorted(p for p in self.directory.glob("*") if p.is_file() and not p.name.startswith(".")) \
            if self.directory.is_dir() else []
        unsent = [p for p in here if p.name not in self._remote_names]
        # weights first: a JSON in the run location always has them (push skips files synced before)
        self._copy.push([self._rel(p) for p in unsent if p.suffix == ".pt"])
        self._copy.push([self._rel(p) for p in unsent if p.suffix == ".json"])

    def _has_weights(self, path: Path) -> bool:
        pt = path.with_suffix(".pt")
        return pt.is_file() or (self._copy is not None and pt.name in self._remote_names)

    def path(self, model: str, learning_rate: float, seed: int) -> Path:
        return self.directory / f"{_stem(model, learning_rate, seed)}.json"

    def get(self, model: str, learning_rate: float, seed: int) -> RunResult | None:
        """The run finished under this key (without its weights: `state`), else None (a file under another key
        or unreadable is logged)."""
        path = self.path(model, learning_rate, seed)
        if not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("format") != FORMAT or doc.get("version") != VERSION:
                raise ValueError(f"not a {FORMAT} file of version {VERSION}")
            if doc.get("key") != self.key:
                logger.info("%s: a finished run of %s lr=%g seed=%d under other inputs or settings; run again",
                            path, model, learning_rate, seed)
                return None
            result = RunResult(**doc["result"])
            if (result.learning_rate, result.seed, doc.get("model")) != (learning_rate, seed, model):
                raise ValueError(f"it holds {doc.get('model')} lr={result.learning_rate:g} seed={result.seed}")
            if self.keep_states and not self._has_weights(path):
                raise ValueError("its weights (.pt) are missing")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, RuntimeError) as err:
            logger.warning("%s: unreadable finished run of %s lr=%g seed=%d (%s); run again", path, model,
                           learning_rate, seed, err)
            return None
        logger.info("%s lr=%g seed=%d: finished before the evaluation stopped; reused (%s)", model, learning_rate,
                    seed, path)
        return result

    def state(self, model: str, learning_rate: float, seed: int) -> dict[str, torch.Tensor]:
        """A reused run's best weights (kept with keep_states), loaded only when that run is the task's best."""
        pt = self.path(model, learning_rate, seed).with_suffix(".pt")
        if self._copy is not None and not pt.is_file():
            self._copy.pull([self._rel(pt)], missing_ok=False)
        return torch.load(pt, map_location="cpu", weights_only=True)

    def put(self, model: str, learning_rate: float, seed: int, result: RunResult) -> None:
        path = self.path(model, learning_rate, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.keep_states:
            if result.best_state is None:
                raise ValueError(f"{model} lr={learning_rate:g} seed={seed}: a run to keep without its weights")
            with AtomicFile(path.with_suffix(".pt")) as tmp:
                torch.save(result.best_state, tmp)
            self._publish(path.with_suffix(".pt"))
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "best_state"}
        # key order kept (no sort_keys): a reused run's metrics come back in the order the run wrote them
        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, "key": self.key, "model": model,
                                            "learning_rate": learning_rate, "seed": seed, "result": _plain(fields)},
                                           ensure_ascii=False) + "\n")
        self._publish(path)  # last: it commits the run

    def _publish(self, path: Path) -> None:
        """A file just written goes to the run location now, not at the stage's end: the run survives this
        machine."""
        if self._copy is not None:
            self._copy.push([self._rel(path)])

    def clear(self) -> None:
        """Remove the task's finished runs (its part holds the results now), in the run location too."""
        if self._copy is not None:
            self._copy.delete_tree(self._rel(self.directory))
            self._remote_names.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def _plain(value):
    """JSON's types, floats kept exactly (json writes repr; -inf / nan as the literals Python's json reads back)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value, "dtype").kind in "iu"):
        return int(value)
    if isinstance(value, float) or hasattr(value, "dtype"):
        return float(value)
    return value
