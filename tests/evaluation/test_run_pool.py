"""evaluate.workers (evaluation/run_pool.py): the fine-tuning runs of each model in spawned worker processes give
exactly the results of one process at the same thread count (scores, chosen learning rate, epochs, predictions),
on the evaluation stage as users run it, and so do the feature-based taggers; a worker that dies fails with one line; the settings refuse what cannot
work."""

import os
import shutil

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from evaluation.config import EvaluateConfig, FeatureBasedConfig
from evaluation.features import compare_options
from evaluation.finetune import finetune_model, prepare_task
from evaluation.run import run_evaluate
from evaluation.run_pool import RunPool
from tests.evaluation.test_finetune import finetune_settings, rule_task, text_encoder, tiny_encoder  # noqa: F401

CPU = torch.device("cpu")


def stage_config(task_file, workers: int) -> EvaluateConfig:
    return EvaluateConfig.model_validate({
        "device": "cpu", "num_threads": 1, "workers": workers, "worker_threads": 1,
        "intrinsic": {"enabled": False}, "objective": {"enabled": False}, "baselines": ["majority"],
        "finetune": {"epochs": 2, "learning_rates": [1e-3, 3e-3], "batch_size": 32, "max_seq_len": 32, "seed": 3,
                     "num_seeds": 2},
        "tasks": {"movie_sentiment": {"input": str(task_file)}},
    })


def test_two_workers_give_the_scores_of_one_process(eval_run, task_slice, tmp_path):
    task_file = task_slice(tmp_path / "reviews.txt", 300)
    results = {}
    for workers in (1, 2):
        run_dir = shutil.copytree(eval_run, tmp_path / f"run{workers}")
        results[workers] = run_evaluate(stage_config(task_file, workers), run_dir)["tasks"]["movie_sentiment"]
    one, two = results[1], results[2]
    for model in ("pretrained", "random_init"):
        # 2 rates x 2 seeds each: every run's epochs (train loss, dev score), the grid and the chosen rate
        assert len(one[model]["runs"]) == 2 and len(one[model]["lr_grid"]) == 2
        assert two[model] == one[model]
    assert two["comparison"] == one["comparison"]


def test_the_pool_returns_each_run_in_order_with_its_weights(text_encoder):
    data = rule_task("classification", 120)
    cfg = finetune_settings(epochs=1, learning_rates=[1e-7, 3e-3], num_seeds=2)
    task = prepare_task(data, text_encoder, cfg)
    vocab = text_encoder.tokenizer.get_vocab_size()
    alone = finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task, cfg, CPU, 0, "alone")
    with RunPool(workers=2, threads=torch.get_num_threads()) as pool:
        pooled = finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task, cfg, CPU, 0, "pooled", pool=pool)
    assert pooled.learning_rate == alone.learning_rate and pooled.grid == alone.grid
    assert [(r.seed, r.epochs, r.test_metrics, r.test_predictions) for r in pooled.runs] == \
        [(r.seed, r.epochs, r.test_metrics, r.test_predictions) for r in alone.runs]
    assert alone.best_state.keys() == pooled.best_state.keys()
    assert all(torch.equal(alone.best_state[k], pooled.best_state[k]) for k in alone.best_state)


def test_the_feature_based_taggers_in_workers_are_the_ones_trained_here(text_encoder):
    data = rule_task("tagging", 120)
    task = prepare_task(data, text_encoder, finetune_settings(epochs=1))
    encoder = tiny_encoder(text_encoder.tokenizer.get_vocab_size(), seed=5)
    cfg = FeatureBasedConfig(enabled=True, task=data.name, lstm_hidden=8, epochs=2,
                             options=["last", "concat_last_four", "scalar_mix"])
    here = compare_options(encoder, task, cfg, CPU, 0, seed=3)
    with RunPool(workers=2, threads=torch.get_num_threads()) as pool:
        there = compare_options(encoder, task, cfg, CPU, 0, seed=3, pool=pool)
    assert [r["option"] for r in there["rows"]] == ["last", "concat_last_four", "scalar_mix"]
    assert there == here


class DiesWhenUnpacked(nn.Module):
    """An encoder whose copy in a worker process ends that process (as the out-of-memory killer would)."""

    def __reduce__(self):
        return os._exit, (9,)


def test_a_worker_that_dies_fails_the_evaluation_in_one_line(text_encoder):
    data = rule_task("classification", 60)
    cfg = finetune_settings(epochs=1)
    task = prepare_task(data, text_encoder, cfg)
    with RunPool(workers=2, threads=1) as pool:
        with pytest.raises(RuntimeError, match=r"a fine-tuning worker process died while running 1 run\(s\) of "
                                               r"doomed/pretrained .*evaluate\.workers=1"):
            pool.run([dict(encoder=DiesWhenUnpacked(), task=task, cfg=cfg, learning_rate=1e-3, seed=1, pad_id=0,
                           name="doomed/pretrained lr=0.001 seed=1")])


def test_workers_settings_are_checked():
    assert RunPool.for_settings(1, 1, 2) is None
    assert RunPool.for_settings(2, 1, 2).threads == 1 and RunPool.for_settings(2, None, 3).threads == 3
    assert RunPool.for_settings(2, None, None).threads == max(1, (os.cpu_count() or 1) // 2)
    with pytest.raises(ValidationError, match="workers=2 runs fine-tunings in CPU processes"):
        EvaluateConfig.model_validate({"device": "cuda", "workers": 2})
    with pytest.raises(ValidationError):
        EvaluateConfig.model_validate({"workers": 0})
    with pytest.raises(ValueError, match="at least one worker"):
        RunPool(0, 1)
