"""The evaluation stage end to end on a tiny run directory: results.json (valid, complete, reproducible apart from
timings), report.md and the plots; refusals for a mismatched tokenizer and impossible settings."""

import json
import shutil

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import sha256_file
from evaluation.config import EvaluateConfig
from evaluation.report import FINETUNE_PLOT, PRETRAIN_PLOT, read_pretrain_metrics
from evaluation.results import read_results
from evaluation.run import run_evaluate
from training.checkpoint import load_pretrained, save_pretrained


@pytest.fixture
def run_dir(eval_run, tmp_path):
    return shutil.copytree(eval_run, tmp_path / "run")


def config(task_file, **finetune) -> EvaluateConfig:
    return EvaluateConfig.model_validate({
        "device": "cpu",
        "intrinsic": {"batch_size": 32},
        "finetune": {"epochs": 2, "learning_rate": 1e-3, "batch_size": 32, "max_seq_len": 32, "seed": 3, **finetune},
        "tasks": {"movie_sentiment": {"input": str(task_file)}},
    })


def test_evaluate_writes_results_report_and_plots(run_dir, task_slice, tmp_path):
    task_file = task_slice(tmp_path / "reviews.txt", 400)
    results = run_evaluate(config(task_file), run_dir)
    eval_dir = run_dir / "eval"
    assert read_results(eval_dir / "results.json") == results

    ck = results["checkpoint"]
    assert ck["path"] == "pretrain/final"
    assert ck["model_sha256"] == sha256_file(run_dir / "pretrain/final/model.safetensors")
    assert ck["tokenizer_sha256"] == sha256_file(run_dir / "pretrain/final/tokenizer.json")
    assert results["intrinsic"]["instances"] == 96
    assert 0 <= results["intrinsic"]["mlm_accuracy"] <= 1 and 0 <= results["intrinsic"]["nsp_accuracy"] <= 1

    task = results["tasks"]["movie_sentiment"]
    lines = task_file.read_text(encoding="utf-8").splitlines()
    zero = sum(float(line.split("\t")[1]) == 0.0 for line in lines)
    assert zero >= 1  # the slice holds a zero-valence line, so the count below is tested
    assert task["data"]["dropped"] == {"zero_valence": zero}
    assert sum(task["data"]["sizes"].values()) + zero == len(lines) == task["data"]["lines"]
    for split in ("train", "dev", "test"):
        assert sum(task["data"]["label_counts"][split].values()) == task["data"]["sizes"][split]
    # majority: the larger train class, scored on test
    train_counts = task["data"]["label_counts"]["train"]
    test_counts = task["data"]["label_counts"]["test"]
    majority = max(sorted(train_counts), key=lambda name: train_counts[name])
    assert task["majority"]["label_name"] == majority
    assert task["majority"]["accuracy"] == test_counts[majority] / task["data"]["sizes"]["test"]
    for model in ("pretrained", "random_init"):
        assert [e["epoch"] for e in task[model]["epochs"]] == [1, 2]
        assert task[model]["steps"] == 2 * -(-task["data"]["sizes"]["train"] // 32)
        low, high = task[model]["accuracy_ci95"]
        assert low < task[model]["accuracy"] < high
    cmp = task["comparison"]
    assert cmp["accuracy_difference"] == pytest.approx(task["pretrained"]["accuracy"] - task["random_init"]["accuracy"])
    # the discordant counts are what separates the two accuracies
    assert (cmp["pretrained_only_correct"] - cmp["random_init_only_correct"]) == round(
        cmp["accuracy_difference"] * task["data"]["sizes"]["test"])
    assert 0.0 < cmp["mcnemar_p_value"] <= 1.0

    report = (eval_dir / "report.md").read_text(encoding="utf-8")
    assert f"![pretraining loss]({PRETRAIN_PLOT})" in report
    assert f"![fine-tuning dev accuracy]({FINETUNE_PLOT})" in report
    assert f"| pretrained | {task['pretrained']['accuracy']:.4f} |" in report
    assert f"| majority class | {task['majority']['accuracy']:.4f} |" in report
    assert f"| MLM accuracy | {results['intrinsic']['mlm_accuracy']:.4f}" in report
    for plot in (PRETRAIN_PLOT, FINETUNE_PLOT):
        assert (eval_dir / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # a rerun gives the same results apart from wall-clock timings
    again = run_evaluate(config(task_file), run_dir)
    assert {k: v for k, v in again.items() if k != "timings"} == {k: v for k, v in results.items() if k != "timings"}


def test_options_switch_parts_off_and_missing_metrics_are_noted(run_dir, task_slice, tmp_path):
    (run_dir / "pretrain" / "metrics.jsonl").unlink()
    cfg = config(task_slice(tmp_path / "reviews.txt", 300), max_train_examples=50, epochs=1)
    cfg = cfg.model_copy(update={"random_init_baseline": False, "num_threads": 2,
                                 "intrinsic": cfg.intrinsic.model_copy(update={"enabled": False})})
    threads = torch.get_num_threads()
    results = run_evaluate(cfg, run_dir)
    assert torch.get_num_threads() == threads  # the stage's thread setting does not leak into later stages
    assert "intrinsic" not in results
    task = results["tasks"]["movie_sentiment"]
    assert "random_init" not in task and "comparison" not in task and task["data"]["sizes"]["train"] == 50
    report = (run_dir / "eval" / "report.md").read_text(encoding="utf-8")
    assert "No pretraining curve" in report and not (run_dir / "eval" / PRETRAIN_PLOT).exists()


def test_checkpoint_with_another_tokenizer_is_refused(run_dir, task_slice, tmp_path, make_tokenizer):
    model, config_, _ = load_pretrained(run_dir / "pretrain" / "final")
    other = make_tokenizer(tmp_path / "other.json", 500, 300)
    save_pretrained(model, config_, other, run_dir / "pretrain" / "final")
    with pytest.raises(ContractError, match="built with tokenizer sha256"):
        run_evaluate(config(task_slice(tmp_path / "reviews.txt", 300)), run_dir)
    assert not (run_dir / "eval" / "results.json").exists()


def test_sequence_longer_than_the_model_is_refused(run_dir, task_slice, tmp_path):
    cfg = config(task_slice(tmp_path / "reviews.txt", 300), max_seq_len=65)  # the tiny model has 64 positions
    cfg = cfg.model_copy(update={"intrinsic": cfg.intrinsic.model_copy(update={"enabled": False})})
    with pytest.raises(ConfigError, match="max_seq_len=65 exceeds the checkpoint's max_position_embeddings=64"):
        run_evaluate(cfg, run_dir)


def test_missing_checkpoint_and_unknown_config_keys(tmp_path):
    with pytest.raises(ContractError, match="does not exist"):
        run_evaluate(EvaluateConfig(device="cpu"), tmp_path)
    from bertfactory.config import validate

    with pytest.raises(ConfigError, match="unknown key 'finetune.epoch'; valid keys here: .*epochs"):
        validate(EvaluateConfig, {"finetune": {"epoch": 3}}, "test.yaml")


def test_malformed_metrics_line_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n" + "{oops\n")
    with pytest.raises(ContractError, match=f"{path}:2: not a JSON object"):
        read_pretrain_metrics(path)
    path.write_text(json.dumps({"step": "one", "loss": 2.0}) + "\n")
    with pytest.raises(ContractError, match=f"{path}:1: a metrics record needs an integer 'step'"):
        read_pretrain_metrics(path)
