"""General distillation runs once per student (distillation/general_cache.py): a second task or seed with the same
teacher, shards, initial student, settings and general seed starts from the cached general student, and the scores
are then exactly those of training it again; any changed input trains anew; a damaged entry is refused by name."""

import json

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from distillation.config import DistillConfig
from distillation.state_cache import state_digest
from distillation.stage import run_distill

from .test_stage import TINY, _run_with_teacher


def _config(**changes) -> DistillConfig:
    doc = json.loads(json.dumps(TINY))
    doc["pkd"] = {"enabled": False}
    doc["tinybert"]["ablations"] = False
    doc["tinybert"]["augment"] = {"enabled": False}
    for dotted, value in changes.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return DistillConfig.model_validate(doc)


def _general(results: dict) -> dict:
    return {name: m["general_distillation"] for name, m in results["methods"].items()}


def _scores(results: dict) -> dict:
    return {name: (m["student"]["score"], m["student_direct"]["score"]) for name, m in results["methods"].items()}


def test_second_run_reuses_the_general_students_and_scores_the_same(run_factory):
    run, _ = _run_with_teacher(run_factory)
    first = run_distill(_config(general_seed=7), run)
    assert {g["reused"] for g in _general(first).values()} == {False}
    entries = sorted(p.name for p in (run / "cache" / "distill-general").iterdir())
    assert [e.split("-")[0] for e in entries] == ["distilbert", "tinybert"]

    again = run_distill(_config(general_seed=7), run)
    assert {g["reused"] for g in _general(again).values()} == {True}
    assert _scores(again) == _scores(first)
    assert [g["cache"] for g in _general(again).values()] == [g["cache"] for g in _general(first).values()]

    # without the cache the general students are trained again, to the same scores
    uncached = run_distill(_config(general_seed=7, general_cache=None), run)
    assert {g["reused"] for g in _general(uncached).values()} == {False}
    assert {g["cache"] for g in _general(uncached).values()} == {None}
    assert _scores(uncached) == _scores(first)


def test_another_seed_shares_the_entry_only_with_the_general_seed_pinned(run_factory):
    run, _ = _run_with_teacher(run_factory)
    run_distill(_config(seed=1, general_seed=7), run)
    other_seed = run_distill(_config(seed=2, general_seed=7), run)
    assert {g["reused"] for g in _general(other_seed).values()} == {True}
    unpinned = run_distill(_config(seed=2), run)  # general seed = seed 2: shard order and dropout differ
    assert {g["reused"] for g in _general(unpinned).values()} == {False}


def test_a_changed_setting_trains_that_student_again(run_factory):
    run, _ = _run_with_teacher(run_factory)
    run_distill(_config(general_seed=7), run)
    changed = run_distill(_config(general_seed=7, **{"tinybert.general_steps": 3}), run)
    assert _general(changed)["distilbert"]["reused"] is True
    assert _general(changed)["tinybert"]["reused"] is False
    assert _general(changed)["tinybert"]["steps"] == 3


def test_general_only_prepares_the_entries_a_task_run_then_reuses(run_factory):
    run, _ = _run_with_teacher(run_factory)
    prepared = run_distill(_config(general_seed=7, general_only=True), run)
    assert prepared["general_only"] is True and "task" not in prepared
    assert {g["reused"] for g in _general(prepared).values()} == {False}
    assert "General distillation only" in (run / "distill" / "report.md").read_text()
    task_run = run_distill(_config(general_seed=7), run)
    assert {g["reused"] for g in _general(task_run).values()} == {True}


def test_general_only_without_a_cache_or_a_general_student_is_refused(run_factory):
    with pytest.raises(ValueError, match="general_cache"):
        _config(general_only=True, general_cache=None)
    run, _ = _run_with_teacher(run_factory)
    with pytest.raises(ConfigError, match="general_steps > 0"):
        run_distill(_config(general_only=True, **{"distilbert.general_steps": 0, "tinybert.general_steps": 0}), run)


def test_an_entry_whose_key_does_not_match_its_name_is_refused(run_factory):
    run, _ = _run_with_teacher(run_factory)
    first = run_distill(_config(general_seed=7, **{"distilbert.enabled": False}), run)
    key_file = run / "cache" / "distill-general" / first["methods"]["tinybert"]["general_distillation"]["cache"].split("/")[-1] / "key.json"
    doc = json.loads(key_file.read_text())
    doc["key"]["settings"]["steps"] = 999
    key_file.write_text(json.dumps(doc))
    with pytest.raises(ContractError, match="key.json"):
        run_distill(_config(general_seed=7, **{"distilbert.enabled": False}), run)


def test_state_digest_sees_every_weight():
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    before = state_digest({"layer": layer})
    assert state_digest({"layer": layer}) == before
    with torch.no_grad():
        layer.bias[1] += 1e-6
    assert state_digest({"layer": layer}) != before
    assert state_digest({"other": layer}) != state_digest({"layer": layer})


def test_the_cache_of_a_run_on_a_bucket_is_the_same_path_in_that_bucket(tmp_path, monkeypatch):
    """resolve_cache: for a run directory that is the working copy of s3://b/runs/x, a relative general_cache is
    resolved in the bucket (`..` may leave the run, never the bucket); a URL is itself; an absolute path is local."""
    from bertfactory import run_location, storage
    from distillation.state_cache import resolve_cache

    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    monkeypatch.setattr(storage, "check_location", lambda url, what="": None)  # no server needed for the paths
    run = run_location.resolve_run_dir("s3://b/runs/x")
    assert resolve_cache("cache/distill-general", run, "general_cache") == (
        run_location.working_copy_of("s3://b/runs/x/cache/distill-general"), "s3://b/runs/x/cache/distill-general")
    assert resolve_cache("../shared", run, "general_cache")[1] == "s3://b/runs/shared"
    assert resolve_cache("gs://other/gd/", run, "general_cache")[1] == "gs://other/gd"
    assert resolve_cache(str(tmp_path / "abs"), run, "general_cache") == (tmp_path / "abs", None)
    assert resolve_cache(None, run, "general_cache") == (None, None)
    with pytest.raises(ConfigError, match=r"general_cache '../../../up': relative to the run location s3://b/runs/x "
                                          r"it leaves the bucket"):
        resolve_cache("../../../up", run, "general_cache")
    local = tmp_path / "local-run"
    assert resolve_cache("x/../cache/g", local, "general_cache") == (local / "cache" / "g", None)


def test_the_fine_tuned_teacher_is_reused_and_every_score_is_what_fine_tuning_it_again_gives(run_factory):
    """teacher_cache: a second run with the same teacher, task inputs, fine-tuning settings and seed loads the
    fine-tuned teacher (and the random state its fine-tuning left, which TinyBERT's projections draw from without
    general distillation), so every method scores exactly what a run without the cache scores; another seed or
    another fine-tuning setting fine-tunes again."""
    run, _ = _run_with_teacher(run_factory)
    # TinyBERT alone, without general distillation: its projections are the first draw after the teacher's
    # fine-tuning (another method in between would reseed the generator)
    changes = {"distilbert.enabled": False, "tinybert.general_steps": 0}
    metrics = run / "distill" / "metrics.jsonl"
    seen = 0

    def losses() -> list[tuple]:  # the distillation loops' loss lines of the last run
        nonlocal seen
        lines = metrics.read_text().splitlines()
        records, seen = [json.loads(line) for line in lines[seen:]], len(lines)
        return [(r["step"], r["loss"]) for r in records]

    first = run_distill(_config(**changes), run)
    first_losses = losses()
    assert first["teacher_fine_tuning"]["reused"] is False
    (entry,) = (run / "cache" / "distill-teacher").iterdir()
    assert entry.name.startswith("teacher-movie_sentiment-") and (entry / "state.pt").is_file()
    again = run_distill(_config(**changes), run)
    assert again["teacher_fine_tuning"]["reused"] is True
    assert losses() == first_losses
    uncached = run_distill(_config(teacher_cache=None, **changes), run)
    assert losses() == first_losses
    record = uncached["teacher_fine_tuning"]
    assert (record["key"], record["cache"], record["reused"]) == (first["teacher_fine_tuning"]["key"], None, False)
    # the entry keeps what fine-tuning it cost where it ran: a reuse reports what it saved
    assert first["teacher_fine_tuning"]["cost"]["cpu_s"] > 0
    assert again["teacher_fine_tuning"]["cost"] == first["teacher_fine_tuning"]["cost"]
    assert set(first["methods"]) == {"tinybert"}
    for results in (again, uncached):
        assert _scores(results) == _scores(first)
        assert {n: m["teacher"]["score"] for n, m in results["methods"].items()} == \
            {n: m["teacher"]["score"] for n, m in first["methods"].items()}
    assert run_distill(_config(seed=2, **changes), run)["teacher_fine_tuning"]["reused"] is False
    assert run_distill(_config(**changes, **{"finetune.epochs": 2}), run)["teacher_fine_tuning"]["reused"] is False


def test_a_cache_hit_keeps_the_numbers_of_the_later_phases_event_directories(run_factory):
    """TensorBoard's NN-<phase> directories: a reused general student still takes its number, so a run that trains
    and one that reuses write each later phase to the same name."""
    run, _ = _run_with_teacher(run_factory)
    boards = run / "distill" / "tensorboard"
    run_distill(_config(general_seed=7), run)
    trained = {p.name for p in boards.iterdir()}
    boards.rename(run / "tensorboard-trained")
    run_distill(_config(general_seed=7), run)
    reused = {p.name for p in boards.iterdir()}
    general = {name for name in trained if name.endswith("-general")}
    assert len(general) == 2 and reused == trained - general, (sorted(trained), sorted(reused))
