"""`bertfactory evaluate --no-prefect` on hostile input (issue 23): a task name that would become a path outside
the run directory is refused before anything is written, and labels that are not labels (empty, NaN, a typo) are
dropped and counted or reported as suspicious instead of becoming classes."""

from __future__ import annotations

import logging

import pytest

from evaluation.results import read_results
from flows.cli import main
from tests.evaluation.conftest import make_eval_run, movie_sentences, one_thread

SMALL = ["--set", "evaluate.finetune.epochs=1", "--set", "evaluate.finetune.num_seeds=1",
         "--set", "evaluate.finetune.max_seq_len=32", "--set", "evaluate.finetune.batch_size=16",
         "--set", "evaluate.finetune.max_train_examples=40", "--set", "evaluate.finetune.max_eval_examples=20",
         "--set", "evaluate.device=cpu", "--set", "evaluate.num_threads=1",
         "--set", "evaluate.random_init_baseline=false", "--set", "evaluate.cache_encodings=true"]


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    with one_thread():
        return make_eval_run(tmp_path_factory.mktemp("hostile") / "run", train_steps=2)


def write_tsv(path, rows):
    path.write_text("id\tsentence\tlabel\n" + "".join(f"{i}\t{t}\t{label}\n" for i, (t, label) in enumerate(rows)))
    return path


def good_rows(n=200):
    return [(s, "pos" if i % 2 else "neg") for i, s in enumerate(movie_sentences(n))]


def files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("option, value", [
    ("--task-name", "../../../trav/ESCAPED"),
    ("--task-name", "/tmp/abs"),
    ("--task-name", ".hidden"),
    ("--task", "../x"),
])
def test_a_task_name_that_would_leave_the_run_directory_is_refused(model_run, tmp_path, capsys, option, value):
    work = tmp_path / "work"
    run_dir = work / "a" / "b" / "c" / "ev"
    tsv = write_tsv(tmp_path / "good.tsv", good_rows())
    argv = ["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(run_dir),
            "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence", *SMALL]
    argv += [option, value] if option == "--task-name" else [option, value, "--task-name", "good"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert option in err and repr(value) in err and "letters, digits" in err, err
    assert files_under(tmp_path) == ["good.tsv"]  # nothing written anywhere, in the run directory or outside it


def test_a_task_file_whose_stem_is_no_safe_name_needs_a_task_name(model_run, tmp_path, capsys):
    tsv = write_tsv(tmp_path / "my reviews.tsv", good_rows())
    argv = ["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(tmp_path / "ev"),
            "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence", *SMALL]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--task-file" in err and "'my reviews'" in err and "--task-name" in err, err
    assert files_under(tmp_path) == ["my reviews.tsv"]


def test_a_task_name_in_a_recipe_override_is_refused_naming_the_key(model_run, tmp_path, capsys):
    run_dir = tmp_path / "ev"
    override = 'evaluate.tasks={"../../escape": {"input": "x.tsv", "task_type": "classification"}}'
    assert main(["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(run_dir),
                 "--set", override]) == 2
    err = capsys.readouterr().err
    assert "evaluate.tasks" in err and "'../../escape'" in err and "letters, digits" in err, err
    assert not (tmp_path / "escape").exists() and not any(run_dir.rglob("*.npz"))


def test_empty_and_nan_labels_are_dropped_and_counted_and_a_rare_class_is_suspicious(model_run, tmp_path, capsys,
                                                                                      caplog):
    rows = good_rows(200)
    rows[3] = (rows[3][0], "")
    rows[4] = (rows[4][0], "NaN")
    rows[5] = (rows[5][0], "nan")
    rows[6] = (rows[6][0], "maybe")
    tsv = write_tsv(tmp_path / "labels.tsv", rows)
    run_dir = tmp_path / "ev"
    with caplog.at_level(logging.WARNING):
        code = main(["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(run_dir),
                     "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence", *SMALL])
    assert code == 0, capsys.readouterr().err
    data = read_results(run_dir / "eval")["tasks"]["labels"]["data"]
    assert data["label_names"] == ["maybe", "neg", "pos"]  # the typo stays a class (no label set was given) ...
    assert data["dropped"] == {"missing_label": 3}  # ... but '', 'NaN' and 'nan' are no classes
    assert data["suspicious_labels"] == {"maybe": 1}  # ... and is named as suspicious in results.json
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'maybe'" in m and "1 example" in m and "labels.tsv" in m for m in warned), warned
    assert any("3 example" in m and "no label" in m for m in warned), warned


def test_with_label_names_a_typo_is_an_error_and_a_missing_label_is_dropped(model_run, tmp_path, capsys):
    rows = good_rows(200)
    rows[3] = (rows[3][0], "")
    tsv = write_tsv(tmp_path / "named.tsv", rows)
    run_dir = tmp_path / "ev"
    base = ["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(run_dir),
            "--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence",
            "--label-names", "neg,pos", *SMALL]
    assert main(base) == 0, capsys.readouterr().err
    data = read_results(run_dir / "eval")["tasks"]["named"]["data"]
    assert data["dropped"] == {"missing_label": 1} and data["label_names"] == ["neg", "pos"]
    assert "suspicious_labels" not in data
    rows[6] = (rows[6][0], "maybe")
    write_tsv(tsv, rows)
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "named.tsv:8: label 'maybe' is not in the label set (neg, pos)" in err, err


def write_hugging_face_directory(path):
    """What transformers' save_pretrained writes, as far as the refusal looks: config.json with model_type."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 32}')
    (path / "model.safetensors").write_bytes(b"")
    return path


def test_a_hugging_face_directory_is_refused_naming_import_hf(model_run, tmp_path, capsys):
    # was: "error: .../hf/config.json: field 'format' is None, expected 'bertfactory.checkpoint'"
    hf = write_hugging_face_directory(tmp_path / "hf")
    tsv = write_tsv(tmp_path / "good.tsv", good_rows())
    task = ["--task-file", str(tsv), "--task-type", "classification", "--text-column", "sentence", *SMALL]
    assert main(["evaluate", str(hf), "--no-prefect", "--run-dir", str(tmp_path / "ev"), *task]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: the checkpoint: {hf} is a Hugging Face model directory (BertForMaskedLM), not a bertfactory "
                   f"checkpoint; convert it first with `bertfactory import-hf {hf} OUT` and give OUT instead\n")
    assert main(["evaluate", str(model_run / "pretrain" / "final"), "--no-prefect", "--run-dir", str(tmp_path / "ev2"),
                 "--compare-checkpoint", str(hf), *task]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: evaluate.compare_checkpoints[0]: {hf} is a Hugging Face model directory") and \
        f"bertfactory import-hf {hf} OUT" in err and len(err.splitlines()) == 1, err
