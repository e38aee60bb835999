"""`bertfactory evaluate` on a checkpoint with a user task file (TSV) and built-in tasks by name, and
`bertfactory report` comparing runs side by side."""

from __future__ import annotations

import shutil

import pytest

from evaluation.results import read_results
from flows.cli import main
from tests.evaluation.conftest import make_eval_run, movie_sentences, one_thread

SMALL = ["--set", "evaluate.finetune.epochs=1", "--set", "evaluate.finetune.num_seeds=1",
         "--set", "evaluate.finetune.max_seq_len=32", "--set", "evaluate.finetune.batch_size=16",
         "--set", "evaluate.finetune.max_train_examples=80", "--set", "evaluate.finetune.max_eval_examples=40",
         "--set", "evaluate.device=cpu", "--set", "evaluate.num_threads=1"]


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("cli") / "run", train_steps=5)


def write_tsv(path, rows):
    path.write_text("id\tsentence\tstars\n" + "".join(f"{i}\t{t}\t{s}\n" for i, (t, s) in enumerate(rows)))
    return path


def test_evaluate_a_checkpoint_on_a_task_file_next_to_a_builtin_task(model_run, tmp_path, capsys):
    sentences = movie_sentences(300)
    tsv = write_tsv(tmp_path / "stars.tsv", [(s, "high" if "good" in s or i % 2 else "low") for i, s in enumerate(sentences)])
    out = tmp_path / "eval-run"
    code = main(["evaluate", str(model_run / "pretrain" / "final"), "--run-dir", str(out), "--task", "trec_coarse",
                 "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence",
                 "--label-column", "stars", "--label-names", "low,high", *SMALL])
    assert code == 0, capsys.readouterr().err
    results = read_results(out / "eval")
    assert set(results["tasks"]) == {"trec_coarse", "stars"} and "intrinsic" not in results  # no shards there
    stars = results["tasks"]["stars"]
    assert stars["data"]["label_names"] == ["low", "high"] and stars["data"]["sizes"]["train"] == 80
    assert {"pretrained", "random_init", "tfidf_logreg", "majority"} <= set(stars)
    assert results["checkpoint"]["path"] == str((model_run / "pretrain" / "final").resolve())
    printed = capsys.readouterr().out
    assert "stars accuracy · pretrained" in printed and "trec_coarse accuracy · tfidf_logreg" in printed

    # a second run of the same command is up to date (the stage key covers the task file)
    assert main(["evaluate", str(model_run / "pretrain" / "final"), "--run-dir", str(out), "--task", "trec_coarse",
                 "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence",
                 "--label-column", "stars", "--label-names", "low,high", *SMALL]) == 0
    assert "evaluate    up-to-date" in capsys.readouterr().out

    # report: two runs side by side
    other = shutil.copytree(out, tmp_path / "other-run")
    assert main(["report", str(out), str(other)]) == 0
    table = capsys.readouterr().out
    assert "| model · metric | eval-run | other-run |" in table and "## stars (classification)" in table
    acc = stars["pretrained"]["accuracy"]
    assert f"| pretrained · accuracy | {acc:.4f}" in table
    assert main(["report", str(out), "--out", str(tmp_path / "cmp.md")]) == 0
    assert (tmp_path / "cmp.md").read_text().startswith("# Runs compared")
    capsys.readouterr()
    assert main(["report", str(out), "--out", str(tmp_path)]) == 2  # a directory: named, not a temporary file
    assert capsys.readouterr().err.strip() == (f"error: --out {tmp_path} is a directory; give the report's file, "
                                               f"e.g. {tmp_path / 'report.md'}")


def test_bad_task_options_name_what_is_missing(model_run, tmp_path, capsys):
    assert main(["evaluate", str(model_run), "--run-dir", str(tmp_path / "x"), "--task-file", "t.tsv"]) == 2
    assert "--task-file needs --task-type" in capsys.readouterr().err
    bad = write_tsv(tmp_path / "bad.tsv", [("a fine film", "high"), ("awful", "meh")] * 30)
    assert main(["evaluate", str(model_run), "--run-dir", str(tmp_path / "y"), "--task-file", str(bad),
                 "--task-type", "classification", "--text-column", "sentence", "--label-column", "stars",
                 "--label-names", "low,high", *SMALL]) == 2
    err = capsys.readouterr().err
    assert "bad.tsv" in err and "'meh'" in err
    assert main(["evaluate", str(tmp_path), "--run-dir", str(tmp_path / "z")]) == 2
    assert "neither a recipe YAML, a model directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "run `bertfactory evaluate` first" in capsys.readouterr().err


def test_workers_from_the_console_script_give_the_scores_of_one_process(model_run, tmp_path, capsys):
    """`evaluate.workers=2` as users run it (the console script, its workers spawned from it): the same task
    results as one process at one thread, and the log says the workers ran."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    model = str(model_run / "pretrain" / "final")
    args = ["--task", "trec_coarse", *SMALL, "--set", "evaluate.finetune.num_seeds=2",
            "--set", "evaluate.finetune.learning_rates=[1e-3,3e-3]", "--set", "evaluate.baselines=[majority]"]
    assert main(["evaluate", model, "--run-dir", str(tmp_path / "one"), "--no-prefect", *args]) == 0, \
        capsys.readouterr().err
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run([str(Path(sys.executable).parent / "bertfactory"), "evaluate", model, "--run-dir",
                          str(tmp_path / "two"), "--no-prefect", *args, "--set", "evaluate.workers=2",
                          "--set", "evaluate.worker_threads=1"], capture_output=True, text=True, timeout=900, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "fine-tuning in 2 worker processes at 1 thread(s) each" in two.stderr
    one, other = (read_results(tmp_path / d / "eval")["tasks"]["trec_coarse"] for d in ("one", "two"))
    assert len(one["pretrained"]["lr_grid"]) == 2 and len(one["pretrained"]["runs"]) == 2
    for model_name in ("pretrained", "random_init"):
        assert other[model_name] == one[model_name]
