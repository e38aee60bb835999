"""evaluation/parts.py (results.json as the merge of per-task files) and evaluation/lr_grid.py (the learning-rate grid
scaled to the encoder's width): a part is reused only with its key and checkpoint, parts of another checkpoint and
broken part files stay out of results.json, and the merge validates as results."""

from __future__ import annotations

import copy

import pytest

from evaluation.lr_grid import size_scaled_grid
from evaluation.parts import TASKS, EvalParts
from evaluation.results import to_document
from tests.evaluation.test_results import example


def _header(doc: dict) -> dict:
    return {k: doc[k] for k in ("format", "schema_version", "created_by", "checkpoint", "config")} | {
        "timings": {"total": 1.0}}


def test_parts_merge_reuse_and_stay_apart_by_checkpoint(tmp_path):
    doc = example()
    task = doc["tasks"]["movie_sentiment"]
    parts = EvalParts(tmp_path / "eval", doc["checkpoint"])
    parts.write(TASKS, "a", "key-a", {"value": task, "timings": {"a.pretrained": 2.0}})
    parts.write(TASKS, "b", "key-b", {"value": task, "timings": {"b.pretrained": 3.0}})
    assert parts.fresh(TASKS, "a", "key-a")["value"] == task
    assert parts.fresh(TASKS, "a", "another key") is None and parts.fresh(TASKS, "c", "key-a") is None
    merged = to_document(parts.merge(_header(doc)))
    assert set(merged["tasks"]) == {"a", "b"}
    assert merged["timings"] == {"a.pretrained": 2.0, "b.pretrained": 3.0, "total": 1.0}

    # another checkpoint (pretrained again): its parts are its own; the earlier ones stay on disk, out of its results
    other = copy.deepcopy(doc["checkpoint"]) | {"model_sha256": "cd" * 32}
    again = EvalParts(tmp_path / "eval", other)
    assert again.fresh(TASKS, "a", "key-a") is None
    again.write(TASKS, "b", "key-b2", {"value": task})
    assert set(to_document(again.merge({**_header(doc), "checkpoint": other}))["tasks"]) == {"b"}
    assert (tmp_path / "eval/tasks/a.json").is_file()


def test_a_broken_part_file_is_ignored(tmp_path):
    doc = example()
    parts = EvalParts(tmp_path / "eval", doc["checkpoint"])
    parts.write(TASKS, "a", "k", {"value": doc["tasks"]["movie_sentiment"]})
    (tmp_path / "eval/tasks/b.json").write_text("{not json")
    (tmp_path / "eval/tasks/c.json").write_text('{"format": "bertfactory.eval-part", "version": 1, "kind": "tasks", '
                                               '"name": "c", "key": "k", "checkpoint": {}, "value": {"task_type": 1}}')
    assert set(parts.merge(_header(doc))["tasks"]) == {"a"}
    assert parts.fresh(TASKS, "b", "k") is None and parts.fresh(TASKS, "c", "k") is None
    with pytest.raises(ValueError, match="not valid task results"):
        parts.write(TASKS, "d", "k", {"value": {"task_type": "classification"}})


def test_the_grid_follows_the_width():
    assert size_scaled_grid(768) == [1e-5, 3e-5, 9e-5]
    assert size_scaled_grid(128) == [9.4e-5, 2.8e-4, 8.5e-4]
    widths = [64, 128, 256, 384, 512, 768, 1024, 2048]
    centres = [size_scaled_grid(h)[1] for h in widths]
    assert centres == sorted(centres, reverse=True) and len(set(centres)) == len(centres)
    assert size_scaled_grid(16)[1] == 1e-3 and size_scaled_grid(100_000)[1] == 1e-5  # clamped
    with pytest.raises(ValueError):
        size_scaled_grid(0)


def test_an_eval_directory_from_before_parts_is_adopted_not_lost(tmp_path):
    from evaluation.results import write_results

    doc = example()
    written = write_results(tmp_path / "eval" / "results.json", doc)
    parts = EvalParts(tmp_path / "eval", doc["checkpoint"])
    assert parts.adopt(tmp_path / "eval" / "results.json") == ["intrinsic"] + [f"tasks/{t}" for t in written["tasks"]]
    # adopted results match no evaluation's key: kept and merged until their task is evaluated again
    assert parts.fresh(TASKS, "movie_sentiment", "any key") is None
    merged = to_document(parts.merge(_header(written)))
    assert merged["intrinsic"] == written["intrinsic"] and set(merged["tasks"]) == set(written["tasks"])
    for name, task in merged["tasks"].items():
        assert {k: v for k, v in task.items() if k != "settings"} == written["tasks"][name]
        assert task["settings"] == {"epochs": 2}  # the old file's fine-tuning settings
    # once there are parts, a results.json is theirs: nothing is adopted again
    assert parts.adopt(tmp_path / "eval" / "results.json") == []


def test_a_part_of_other_inputs_is_moved_aside_not_overwritten(tmp_path):
    import json

    from bertfactory.replaced import replaced_outputs

    doc = example()
    task = doc["tasks"]["movie_sentiment"]
    parts = EvalParts(tmp_path / "eval", doc["checkpoint"])
    parts.write(TASKS, "a", "key-a", {"value": task})
    parts.write(TASKS, "a", "key-a", {"value": task})  # the same results again: nothing set aside
    assert replaced_outputs(tmp_path) == []
    parts.write(TASKS, "a", "key-a2", {"value": task})
    aside = replaced_outputs(tmp_path)
    assert [p.parent.name for p in aside] == ["tasks"] and aside[0].name.startswith("a.json.replaced-"), aside
    assert json.loads(aside[0].read_text())["key"] == "key-a" and parts.fresh(TASKS, "a", "key-a2") is not None
    assert set(to_document(parts.merge(_header(doc)))["tasks"]) == {"a"}  # the aside file stays out of results
