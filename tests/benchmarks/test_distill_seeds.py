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
