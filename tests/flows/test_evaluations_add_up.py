"""Evaluations add up (issue 21 item 4), through the installed `bertfactory evaluate ... --no-prefect` run from a
directory outside the repository: a built-in task A, then a task file B, then A again, then A beside a compared
checkpoint, on one run directory. Each call's results join the
earlier ones in results.json (per-task files under RUN/eval/tasks/), A's files are left untouched while its inputs
do not change, and the task file's task tries learning rates scaled to the model's width."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.lr_grid import size_scaled_grid
from evaluation.results import read_results
from flows.artifacts import stage_markdown
from tests.evaluation.conftest import TINY, make_eval_run, movie_sentences, one_thread
from tests.training.test_tracking import read_scalars

SMALL = ["--set", "evaluate.finetune.epochs=1", "--set", "evaluate.finetune.num_seeds=1",
         "--set", "evaluate.finetune.max_seq_len=32", "--set", "evaluate.finetune.batch_size=16",
         "--set", "evaluate.finetune.max_train_examples=80", "--set", "evaluate.finetune.max_eval_examples=40",
         "--set", "evaluate.device=cpu", "--set", "evaluate.num_threads=1", "--set", "evaluate.save_best=true",
         "--set", "evaluate.baselines=[majority]", "--no-prefect"]


CLI = str(Path(sys.executable).parent / "bertfactory")  # the installed console script


def main(args: list[str], cwd: Path) -> int:
    """The installed CLI in a subprocess (its stderr printed on failure)."""
    run = subprocess.run([CLI, *args], cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
                         text=True, timeout=600)
    if run.returncode:
        print(run.stdout[-3000:], run.stderr[-6000:])
    return run.returncode


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("add-up") / "run", train_steps=5)


def _stamp(path):
    """Content and modification time of every file under `path` (a file or directory)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_separate_evaluations_live_side_by_side(model_run, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    assert tmp_path.resolve().parts[:len(repo.parts)] != repo.parts  # really outside the repository
    checkpoint = str(model_run / "pretrain" / "final")
    out = tmp_path / "eval-run"
    evaluate = lambda *extra: main(["evaluate", checkpoint, "--run-dir", "eval-run", *extra, *SMALL],  # noqa: E731
                                   cwd=tmp_path)

    assert evaluate("--task", "trec_coarse") == 0
    first = read_results(out / "eval")
    assert set(first["tasks"]) == {"trec_coarse"}
    a_files = {**_stamp(out / "eval/tasks/trec_coarse.json"), **_stamp(out / "eval/finetuned/trec_coarse"),
               **_stamp(out / "eval/tensorboard/trec_coarse")}
    assert first["tasks"]["trec_coarse"]["settings"]["learning_rates"] is None  # a built-in task: as configured

    tsv = tmp_path / "stars.tsv"
    tsv.write_text("sentence\tstars\n" + "".join(f"{s}\t{'high' if i % 2 else 'low'}\n"
                                                  for i, s in enumerate(movie_sentences(300))))
    assert evaluate("--task-file", "stars.tsv", "--task-type", "classification", "--text-column", "sentence",
                    "--label-column", "stars") == 0
    second = read_results(out / "eval")
    assert set(second["tasks"]) == {"trec_coarse", "stars"}  # B joined A; A was not removed
    assert second["tasks"]["trec_coarse"] == first["tasks"]["trec_coarse"]
    assert {**_stamp(out / "eval/tasks/trec_coarse.json"), **_stamp(out / "eval/finetuned/trec_coarse"),
            **_stamp(out / "eval/tensorboard/trec_coarse")} == a_files
    # the task file's task: three rates scaled to the encoder's width, the best by dev accuracy reported
    stars = second["tasks"]["stars"]
    grid = size_scaled_grid(TINY["hidden_size"])
    assert stars["settings"]["learning_rates"] == grid and stars["settings"]["size_scaled_grid"] is True
    assert [g["learning_rate"] for g in stars["pretrained"]["lr_grid"]] == grid
    assert stars["pretrained"]["learning_rate"] == max(
        stars["pretrained"]["lr_grid"], key=lambda g: g["dev_mean"])["learning_rate"]
    assert sorted(p.name for p in (out / "eval/tensorboard/stars/pretrained").iterdir()) == \
        sorted(f"lr{lr:g}-seed12345" for lr in grid)
    # the fine-tuning curves in TensorBoard are the epochs results.json reports (the chosen rate's run)
    chosen = stars["pretrained"]
    curve = read_scalars(out / f"eval/tensorboard/stars/pretrained/lr{chosen['learning_rate']:g}-seed12345")
    epochs = chosen["runs"][0]["epochs"]
    assert curve["train_loss"] == [(e["epoch"], pytest.approx(e["train_loss"], rel=1e-6)) for e in epochs]
    assert curve["dev_score"] == [(e["epoch"], pytest.approx(e["dev_score"], rel=1e-6)) for e in epochs]
    md = stage_markdown("evaluate", out, {"status": "ran", "key": "k" * 64, "seconds": 1.0})
    assert f"TensorBoard: `tensorboard --logdir {(out / 'eval' / 'tensorboard').resolve()}`" in md

    # A again, its inputs unchanged: reused as it was, B kept
    assert evaluate("--task", "trec_coarse") == 0
    third = read_results(out / "eval")
    assert third["tasks"] == second["tasks"]
    assert {**_stamp(out / "eval/tasks/trec_coarse.json"), **_stamp(out / "eval/finetuned/trec_coarse"),
            **_stamp(out / "eval/tensorboard/trec_coarse")} == a_files

    # A beside a compared checkpoint: A is evaluated again (its inputs changed), B is still there
    other = shutil.copytree(model_run / "pretrain" / "final", tmp_path / "models" / "other")
    assert evaluate("--task", "trec_coarse", "--compare-checkpoint", str(other)) == 0
    fourth = read_results(out / "eval")
    assert set(fourth["tasks"]) == {"trec_coarse", "stars"} and fourth["tasks"]["stars"] == stars
    assert set(fourth["compared_checkpoints"]) == {"other"} and "other" in fourth["tasks"]["trec_coarse"]["compared"]
    assert _stamp(out / "eval/tasks/trec_coarse.json") != {k: v for k, v in a_files.items() if k.endswith(".json")}
    report = (out / "eval/report.md").read_text()
    assert "### stars (classification, en)" in report and "### trec_coarse (classification, en)" in report
    # B's settings are not this call's: the report says them beside its table
    assert f"Evaluated with its own settings: up to 1 epochs, batch 16, lr grid {grid}" in report


def test_a_learning_rate_given_keeps_the_task_file_at_it(model_run, tmp_path):
    tsv = tmp_path / "stars.tsv"
    tsv.write_text("sentence\tstars\n" + "".join(f"{s}\t{'high' if i % 2 else 'low'}\n"
                                                  for i, s in enumerate(movie_sentences(200))))
    out = tmp_path / "eval-run"
    assert main(["evaluate", str(model_run / "pretrain" / "final"), "--run-dir", str(out), "--task-file", str(tsv),
                 "--task-type", "classification", "--text-column", "sentence", "--label-column", "stars",
                 "--set", "evaluate.finetune.learning_rate=1e-3", *SMALL], cwd=tmp_path) == 0
    stars = read_results(out / "eval")["tasks"]["stars"]
    assert stars["settings"]["size_scaled_grid"] is False and [g["learning_rate"] for g in stars["pretrained"]["lr_grid"]] == [1e-3]


def test_an_evaluation_from_before_parts_is_kept(model_run, tmp_path):
    """The issue's case: a run evaluated by an older bertfactory (results.json, no per-task files), then one task
    file evaluated on it: the earlier task stays in results.json beside the new one."""
    args = lambda *extra: ["evaluate", str(model_run / "pretrain" / "final"), "--run-dir", "run", *extra, *SMALL]  # noqa: E731
    assert main(args("--task", "trec_coarse"), cwd=tmp_path) == 0
    before = read_results(tmp_path / "run" / "eval")
    shutil.rmtree(tmp_path / "run/eval/tasks")  # as an older bertfactory left it
    tsv = tmp_path / "stars.tsv"
    tsv.write_text("sentence\tstars\n" + "".join(f"{s}\t{'high' if i % 2 else 'low'}\n"
                                                  for i, s in enumerate(movie_sentences(200))))
    assert main(args("--task-file", "stars.tsv", "--task-type", "classification", "--text-column", "sentence",
                     "--label-column", "stars"), cwd=tmp_path) == 0
    after = read_results(tmp_path / "run" / "eval")
    assert set(after["tasks"]) == {"trec_coarse", "stars"}
    assert after["tasks"]["trec_coarse"] == before["tasks"]["trec_coarse"]
