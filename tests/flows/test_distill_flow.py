"""The `distill` flow (flows/distill_flow.py) on a tiny run (real text preprocessed by the pipeline, a tiny random
teacher) and the real movie_sentiment task: it runs the distillation stage and stamps it, a rerun in the same
state returns the recorded results without training, a changed config or a changed teacher reruns it, and a run
directory without a teacher fails naming the missing file."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from bertfactory.samples import sample_path
from flows.distill_flow import distill
from flows.recipe import load_recipe
from flows.stages import run_stage
from training.checkpoint import save_pretrained
from training.models.bert.model import BertConfig, BertForPreTraining

DISTILL = {
    "finetune": {"epochs": 1, "num_seeds": 1, "batch_size": 16, "max_seq_len": 24, "max_train_examples": 32,
                 "max_eval_examples": 16, "learning_rate": 1e-3, "eval_batch_size": 32},
    "speed_repeats": 1, "num_threads": 1,
    "distilbert": {"enabled": False}, "tinybert": {"enabled": False},
    "pkd": {"student_layers": 1, "strategy": "skip", "alphas": [0.5], "temperatures": [2.0], "epochs": 1},
}


@pytest.fixture
def run_with_teacher(tmp_path, tiny_recipe):
    watch = tmp_path / "text"
    watch.mkdir()
    shutil.copy(sample_path("sotu") / "1790_george_washington_n.txt", watch)
    recipe = tiny_recipe(tmp_path / "recipe.yaml", [watch])
    run = tmp_path / "run"
    manifest = run_stage("preprocess", load_recipe(recipe), run)["summary"]
    cfg = BertConfig(vocab_size=manifest["tokenizer"]["vocab_size"], hidden_size=16, num_layers=2, num_heads=2,
                     intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(0)
    save_pretrained(BertForPreTraining(cfg), cfg, run / "tokenizer/tokenizer.json", run / "pretrain/final")
    config = tmp_path / "distill.yaml"
    config.write_text(yaml.safe_dump(DISTILL))
    return run, config


def test_distill_flow_runs_once_then_is_up_to_date_until_config_or_teacher_change(run_with_teacher):
    run, config = run_with_teacher
    first = distill(str(config), str(run))
    assert first["stage"] == "distill" and first["status"] == "ran"
    assert set(first["summary"]["methods"]) == {"pkd_skip"}
    results = (run / "distill/results.json").read_bytes()
    assert json.loads(results)["methods"]["pkd_skip"]["student"]["params"] > 0

    again = distill(str(config), str(run))  # a new flow run, same inputs: the stamp answers
    assert again["status"] == "up-to-date" and again["key"] == first["key"]
    assert again["summary"] == first["summary"] and (run / "distill/results.json").read_bytes() == results

    changed = distill(str(config), str(run), ["pkd.epochs=2"])
    assert changed["status"] == "ran" and changed["key"] != first["key"]
    torch.manual_seed(1)
    teacher = run / "pretrain/final"
    cfg = BertConfig(vocab_size=json.loads((teacher / "config.json").read_text())["model"]["vocab_size"],
                     hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position_embeddings=32)
    save_pretrained(BertForPreTraining(cfg), cfg, run / "tokenizer/tokenizer.json", teacher)
    assert distill(str(config), str(run), ["pkd.epochs=2"])["status"] == "ran"  # another teacher


def test_distill_flow_without_a_teacher_names_the_missing_file(tmp_path):
    config = tmp_path / "distill.yaml"
    config.write_text(yaml.safe_dump(DISTILL))
    state = distill(str(config), str(tmp_path / "empty"), return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"distill needs .*empty/pretrain/final/model.safetensors, which does not exist"):
        state.result()


def test_a_changed_distill_config_moves_distill_aside_but_keeps_the_general_students(run_with_teacher):
    """Through the flow, another seed in the same run directory replaces RUN/distill (moved aside); the general
    students live in RUN/cache/distill-general, so with `general_seed` pinned the second seed reuses them."""
    run, config = run_with_teacher
    general = ["pkd.enabled=false", "tinybert.enabled=true", "tinybert.hidden_size=8", "tinybert.num_layers=1",
               "tinybert.intermediate_size=16", "tinybert.general_steps=3", "tinybert.general_batch_size=2",
               "tinybert.intermediate_epochs=1", "tinybert.prediction_epochs=1", "tinybert.ablations=false",
               "tinybert.augment.enabled=false", "general_seed=7"]
    first = distill(str(config), str(run), [*general, "seed=1"])
    assert first["status"] == "ran"
    made = first["summary"]["methods"]["tinybert"]["general_distillation"]
    assert made["reused"] is False and made["cache"].startswith(str(run / "cache" / "distill-general"))
    second = distill(str(config), str(run), [*general, "seed=2"])
    assert second["status"] == "ran" and second["key"] != first["key"]
    assert any(p.name.startswith("distill.replaced-") for p in run.iterdir()), "the first seed's outputs moved aside"
    reused = second["summary"]["methods"]["tinybert"]["general_distillation"]
    assert reused["reused"] is True and reused["cache"] == made["cache"]


def test_a_wrong_teacher_path_is_one_line_naming_the_setting(tmp_path, capsys):
    from flows.cli import main

    config = tmp_path / "distill.yaml"
    config.write_text(yaml.safe_dump(DISTILL))
    run = str(tmp_path / "run")
    # an HF teacher that is not there was told to run `bertfactory run` for "our teacher"
    assert main(["distill", str(config), "--run-dir", run, "--set", f"teacher.hf={tmp_path / 'no-hf'}"]) == 2
    assert capsys.readouterr().err == (f"error: teacher.hf {tmp_path / 'no-hf'}: no such directory; give a Hugging "
                                       "Face BERT directory or sample:NAME (e.g. sample:minilm)\n")
    assert main(["distill", str(config), "--run-dir", run, "--set", "teacher.checkpoint=pretrain/finall"]) == 2
    assert "model.safetensors, which does not exist (teacher.checkpoint pretrain/finall, relative to the run " \
        "directory)" in capsys.readouterr().err
