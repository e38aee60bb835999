"""report.md's text (evaluation/report.py render_markdown) from a results dict, without an evaluation."""

from __future__ import annotations

import copy

from evaluation.report import render_markdown
from tests.evaluation.test_results import clean, example


def paragraph(results: dict, task: str) -> str:
    lines = render_markdown(results, {}, "").splitlines()
    return lines[lines.index(f"### {task} ({results['tasks'][task]['task_type']}, en)") + 2]


def test_a_two_label_tasks_f1_names_its_class():
    # f1 is the F1 of label 1; a task file's labels are sorted, so that is not always the class one calls positive
    results = clean(example())
    assert paragraph(results, "movie_sentiment").endswith(
        "Primary metric: **accuracy**. f1 is the F1 of the class `positive` (label 1).")
    flipped = copy.deepcopy(results)
    flipped["tasks"]["movie_sentiment"]["data"]["label_names"] = ["not_equivalent", "equivalent"]
    assert paragraph(flipped, "movie_sentiment").endswith("f1 is the F1 of the class `equivalent` (label 1).")
    assert paragraph(results, "movie_valence").endswith("Primary metric: **pearson**.")  # no f1: nothing said
