"""A stopped evaluation continues from the fine-tuning runs it finished (evaluation/run_cache.py): the runs are kept
as they end, reused only under the same task key and thread count, in the grid's order, and the task's results are
those of an evaluation that never stopped; killed for real through the `bertfactory evaluate` console path, and with
the runs in worker processes."""

import json
import logging
import shutil
import subprocess
import sys

import pytest
import torch

from evaluation.finetune import finetune_model, prepare_task
from evaluation.run_cache import RunCache
from evaluation.run_pool import RunPool
from flows.cli import main
from tests.evaluation.test_finetune import finetune_settings, rule_task, text_encoder, tiny_encoder  # noqa: F401

CPU = torch.device("cpu")

# `bertfactory evaluate` whose 6th fine-tuning run ends the process as a kill would: 4 runs of the pretrained
# encoder and 1 of random init are finished by then
DIES_IN_THE_SIXTH_RUN = """
import os, sys
import bertfactory
import evaluation.finetune as finetune
from flows.cli import main

run, calls = finetune.finetune_run, []
def dies_in_the_sixth(*args, **kwargs):
    calls.append(1)
    if len(calls) == 6:
        os._exit(137)
    return run(*args, **kwargs)
finetune.finetune_run = dies_in_the_sixth
sys.exit(main(sys.argv[1:]))
"""


def evaluate_args(run_dir, task_file) -> list[str]:
    settings = {
        "evaluate.device": "cpu", "evaluate.num_threads": 1, "evaluate.intrinsic.enabled": "false",
        "evaluate.objective.enabled": "false", "evaluate.baselines": "[majority]",
        "evaluate.finetune.epochs": 2, "evaluate.finetune.learning_rates": "[1.0e-3, 3.0e-3]",
        "evaluate.finetune.num_seeds": 2, "evaluate.finetune.seed": 3, "evaluate.finetune.batch_size": 32,
        "evaluate.finetune.max_seq_len": 32, "evaluate.tasks": f"{{movie_sentiment: {{input: '{task_file}'}}}}",
    }
    return [str(run_dir), "--no-prefect", *[a for k, v in settings.items() for a in ("--set", f"{k}={v}")]]


def task_results(run_dir) -> dict:
    return json.loads((run_dir / "eval" / "tasks" / "movie_sentiment.json").read_text())["value"]


@pytest.mark.slow
def test_a_killed_evaluation_continues_from_its_finished_runs(eval_run, task_slice, tmp_path, caplog):
    task_file = task_slice(tmp_path / "reviews.txt", 300)
    reference = shutil.copytree(eval_run, tmp_path / "reference")
    assert main(["evaluate", *evaluate_args(reference, task_file)]) == 0

    stopped = shutil.copytree(eval_run, tmp_path / "stopped")
    died = subprocess.run([sys.executable, "-c", DIES_IN_THE_SIXTH_RUN, "evaluate", *evaluate_args(stopped, task_file)],
                          capture_output=True, text=True, timeout=300)
    assert died.returncode == 137, died.stderr[-3000:]
    kept = sorted((stopped / "eval" / "parts" / "runs" / "movie_sentiment").glob("*.json"))
    assert sorted(json.loads(p.read_text())["model"] for p in kept) == \
        ["movie_sentiment/pretrained"] * 4 + ["movie_sentiment/random_init"]
    assert not (stopped / "eval" / "tasks" / "movie_sentiment.json").exists()

    caplog.clear()
    caplog.set_level(logging.INFO, logger="evaluation.run_cache")
    assert main(["evaluate", *evaluate_args(stopped, task_file)]) == 0
    assert caplog.text.count("finished before the evaluation stopped; reused") == 5, caplog.text[-3000:]
    assert task_results(stopped) == task_results(reference)  # every run, the grid, the chosen rate, the comparison
    assert not (stopped / "eval" / "parts" / "runs" / "movie_sentiment").exists()  # the part holds them now


class CountingPool(RunPool):
    def __init__(self):
        super().__init__(workers=2, threads=torch.get_num_threads())
        self.jobs: list[str] = []

    def run(self, jobs, on_result=None):
        self.jobs += [j["name"] for j in jobs]
        return super().run(jobs, on_result)


def test_workers_run_only_what_is_not_finished_and_choose_as_one_process(text_encoder, tmp_path):
    data = rule_task("classification", 120)
    cfg = finetune_settings(epochs=1, learning_rates=[1e-7, 3e-3], num_seeds=2)
    task = prepare_task(data, text_encoder, cfg)
    vocab = text_encoder.tokenizer.get_vocab_size()
    alone = finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task, cfg, CPU, 0, "t/pretrained")
    cache = RunCache(tmp_path / "runs", "key", keep_states=True)
    # three of the four runs finished before a stop (one at the rate that wins): the best run's weights come from
    # disk or from the worker, whichever made it
    for rates, seeds in (([3e-3], 1), ([1e-7], 2)):
        finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task,
                       finetune_settings(epochs=1, learning_rates=rates, num_seeds=seeds), CPU, 0, "t/pretrained",
                       cache=cache)
    assert len(list((tmp_path / "runs").glob("*.json"))) == 3 == len(list((tmp_path / "runs").glob("*.pt")))
    with CountingPool() as pool:
        resumed = finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task, cfg, CPU, 0, "t/pretrained",
                                 pool=pool, cache=cache)
    assert pool.jobs == [f"t/pretrained lr=0.003 seed={s}" for s in cfg.seeds()][1:]  # 3 reused, 1 run
    assert resumed.learning_rate == alone.learning_rate and resumed.grid == alone.grid
    assert [(r.seed, r.epochs, r.test_metrics, r.test_predictions, r.confusion) for r in resumed.runs] == \
        [(r.seed, r.epochs, r.test_metrics, r.test_predictions, r.confusion) for r in alone.runs]
    assert all(torch.equal(alone.best_state[k], resumed.best_state[k]) for k in alone.best_state)


def test_runs_under_other_inputs_or_unreadable_are_made_again(text_encoder, tmp_path, caplog):
    data = rule_task("classification", 60)
    cfg = finetune_settings(epochs=1)
    task = prepare_task(data, text_encoder, cfg)
    vocab = text_encoder.tokenizer.get_vocab_size()
    result = finetune_model(lambda seed: tiny_encoder(vocab, seed=seed), task, cfg, CPU, 0, "t/m")
    run = result.runs[0]
    cache = RunCache(tmp_path / "runs", "key-a")
    cache.put("t/m", run.learning_rate, run.seed, run)
    back = cache.get("t/m", run.learning_rate, run.seed)
    assert back.test_metrics == run.test_metrics and back.epochs == run.epochs and back.best_state is None
    assert list(back.test_metrics) == list(run.test_metrics)  # in the order the run wrote them
    caplog.set_level(logging.INFO, logger="evaluation.run_cache")
    assert RunCache(tmp_path / "runs", "key-b").get("t/m", run.learning_rate, run.seed) is None
    assert "under other inputs or settings; run again" in caplog.text
    assert cache.get("t/m", run.learning_rate, run.seed + 1) is None  # never finished
    with_states = RunCache(tmp_path / "runs", "key-a", keep_states=True)
    assert with_states.get("t/m", run.learning_rate, run.seed) is None  # its weights were not kept
    assert "its weights (.pt) are missing" in caplog.text
    cache.path("t/m", run.learning_rate, run.seed).write_text('{"format": "bertfactory.finetune-run", "vers')
    assert cache.get("t/m", run.learning_rate, run.seed) is None
    assert "unreadable finished run of t/m" in caplog.text
    cache.clear()
    assert not (tmp_path / "runs").exists()
