"""benchmarks/scaling_curve.py: what a point reads from an evaluation's results.json, how the table counts wins and
significant wins (a tie is neither), and that the table RESULTS.md quotes is the one the committed data gives."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _results(pretrained: float, random_init: float, p: float | None) -> dict:
    entry = {"primary_metric": "accuracy", "pretrained": {"accuracy": pretrained},
             "random_init": {"accuracy": random_init}, "majority": {"accuracy": 0.25}}
    if p is not None:
        entry["comparison"] = {"mcnemar_p_value": p}
    return {"tasks": {"trec_coarse": entry,
                      "wnut16": {"primary_metric": "entity_f1", "pretrained": {"entity_f1": 0.0},
                                 "random_init": {"entity_f1": 0.0}}}}


def test_task_scores_reads_each_model_and_the_mcnemar_p(load_benchmark):
    curve = load_benchmark("scaling_curve")
    scores = curve.task_scores(_results(0.8, 0.7, 0.01))
    assert scores["trec_coarse"] == {"metric": "accuracy", "pretrained": 0.8, "random_init": 0.7, "majority": 0.25,
                                     "mcnemar_p": 0.01}
    assert scores["wnut16"]["mcnemar_p"] is None and "movie_sentiment" not in scores


def test_table_counts_wins_but_not_ties_and_significance_only_for_wins(load_benchmark, tmp_path, capsys):
    curve = load_benchmark("scaling_curve")
    points = {
        "demo-5min": {"corpus": "demo", "cpu_minutes": 5.0, "steps": 10, "tokens": 100,
                      "heldout": {"mlm_acc": 0.2}, "tasks": curve.task_scores(_results(0.8, 0.7, 0.01))},
        "demo-15min": {"corpus": "demo", "cpu_minutes": 15.0, "steps": 30, "tokens": 300,
                       "heldout": {"mlm_acc": 0.25}, "tasks": curve.task_scores(_results(0.6, 0.7, 0.001))},
        "diverse-5min": {"corpus": "diverse", "cpu_minutes": 5.0, "steps": 10, "error": "RuntimeError: boom"},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"points": points}))
    curve.table(argparse.Namespace(results=path, plot=tmp_path / "curve.png"))
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| demo") or
            line.startswith("| diverse")]
    assert rows[0].endswith("| 1 / 2 | 1 |")  # trec a significant win, wnut16 a 0-0 tie
    assert rows[1].endswith("| 0 / 2 | 0 |")  # a significant loss counts as neither
    assert "failed: RuntimeError: boom" in rows[2]
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_results_md_quotes_the_table_of_the_committed_data(load_benchmark, capsys):
    curve = load_benchmark("scaling_curve")
    curve.table(argparse.Namespace(results=REPO / "benchmarks" / "scaling_curve.json", plot=None))
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    results_md = (REPO / "benchmarks" / "RESULTS.md").read_text()
    assert len(rows) == 10  # header, rule, 4 budgets x 2 corpora
    missing = [row for row in rows if row not in results_md]
    assert not missing, f"benchmarks/RESULTS.md does not quote these rows of scaling_curve.json: {missing}"
