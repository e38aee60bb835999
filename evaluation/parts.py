"""Evaluations add up: each part of results.json is kept in its own file, with the key of the inputs that made it,
and results.json is their merge. Separate `bertfactory evaluate` calls on one run (built-in tasks, task files,
compared checkpoints) therefore live side by side, a part whose inputs did not change is reused untouched, and
re-evaluating one task never removes another's results.

    RUN/eval/tasks/<task>.json        tasks.<task> (+ its crosslingual entry, the compared checkpoints it used)
    RUN/eval/parts/<part>.json        intrinsic, objective, feature_based

    parts = EvalParts(run_dir / "eval", checkpoint_info)
    cached = parts.fresh("tasks", "movie_sentiment", key)          # the stored part when made with this key, else None
    parts.write("tasks", "movie_sentiment", key, {"task": ..., "crosslingual": ..., ...})
    results = parts.merge(header)                                  # every part of this checkpoint -> results.json

An eval directory written before parts existed (a results.json and no part files) is adopted first: its tasks and
top-level parts become part files with the key `adopted`, which no evaluation matches, so they are kept (and merged)
until their task is evaluated again (`adopt`).

A part belongs to the checkpoint it was made from (its model and tokenizer sha256): parts of another checkpoint
(the run was pretrained again) stay on disk but are left out of results.json, with a log line. A part file that is
unreadable or breaks the results contract is ignored with a log line (re-evaluating its task replaces it). To drop
a task's results from results.json, delete RUN/eval/tasks/<task>.json. Contract: docs/results.md.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bertfactory.io import atomic_write_json

from .results import CrosslingualResults, FeatureBasedResults, IntrinsicResults, ObjectiveResults, TaskResults

logger = logging.getLogger(__name__)

FORMAT = "bertfactory.eval-part"
VERSION = 1
TASKS = "tasks"
TOP_LEVEL = {"intrinsic": IntrinsicResults, "objective": ObjectiveResults, "feature_based": FeatureBasedResults}


def _checkpoint_id(info: dict) -> tuple[str, str]:
    return str(info.get("model_sha256")), str(info.get("tokenizer_sha256"))


class EvalParts:
    """The part files of one eval directory, for one checkpoint (CheckpointInfo as results.json holds it)."""

    def __init__(self, out_dir: Path, checkpoint: dict):
        self.out_dir = Path(out_dir)
        self.checkpoint = checkpoint

    def path(self, kind: str, name: str) -> Path:
        return self.out_dir / (TASKS if kind == TASKS else "parts") / f"{name}.json"

    def _read(self, path: Path) -> dict | None:
        """A part file's content when it is a valid part, else None (logged)."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            logger.warning("%s: unreadable evaluation part (%s); ignored", path, err)
            return None
        problem = _problem(doc, path)
        if problem is not None:
            logger.warning("%s: %s; ignored", path, problem)
            return None
        return doc

    def fresh(self, kind: str, name: str, key: str) -> dict | None:
        """The stored part when it was made from this checkpoint with this key, else None."""
        path = self.path(kind, name)
        if not path.is_file():
            return None
        doc = self._read(path)
        if doc is None or doc["key"] != key or _checkpoint_id(doc["checkpoint"]) != _checkpoint_id(self.checkpoint):
            return None
        logger.info("%s %s: inputs unchanged since %s; its results are reused", kind, name, path)
        return doc

    def write(self, kind: str, name: str, key: str, content: dict) -> dict:
        """Store a part atomically -> the document written. `content` holds `value` (the results.json entry) and,
        for a task, `crosslingual` and `compared_checkpoints`; `timings` for every part."""
        doc = {"format": FORMAT, "version": VERSION, "kind": kind, "name": name, "key": key,
               "checkpoint": self.checkpoint, **content}
        problem = _problem(doc, self.path(kind, name))
        if problem is not None:  # a bug: the stage just computed it
            raise ValueError(problem)
        self._set_aside(self.path(kind, name), doc)
        atomic_write_json(self.path(kind, name), doc)
        return doc

    def _set_aside(self, path: Path, doc: dict) -> None:
        """The earlier results of this part, of other inputs, move to `<name>.json.replaced-<time>-<key>` beside it
        (issue 35: nothing is deleted; `bertfactory clean` deletes replaced outputs)."""
        if not path.is_file():
            return
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            old = {}
        if isinstance(old, dict) and old.get("key") == doc["key"] and old.get("checkpoint") == doc["checkpoint"]:
            return  # the same results again
        from bertfactory.replaced import move_aside

        target = move_aside(path, str(old.get("key", "old") if isinstance(old, dict) else "old")[:12])
        logger.info("%s: earlier results of other inputs moved to %s", path, target)

    def adopt(self, results_file: Path) -> list[str]:
        """Split a results.json written before parts existed into part files (only when there are none yet), so
        that the results it holds are not lost to the next merge -> the parts adopted (`tasks/<name>`, `<part>`)."""
        from .results import read_results

        if not results_file.is_file() or any(self.out_dir.glob("tasks/*.json")) or any(self.out_dir.glob("parts/*.json")):
            return []
        try:
            old = read_results(results_file)
        except Exception as err:  # noqa: BLE001 - an unreadable old file is left as it is, and said so
            logger.warning("%s: not adopted as evaluation parts (%s); its results will be replaced", results_file, err)
            return []
        config = old.get("config", {})
        adopted = []
        for name in TOP_LEVEL:
            if name in old:
                self._write_adopted("top", name, old["checkpoint"], {"value": old[name]})
                adopted.append(name)
        for name, value in old["tasks"].items():
            if "settings" not in value:  # v2/v3: the call's settings with the task's overrides
                value = {**value, "settings": {**config.get("finetune", {}),
                                               **(config.get("tasks", {}).get(name) or {}).get("finetune", {})}}
            compared = {label: info for label, info in (old.get("compared_checkpoints") or {}).items()
                        if label in (value.get("compared") or {})}
            timings = {k: v for k, v in old.get("timings", {}).items() if k.startswith(f"{name}.")}
            self._write_adopted(TASKS, name, old["checkpoint"], {
                "value": value, "crosslingual": (old.get("crosslingual") or {}).get(name),
                "compared_checkpoints": compared, "timings": timings})
            adopted.append(f"tasks/{name}")
        logger.info("%s: adopted as evaluation parts: %s", results_file, ", ".join(adopted) or "none")
        return adopted

    def _write_adopted(self, kind: str, name: str, checkpoint: dict, content: dict) -> None:
        doc = {"format": FORMAT, "version": VERSION, "kind": kind, "name": name, "key": "adopted",
               "checkpoint": checkpoint, **content}
        problem = _problem(doc, self.path(kind, name))
        if problem is not None:
            logger.warning("%s: not adopted (%s)", self.path(kind, name), problem)
            return
        atomic_write_json(self.path(kind, name), doc)

    def _parts_of_this_checkpoint(self, kind: str) -> dict[str, dict]:
        directory = self.out_dir / (TASKS if kind == TASKS else "parts")
        out = {}
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            doc = self._read(path)
            if doc is None or doc["kind"] != kind or doc["name"] != path.stem:
                continue
            if _checkpoint_id(doc["checkpoint"]) != _checkpoint_id(self.checkpoint):
                logger.warning("%s: evaluated on another checkpoint (%s); left out of results.json", path,
                               doc["checkpoint"].get("path"))
                continue
            out[path.stem] = doc
        return out

    def merge(self, header: dict) -> dict:
        """results.json's content: `header` (format, checkpoint, config, ...) with every part of this checkpoint."""
        results = {**header, "tasks": {}}
        timings: dict[str, float] = {}
        for name, doc in self._parts_of_this_checkpoint("top").items():
            results[name] = doc["value"]
            timings.update(doc.get("timings", {}))
        compared: dict[str, dict] = {}
        crosslingual: dict[str, dict] = {}
        for name, doc in self._parts_of_this_checkpoint(TASKS).items():
            clash = [label for label, info in doc.get("compared_checkpoints", {}).items()
                     if label in compared and compared[label] != info]
            if clash:
                logger.warning("%s: compared checkpoint label(s) %s name other models than in an earlier task's "
                               "results; left out of results.json (re-evaluate it)", self.path(TASKS, name),
                               ", ".join(clash))
                continue
            compared.update(doc.get("compared_checkpoints", {}))
            results["tasks"][name] = doc["value"]
            if doc.get("crosslingual"):
                crosslingual[name] = doc["crosslingual"]
            timings.update(doc.get("timings", {}))
        if compared:
            results["compared_checkpoints"] = compared
        if crosslingual:
            results["crosslingual"] = crosslingual
        results["timings"] = {**timings, **header.get("timings", {})}
        return results


def _valid(model: type[BaseModel], value: Any) -> str | None:
    try:
        model.model_validate(value)
    except ValidationError as err:
        first = err.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'value'}: {first['msg']}"
    return None


def _problem(doc: Any, path: Path) -> str | None:
    """Why `doc` is not a valid part file for `path`, or None."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return f"not an evaluation part ('format' is not {FORMAT!r})"
    if doc.get("version") != VERSION:
        return f"evaluation part version {doc.get('version')!r}, this bertfactory reads {VERSION}"
    for field in ("kind", "name", "key", "checkpoint", "value"):
        if field not in doc:
            return f"no {field!r}"
    kind = doc["kind"]
    if kind == TASKS:
        problem = _valid(TaskResults, doc["value"])
        if problem is None and doc.get("crosslingual") is not None:
            problem = _valid(CrosslingualResults, doc["crosslingual"])
        return None if problem is None else f"not valid task results ({problem})"
    if kind == "top" and doc["name"] in TOP_LEVEL:
        problem = _valid(TOP_LEVEL[doc["name"]], doc["value"])
        return None if problem is None else f"not valid {doc['name']} results ({problem})"
    return f"unknown part {kind!r}/{doc['name']!r}"
