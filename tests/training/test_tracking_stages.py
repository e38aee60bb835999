"""Experiment tracking through the stages (issue 21 item 6): pretraining and every distillation phase write TensorBoard
event files whose scalars, read back with TensorBoard's EventAccumulator, are the metrics.jsonl records; a resumed
pretraining run replaces the events after its checkpoint; `tracking.tensorboard: false` writes none. (Fine-tuning's
curves: tests/flows/test_evaluations_add_up.py.)"""

from __future__ import annotations

import json

import pytest

from distillation.config import DistillConfig
from flows.artifacts import report_links, stage_markdown
from distillation.stage import run_distill
from tests.distillation.test_stage import TINY, _run_with_teacher
from tests.training.test_tracking import read_scalars
from training.config import ModelConfig
from training.pretrain import pretrain, run_pretrain
from training.pretrain_config import PretrainConfig

SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _metrics(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_pretraining_metrics_go_to_tensorboard_and_a_resume_replaces_the_tail(tiny_run):
    cfg = PretrainConfig(batch_size=8, max_steps=40, warmup_steps=2, learning_rate=3e-3, log_every=10, save_every=20,
                         seed=1)
    # interrupted after logging step 30, resumed from the checkpoint at 20: step 30 is logged twice
    assert pretrain(SMALL, cfg, tiny_run, stop_after=30)["status"] == "stopped"
    first = read_scalars(tiny_run / "pretrain" / "tensorboard")["loss"]
    assert [step for step, _ in first] == [10, 20, 30]
    assert pretrain(SMALL, cfg, tiny_run)["resumed_from_step"] == 20
    records = _metrics(tiny_run / "pretrain" / "metrics.jsonl")
    assert [r["step"] for r in records] == [10, 20, 30, 40]
    board = read_scalars(tiny_run / "pretrain" / "tensorboard")
    for key in ("loss", "mlm_loss", "lr", "tokens"):  # one event per step: the resumed run's replaced the first's
        assert board[key] == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in records], key
    # the Prefect artifacts link to them
    assert report_links("pretrain", tiny_run)[-1] == tiny_run / "pretrain" / "tensorboard"
    summary = json.loads((tiny_run / "pretrain" / "summary.json").read_text())
    md = stage_markdown("pretrain", tiny_run, {"status": "ran", "key": "k" * 64, "seconds": 1.0, "summary": summary})
    assert md.endswith(f"TensorBoard: `tensorboard --logdir {(tiny_run / 'pretrain' / 'tensorboard').resolve()}`")


def test_tensorboard_off_writes_no_events(tiny_run):
    cfg = PretrainConfig(batch_size=8, max_steps=10, warmup_steps=2, log_every=5, save_every=100, seed=1,
                         tracking={"tensorboard": False})
    run_pretrain(SMALL, cfg, tiny_run)
    assert not (tiny_run / "pretrain" / "tensorboard").exists()
    assert all(p.is_file() for p in report_links("pretrain", tiny_run))  # no event directory to link


def test_every_distillation_phase_has_its_event_files(run_factory):
    run, _ = _run_with_teacher(run_factory)
    run_distill(DistillConfig.model_validate(TINY), run)
    board = run / "distill" / "tensorboard"
    phases = sorted(p.name for p in board.iterdir())
    assert phases[:2] == ["01-distilbert-general", "02-pkd-alpha0.5-t2"] and phases[2] == "03-tinybert-general"
    assert all("tinybert" in p for p in phases[2:]) and len(phases) > 3
    records = _metrics(run / "distill" / "metrics.jsonl")
    general = read_scalars(board / "01-distilbert-general")
    assert general["loss"] == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in records[:len(general["loss"])]]
    assert {"ce_loss", "mlm_loss", "cos_loss", "lr"} <= set(general)
