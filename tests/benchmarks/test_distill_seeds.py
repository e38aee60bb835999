"""benchmarks/distill_seeds.py: the phase timer records each wrapped call (also one that raises) under its label and
puts the functions back, its report's remainder is the total minus the phases, and its labels fit the calls the
distillation stage makes; the summary's mean +- sample std per method."""

from __future__ import annotations

import inspect
import types

import pytest


def test_phase_timer_records_each_call_and_the_remainder(load_benchmark):
    seeds = load_benchmark("distill_seeds")
    module = types.SimpleNamespace(train=lambda steps: sum(range(steps)), fail=lambda: 1 / 0)
    timer = seeds.PhaseTimer()
    original_train = module.train
    timer.wrap(module, "train", lambda steps: f"train {steps} steps")
    timer.wrap(module, "fail", lambda: "failing phase")
    assert module.train(1000) == sum(range(1000))
    with pytest.raises(ZeroDivisionError):
        module.fail()
    assert [p["phase"] for p in timer.phases] == ["train 1000 steps", "failing phase"]
    assert all(p["wall_s"] >= 0 and p["cpu_s"] >= 0 for p in timer.phases)
    report = timer.report(wall_s=10.0, cpu_s=4.0)
    rest = report["phases"][-1]
    assert rest["phase"].startswith("rest")
    assert rest["wall_s"] == pytest.approx(10.0 - sum(p["wall_s"] for p in timer.phases), abs=0.01)
    assert report["cpu_s"] == 4.0
    timer.restore()
    assert module.train is original_train


def test_phase_labels_fit_the_stage_calls(load_benchmark):
    import distillation.stage as stage

    seeds = load_benchmark("distill_seeds")
    originals = {name: getattr(stage, name) for name in
                 ("load_teacher", "_finetune", "run_distillation", "augment_features", "inference_seconds")}
    timer = seeds.PhaseTimer.around_stage()
    try:
        assert all(getattr(stage, name) is not fn for name, fn in originals.items())
        # the labels name _finetune's `name` and run_distillation's objective, batches and steps, as the stage passes them
        assert list(inspect.signature(originals["_finetune"]).parameters)[:5] == ["encoder", "task", "cfg", "pad_id", "name"]
        assert list(inspect.signature(originals["run_distillation"]).parameters)[:4] == ["model", "objective", "batches",
                                                                                         "steps"]
    finally:
        timer.restore()
    assert all(getattr(stage, name) is fn for name, fn in originals.items())


def test_summarise_gives_mean_and_sample_std_per_method(load_benchmark):
    seeds = load_benchmark("distill_seeds")

    def pair(teacher: float, student: float) -> dict:
        row = {"teacher": {"score": teacher}, "student": {"score": student}, "retention": student / teacher,
               "student_direct": {"score": student - 0.1}, "speedup": 2.0}
        return {"methods": {"distilbert": row}, "majority_accuracy": 0.25}

    summary = seeds.summarise({"trec_coarse": {1: pair(0.8, 0.8), 2: pair(0.9, 0.72)}})
    m = summary["trec_coarse"]["methods"]["distilbert"]
    assert m["retention"]["mean"] == pytest.approx(0.9)
    assert m["retention"]["std"] == pytest.approx(0.1414, abs=1e-4)
    assert m["seeds"] == [1, 2] and summary["trec_coarse"]["majority_accuracy"] == [0.25]
    assert "| trec_coarse | distilbert | 2 |" in seeds.render(summary)
    assert "ablations" not in m and "general_distillation" not in m


def test_summarise_carries_tinybert_ablations_and_the_general_students(load_benchmark):
    seeds = load_benchmark("distill_seeds")

    def pair(no_gd: float, reused: bool) -> dict:
        row = {"teacher": {"score": 0.9}, "student": {"score": 0.88}, "retention": 0.88 / 0.9,
               "student_direct": {"score": 0.8}, "speedup": 2.0, "ablations": {"no_gd": no_gd, "no_td": 0.8},
               "general_distillation": {"key": "k1", "steps": 200, "reused": reused}}
        return {"methods": {"tinybert": row}, "majority_accuracy": 0.25}

    m = seeds.summarise({"trec_coarse": {1: pair(0.86, False), 2: pair(0.84, True)}})["trec_coarse"]["methods"]["tinybert"]
    assert m["ablations"]["no_gd"]["mean"] == pytest.approx(0.85) and m["ablations"]["no_td"]["n"] == 2
    assert m["general_distillation"] == {"steps": [200], "entries": ["k1"], "reused": 1}
    table = seeds.render_seeds({"trec_coarse": {1: pair(0.86, False), 2: pair(0.84, True)}}).splitlines()
    assert table[0].endswith("| tinybert fine-tuned directly | tinybert without general distillation | majority class |")
    assert table[3] == "| trec_coarse | 2 | 0.900 | 0.880 (97.8%) | 0.800 | 0.840 | 0.250 |"


def test_merge_joins_task_summaries_of_one_clean_commit(load_benchmark, tmp_path):
    import json

    seeds = load_benchmark("distill_seeds")
    from pathlib import Path

    config = str(Path(seeds.__file__).resolve().parents[1] / "configs" / "distill-minilm.yaml")

    def summary(name: str, task: str, overrides: list[str], **provenance) -> object:
        doc = {"commit": "abc", "dirty": False, "date": f"2026-01-0{len(name)}", "config": config,
               "overrides": overrides, "tasks": {task: {"methods": {}, "majority_accuracy": [0.25]}}, **provenance}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        return path

    a = summary("a", "trec_coarse", ["finetune.max_train_examples=null", "finetune.max_seq_len=32"])
    b = summary("bb", "movie_sentiment", ["finetune.max_train_examples=2000"])
    merged = seeds.merge([a, b])
    assert merged["commit"] == "abc" and merged["dirty"] is False and merged["date"] == "2026-01-02"
    assert merged["tasks"]["trec_coarse"]["finetune"]["max_train_examples"] is None
    assert merged["tasks"]["trec_coarse"]["finetune"]["max_seq_len"] == 32
    assert merged["tasks"]["movie_sentiment"]["finetune"]["max_train_examples"] == 2000
    assert merged["tasks"]["movie_sentiment"]["overrides"] == ["finetune.max_train_examples=2000"]
    with pytest.raises(ValueError, match="different"):
        seeds.merge([a, summary("c", "sst2", [], commit="def")])
    with pytest.raises(ValueError, match="uncommitted"):
        seeds.merge([a, summary("d", "sst2", [], dirty=True)])
    with pytest.raises(ValueError, match="two summaries"):
        seeds.merge([a, summary("e", "trec_coarse", [])])


def test_merge_keeps_the_earlier_tasks_it_does_not_measure_again_with_their_commit(load_benchmark, tmp_path):
    import json
    from pathlib import Path

    seeds = load_benchmark("distill_seeds")
    config = str(Path(seeds.__file__).resolve().parents[1] / "configs" / "distill-minilm.yaml")
    entry = {"methods": {}, "majority_accuracy": [0.25]}
    earlier = {"commit": "old", "dirty": False, "date": "2026-01-01", "config": config, "merged_from": [],
               "tasks": {"trec_coarse": {**entry, "overrides": ["finetune.max_seq_len=32"]},
                         "movie_sentiment": {**entry, "overrides": ["finetune.max_train_examples=2000"]}}}
    new = {"commit": "new", "dirty": False, "date": "2026-01-05", "config": config,
           "overrides": ["finetune.max_train_examples=null"], "tasks": {"movie_sentiment": entry}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    (tmp_path / "new.json").write_text(json.dumps(new))
    merged = seeds.merge([tmp_path / "new.json"], keep=tmp_path / "earlier.json")
    assert list(merged["tasks"]) == ["trec_coarse", "movie_sentiment"]  # the earlier order
    assert merged["commit"] == "new" and merged["date"] == "2026-01-05"
    assert merged["tasks"]["trec_coarse"]["measured"] == {"commit": "old", "date": "2026-01-01", "dirty": False}
    assert merged["tasks"]["trec_coarse"]["overrides"] == ["finetune.max_seq_len=32"]
    assert merged["tasks"]["movie_sentiment"]["measured"]["commit"] == "new"  # measured again: the new entry
    assert merged["tasks"]["movie_sentiment"]["finetune"]["max_train_examples"] is None
    assert merged["merged_from"][-1].endswith("(kept: trec_coarse)")
    (tmp_path / "dirty.json").write_text(json.dumps({**earlier, "dirty": True}))
    with pytest.raises(ValueError, match="one clean commit"):
        seeds.merge([tmp_path / "new.json"], keep=tmp_path / "dirty.json")


def test_merge_keeping_a_plain_summary_gives_its_tasks_their_overrides(load_benchmark, tmp_path):
    """An earlier document that is one run's summary.json (not a merge) holds its overrides once, at the top: the
    tasks carried from it keep them, so the README still names their shards and length (scripts/readme_quality.py
    would otherwise read the merged document's top level, which has none, as "the config's shards")."""
    import json
    from pathlib import Path

    seeds = load_benchmark("distill_seeds")
    config = str(Path(seeds.__file__).resolve().parents[1] / "configs" / "distill-minilm.yaml")
    entry = {"methods": {}, "majority_accuracy": [0.25]}
    earlier = {"commit": "old", "dirty": False, "date": "2026-01-01", "config": config,
               "overrides": ["shards=corpus/shards", "finetune.max_seq_len=32"], "tasks": {"trec_coarse": entry}}
    new = {"commit": "new", "dirty": False, "date": "2026-01-05", "config": config,
           "overrides": ["shards=/abs/corpus/shards"], "tasks": {"movie_sentiment": entry}}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    (tmp_path / "new.json").write_text(json.dumps(new))
    merged = seeds.merge([tmp_path / "new.json"], keep=tmp_path / "earlier.json")
    trec = merged["tasks"]["trec_coarse"]
    assert trec["overrides"] == ["shards=corpus/shards", "finetune.max_seq_len=32"]
    assert trec["finetune"]["max_seq_len"] == 32 and trec["measured"]["commit"] == "old"
    assert merged["tasks"]["movie_sentiment"]["overrides"] == ["shards=/abs/corpus/shards"]
    assert "overrides" not in merged  # per task only
    # a path inside the checkout is kept relative to it: the merged file is quoted from other checkouts
    inside = {**new, "overrides": [f"shards={seeds.REPO / 'runs' / 'gd' / 'corpus' / 'shards'}", "seed=3"]}
    (tmp_path / "inside.json").write_text(json.dumps(inside))
    assert seeds.merge([tmp_path / "inside.json"])["tasks"]["movie_sentiment"]["overrides"] == [
        "shards=runs/gd/corpus/shards", "seed=3"]


def test_the_per_seed_table_gives_retention_per_seed_and_a_direct_column_only_where_it_is_another_model(
        load_benchmark):
    seeds = load_benchmark("distill_seeds")

    def row(teacher: float, student: float, direct: float) -> dict:
        return {"teacher": {"score": teacher}, "student": {"score": student}, "retention": student / teacher,
                "student_direct": {"score": direct}, "speedup": 2.0}

    table = seeds.render_seeds({"trec_coarse": {
        2: {"methods": {"distilbert": row(0.9, 0.88, 0.88), "tinybert": row(0.9, 0.89, 0.85)},
            "majority_accuracy": 0.245},
        1: {"methods": {"distilbert": row(0.92, 0.9, 0.9), "tinybert": row(0.92, 0.91, 0.86)},
            "majority_accuracy": 0.245}}})
    lines = table.splitlines()
    assert lines[0] == ("| task | seed | teacher | distilbert (retention) | tinybert (retention) | "
                        "tinybert fine-tuned directly | majority class |")
    assert lines[2] == "| trec_coarse | 1 | 0.920 | 0.900 (97.8%) | 0.910 (98.9%) | 0.860 | 0.245 |"  # seeds in order
    assert lines[3].startswith("| trec_coarse | 2 | 0.900 | 0.880 (97.8%) |")


def test_only_summary_as_of_labels_the_pairs_with_the_code_that_trained_them(load_benchmark, tmp_path, capsys):
    import json
    from pathlib import Path

    seeds = load_benchmark("distill_seeds")
    config = str(Path(seeds.__file__).resolve().parents[1] / "configs" / "distill-minilm.yaml")
    row = {"teacher": {"score": 0.85}, "student": {"score": 0.83}, "retention": 0.83 / 0.85,
           "student_direct": {"score": 0.83}, "speedup": 2.0}
    for seed in (1, 2):  # two pairs, trained by two parallel invocations (each wrote summary.json with its own)
        pair = tmp_path / "movie_sentiment" / f"seed-{seed}" / "distill"
        pair.mkdir(parents=True)
        (pair / "results.json").write_text(json.dumps({"methods": {"distilbert": row}, "majority_accuracy": 0.49}))
    overrides = ["finetune.max_train_examples=null"]
    chunk = {"commit": "abc1234", "dirty": False, "date": "2026-11-30T10:53:20+00:00", "config": config,
             "overrides": overrides, "tasks": {}}
    (tmp_path / "summary.json").write_text(json.dumps(chunk))
    argv = ["--config", config, "--run-dir", str(tmp_path), "--tasks", "movie_sentiment", "--seeds", "1", "2",
            "--set", overrides[0], "--only-summary", "--as-of", str(tmp_path / "summary.json")]
    import logging

    import torch

    import flows.distill_flow  # noqa: F401  main() imports it; importing Prefect installs its root handler, which
    #                            is the import's doing, not main()'s (run alone, this test failed on it)
    handlers, threads = list(logging.getLogger().handlers), torch.get_num_threads()
    assert seeds.main(argv) == 0
    # reading files changes no process-wide state: root logging bound to this test's captured stderr broke the
    # logging of every later test in the same process (RecursionError / "Logging error" in tests/flows)
    assert logging.getLogger().handlers == handlers and torch.get_num_threads() == threads
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["commit"], summary["dirty"], summary["date"]) == ("abc1234", False, "2026-11-30T10:53:20+00:00")
    assert summary["tasks"]["movie_sentiment"]["methods"]["distilbert"]["seeds"] == [1, 2]
    assert "| movie_sentiment | 2 | 0.850 | 0.830 (97.6%) | 0.490 |" in capsys.readouterr().out
    other = [a if a != overrides[0] else "finetune.max_train_examples=2000" for a in argv]
    with pytest.raises(SystemExit):  # another --set list: not the invocations that trained these pairs
        seeds.main(other)
    assert "are not this invocation's" in capsys.readouterr().err


def test_seeds_trained_at_different_commits_each_keep_theirs_from_the_pairs_stamps(load_benchmark, tmp_path):
    """A study run over sessions: seeds 1 and 2 trained at one commit, seed 3 at another; the summary's task names
    both, read from each pair's stage stamp (not the commit that summarised them), and a pair without a stamp
    leaves the task unlabelled rather than guessed."""
    import json

    seeds = load_benchmark("distill_seeds")
    for seed, commit, finished in ((1, "a" * 40, "2026-11-30T12:48:18+00:00"), (2, "a" * 40, "2026-11-30T12:49:00+00:00"),
                                   (3, "b" * 40, "2026-11-30T20:05:00+00:00")):
        stamp = tmp_path / f"seed-{seed}" / ".bertfactory" / "distill.json"
        stamp.parent.mkdir(parents=True)
        stamp.write_text(json.dumps({"code": {"commit": commit, "dirty": False, "version": "0.1.0"},
                                     "finished_at": finished}))
    trained = {seed: seeds.pair_provenance(tmp_path / f"seed-{seed}") for seed in (1, 2, 3)}
    assert seeds.seeds_measured(trained) == [
        {"seeds": [1, 2], "commit": "aaaaaaa", "dirty": False, "date": "2026-11-30T12:49:00+00:00"},
        {"seeds": [3], "commit": "bbbbbbb", "dirty": False, "date": "2026-11-30T20:05:00+00:00"}]
    assert seeds.pair_provenance(tmp_path / "seed-4") is None
    assert seeds.seeds_measured({**trained, 4: None}) is None


def test_kept_pairs_give_the_same_summary_on_another_machine(load_benchmark, tmp_path, capsys):
    """--keep-pairs copies each pair's small files (not the models) into a folder with RUN's layout; the summary
    made from that folder alone, as a fresh clone would, is the run's, each seed labelled with the commit of the
    stamp that trained it. An unfinished pair is refused, nothing copied."""
    import json
    from pathlib import Path

    import flows.distill_flow  # noqa: F401  (see the --as-of test: Prefect's root handler comes with the import)

    seeds = load_benchmark("distill_seeds")
    config = str(Path(seeds.__file__).resolve().parents[1] / "configs" / "distill-minilm.yaml")
    run, kept = tmp_path / "run", tmp_path / "kept"
    for seed, commit, score in ((1, "a" * 40, 0.83), (2, "b" * 40, 0.81)):
        pair = run / "movie_sentiment" / f"seed-{seed}"
        row = {"teacher": {"score": 0.85}, "student": {"score": score}, "retention": score / 0.85, "speedup": 2.0,
               "student_direct": {"score": 0.80}}
        (pair / "distill" / "teacher").mkdir(parents=True)
        (pair / "distill" / "teacher" / "model.safetensors").write_bytes(b"\0" * 4096)  # what stays behind
        (pair / "distill" / "results.json").write_text(json.dumps({"methods": {"distilbert": row},
                                                                   "majority_accuracy": 0.49}))
        (pair / "distill" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
        (pair / ".bertfactory").mkdir()
        (pair / ".bertfactory" / "distill.json").write_text(json.dumps(
            {"code": {"commit": commit, "dirty": False}, "finished_at": f"2026-12-0{seed}T08:00:00+00:00"}))
    argv = ["--config", config, "--tasks", "movie_sentiment", "--seeds", "1", "2", "--only-summary"]
    assert seeds.main([*argv, "--run-dir", str(run), "--keep-pairs", str(kept)]) == 0
    here = json.loads((run / "summary.json").read_text())
    pair = kept / "movie_sentiment" / "seed-2"
    assert sorted(str(p.relative_to(pair)) for p in pair.rglob("*") if p.is_file()) == [
        ".bertfactory/distill.json", "distill/metrics.jsonl", "distill/results.json"]  # no model, no phases.json
    assert (pair / "distill" / "metrics.jsonl").read_text() == '{"step": 1, "loss": 0.5}\n'

    assert seeds.main([*argv, "--run-dir", str(kept)]) == 0  # RUN gone: only the kept folder
    there = json.loads((kept / "summary.json").read_text())
    assert there["tasks"] == here["tasks"]
    assert there["tasks"]["movie_sentiment"]["measured_seeds"] == [
        {"seeds": [1], "commit": "aaaaaaa", "dirty": False, "date": "2026-12-01T08:00:00+00:00"},
        {"seeds": [2], "commit": "bbbbbbb", "dirty": False, "date": "2026-12-02T08:00:00+00:00"}]
    assert there["tasks"]["movie_sentiment"]["methods"]["distilbert"]["student"]["values"] == [0.83, 0.81]

    unfinished = run / "movie_sentiment" / "seed-3"
    unfinished.mkdir()
    with pytest.raises(ValueError, match="has not finished"):
        seeds.keep_pair(unfinished, kept / "movie_sentiment" / "seed-3")
    assert not (kept / "movie_sentiment" / "seed-3").exists()
