"""training/tracking.py: metrics records become TensorBoard scalars read back from the event files (TensorBoard's own
EventAccumulator), a resumed stream replaces what was logged after its restart step, and MLflow is used only when
MLFLOW_TRACKING_URI is set and mlflow imports (a stand-in module records the calls)."""

from __future__ import annotations

import sys
import types

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from training.tracking import MetricsSink, TrackingConfig, log_records, scalars


def read_scalars(directory) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_records_become_scalars_in_event_files(tmp_path):
    target = TrackingConfig().target(tmp_path / "tb", run_name="run/pretrain")
    sink = MetricsSink(target)
    sink.log({"step": 10, "loss": 2.5, "lr": 1e-3, "mfu": None, "note": "x", "flag": True}, step=10)
    sink.log({"step": 20, "loss": 2.0, "lr": 5e-4, "mfu": float("nan")}, step=20)
    sink.close()
    got = read_scalars(tmp_path / "tb")
    assert set(got) == {"loss", "lr"}
    assert got["loss"] == [(10, 2.5), (20, 2.0)]
    assert got["lr"][1][0] == 20 and got["lr"][1][1] == pytest.approx(5e-4)


def test_a_resumed_stream_replaces_the_steps_after_its_restart(tmp_path):
    target = TrackingConfig().target(tmp_path / "tb", run_name="r")
    first = MetricsSink(target)
    for step in (50, 100, 150):  # crashed after logging 150; the checkpoint was at 100
        first.log({"loss": float(step)}, step=step)
    first.close()
    resumed = MetricsSink(target)
    for step in (150, 200):
        resumed.log({"loss": step + 0.5}, step=step)
    resumed.close()
    assert read_scalars(tmp_path / "tb")["loss"] == [(50, 50.0), (100, 100.0), (150, 150.5), (200, 200.5)]


def test_tensorboard_off_writes_nothing_and_mlflow_needs_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    target = TrackingConfig(tensorboard=False).target(tmp_path / "tb", run_name="r")
    log_records(target, [{"epoch": 1, "train_loss": 0.5}], step_key="epoch")
    assert not (tmp_path / "tb").exists()


def test_mlflow_gets_the_metrics_when_configured(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("mlflow")
    fake.set_experiment = lambda name: calls.append(("experiment", name))
    fake.start_run = lambda run_name, nested: calls.append(("start", run_name)) or object()
    fake.log_metrics = lambda values, step: calls.append(("metrics", step, values))
    fake.end_run = lambda: calls.append(("end",))
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    target = TrackingConfig(mlflow_experiment="exp").target(tmp_path / "tb", run_name="run/eval/task")
    log_records(target.child("seed-1"), [{"epoch": 1, "train_loss": 0.5, "dev_score": 0.75}], step_key="epoch")
    assert calls == [("experiment", "exp"), ("start", "run/eval/task/seed-1"),
                     ("metrics", 1, {"epoch": 1.0, "train_loss": 0.5, "dev_score": 0.75}), ("end",)]
    assert read_scalars(tmp_path / "tb" / "seed-1")["dev_score"] == [(1, 0.75)]


def test_mlflow_missing_is_skipped_with_one_line(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow -> ImportError
    monkeypatch.setenv("MLFLOW_TRACKING_URI", str(tmp_path / "mlruns"))
    target = TrackingConfig(tensorboard=False).target(tmp_path / "tb", run_name="r")
    with caplog.at_level("INFO", logger="training.tracking"):
        log_records(target, [{"epoch": 1, "train_loss": 0.5}], step_key="epoch")
    assert [r.getMessage() for r in caplog.records] == [
        "MLFLOW_TRACKING_URI is set but mlflow is not installed: metrics go to metrics.jsonl only"]


def test_scalars_keep_finite_numbers_only():
    assert scalars({"step": 3, "a": 1, "b": 2.5, "c": None, "d": "x", "e": False, "f": float("inf")}) == \
        {"a": 1.0, "b": 2.5}
