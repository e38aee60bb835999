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
that cannot be read, is not reused (logged) and is overwritten by the run made again. Written to the working copy
like every other eval output: an evaluation on object storage resumes on the machine that was stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path

import torch

from bertfactory.io import AtomicFile, atomic_write_text

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
            if self.keep_states and not path.with_suffix(".pt").is_file():
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
        return torch.load(self.path(model, learning_rate, seed).with_suffix(".pt"), map_location="cpu",
                          weights_only=True)

    def put(self, model: str, learning_rate: float, seed: int, result: RunResult) -> None:
        path = self.path(model, learning_rate, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.keep_states:
            if result.best_state is None:
                raise ValueError(f"{model} lr={learning_rate:g} seed={seed}: a run to keep without its weights")
            with AtomicFile(path.with_suffix(".pt")) as tmp:
                torch.save(result.best_state, tmp)
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "best_state"}
        # key order kept (no sort_keys): a reused run's metrics come back in the order the run wrote them
        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, "key": self.key, "model": model,
                                            "learning_rate": learning_rate, "seed": seed, "result": _plain(fields)},
                                           ensure_ascii=False) + "\n")

    def clear(self) -> None:
        """Remove the task's finished runs (its part holds the results now)."""
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
