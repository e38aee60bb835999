"""`bertfactory report RUN [RUN ...]` on results.json files written by the contract's writer (no evaluation needed):
each run's column is named after its run directory however the run is given (the directory, its eval directory or
its results.json), and a results.json that breaks the contract is one `error:` line naming the file and the key."""

from __future__ import annotations

import json

from evaluation.results import write_results
from flows.cli import main
from tests.evaluation.test_results import clean, example


def write_run(run_dir, accuracy=0.8, nsp_label_counts=None):
    doc = clean(example())
    doc["tasks"]["movie_sentiment"]["pretrained"]["accuracy"] = accuracy
    if nsp_label_counts is not None:
        doc["schema_version"] = 5
        doc["intrinsic"]["nsp_label_counts"] = nsp_label_counts
    write_results(run_dir / "eval" / "results.json", doc)
    return run_dir


def header(table: str) -> str:
    return next(line for line in table.splitlines() if line.startswith("| model · metric |"))


def test_columns_are_named_after_the_run_directories_however_given(tmp_path, capsys):
    a, b, c = write_run(tmp_path / "base"), write_run(tmp_path / "large", 0.9), write_run(tmp_path / "tapt", 0.7)
    assert main(["report", str(a / "eval"), str(b / "eval" / "results.json"), str(c)]) == 0
    table = capsys.readouterr().out
    assert header(table) == "| model · metric | base | large | tapt |"  # was: eval | results.json | tapt
    assert "| pretrained · accuracy | 0.8000 ± 0.0000 | 0.9000 ± 0.0000 | 0.7000 ± 0.0000 |" in table


def test_runs_of_one_name_get_their_parents_and_a_run_given_twice_its_position(tmp_path, capsys):
    x, y = write_run(tmp_path / "x" / "run"), write_run(tmp_path / "y" / "run")
    assert main(["report", str(x / "eval"), str(y / "eval")]) == 0
    assert header(capsys.readouterr().out) == "| model · metric | x/run | y/run |"  # was: eval | eval'
    assert main(["report", str(x), str(x / "eval")]) == 0
    assert header(capsys.readouterr().out) == "| model · metric | run#1 | run#2 |"


def test_a_run_directory_named_eval_keeps_its_name(tmp_path, capsys):
    run = write_run(tmp_path / "eval")  # a run directory called eval, holding eval/results.json
    assert main(["report", str(run)]) == 0
    assert "| run | checkpoint |" in capsys.readouterr().out
    other = write_run(tmp_path / "base")
    assert main(["report", str(run), str(other / "eval")]) == 0
    assert header(capsys.readouterr().out) == "| model · metric | eval | base |"


def test_a_hand_edited_value_of_the_wrong_type_is_one_error_line(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    path = run / "eval" / "results.json"
    doc = json.loads(path.read_text())
    doc["tasks"]["movie_sentiment"]["pretrained"]["accuracy"] = "0.75"
    path.write_text(json.dumps(doc))
    assert main(["report", str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {path} is not valid results (schema v2): tasks.movie_sentiment.pretrained.accuracy: "
                            'Input should be a valid number, found "0.75"\n')


NOTE = ("over 10 IsNext pairs and no NotNext pair, as the held-out split has too few documents to draw one from "
        "another: always answering IsNext would score 1.0")


def test_an_nsp_accuracy_over_isnext_pairs_only_is_said_wherever_it_is_shown(tmp_path, capsys):
    from evaluation.report import render_markdown
    from evaluation.results import read_results
    from flows.summary import summary_rows

    one = write_run(tmp_path / "one-doc", nsp_label_counts=[10, 0])
    both = write_run(tmp_path / "many-docs", nsp_label_counts=[6, 4])
    old = write_run(tmp_path / "v2")  # a file from before nsp_label_counts: nothing to say
    assert main(["report", str(one), str(both), str(old)]) == 0
    assert "| nsp_accuracy | 0.6000 (one label only) | 0.6000 | 0.6000 |" in capsys.readouterr().out
    assert ("evaluate", "held-out nsp accuracy", f"0.6000 ({NOTE})") in summary_rows(one)
    for run in (both, old):  # the row as it was: the number alone
        assert ("evaluate", "held-out nsp accuracy", 0.6) in summary_rows(run)
    assert f"| NSP accuracy | 0.6000 ({NOTE}) |" in render_markdown(read_results(one / "eval"), {}, "")
    assert "| NSP accuracy | 0.6000 |" in render_markdown(read_results(both / "eval"), {}, "")


def test_one_task_name_of_two_types_or_on_other_data_is_said(tmp_path, capsys):
    """Two runs each evaluated on a file named train.tsv: a classification task in one, a regression task in the
    other. Was: one section `## train (classification)`, the regression run's column all '—' (its Pearson nowhere in
    the report); now a section per type, each saying so. The same type on other files is said too."""
    a = write_run(tmp_path / "sst")
    doc = clean(example())
    doc["tasks"] = {"movie_sentiment": doc["tasks"]["movie_valence"]}  # the same name, a regression task
    doc["tasks"]["movie_sentiment"]["pretrained"]["pearson"] = 0.61
    write_results(tmp_path / "stsb" / "eval" / "results.json", doc)
    c = clean(example())
    c["tasks"]["movie_sentiment"]["data"]["source_sha256"] = "12" * 32
    write_results(tmp_path / "other" / "eval" / "results.json", c)
    assert main(["report", str(a), str(tmp_path / "stsb"), str(tmp_path / "other")]) == 0
    out = capsys.readouterr().out
    assert "## movie_sentiment (classification)" in out and "## movie_sentiment (regression)" in out, out
    regression = out.split("## movie_sentiment (regression)")[1]
    assert "`movie_sentiment` is a classification task in other runs" in regression
    assert "| pretrained · pearson | — | 0.6100 ± 0.1000 | — |" in regression, regression
    classification = out.split("## movie_sentiment (classification)")[1].split("## ")[0]
    assert "The runs read other data for `movie_sentiment` (source sha256: sst efefefefefef…, other 121212121212…)" \
        in classification, classification


def test_a_regression_tasks_tfidf_baseline_is_named_ridge(tmp_path, capsys):
    """report.md said `TF-IDF + Ridge regression` for a regression task; `bertfactory report` said `TF-IDF + logistic
    regression · pearson` (a classifier that a regression task never trains)."""
    doc = clean(example())
    doc["tasks"]["movie_valence"]["tfidf_logreg"] = {"pearson": 0.3, "pearson_std": 0.0, "dev": {"pearson": 0.2},
                                                     "details": {"model": "Ridge", "alpha": 1.0}}
    write_results(tmp_path / "a" / "eval" / "results.json", doc)
    assert main(["report", str(tmp_path / "a"), str(write_run(tmp_path / "b"))]) == 0
    out = capsys.readouterr().out
    valence = out.split("## movie_valence (regression)")[1]
    assert "| TF-IDF + Ridge regression · pearson | 0.3000 | — |" in valence, valence
    assert "| TF-IDF + logistic regression · accuracy |" in out.split("## movie_sentiment (classification)")[1]


def test_the_summary_says_an_undefined_primary_metric(tmp_path):
    """A regression task scored on one test example (max_eval_examples=1) has no Pearson. Was: the run's summary
    printed `(nothing in RUN yet)` after a finished evaluation; now the row says the metric is undefined."""
    from flows.summary import summary_rows, summary_table

    doc = clean(example())
    doc["intrinsic"] = None
    doc["tasks"] = {"movie_valence": doc["tasks"]["movie_valence"]}
    for key in ("pearson", "pearson_std"):
        doc["tasks"]["movie_valence"]["pretrained"].pop(key, None)
    write_results(tmp_path / "run" / "eval" / "results.json", clean(doc))
    assert ("evaluate", "movie_valence pearson · pretrained", "undefined on this test set (mse 2.0000)") in \
        summary_rows(tmp_path / "run")
    assert "nothing in" not in summary_table(tmp_path / "run")
