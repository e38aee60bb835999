"""benchmarks/tapt_minilm.py without running it: the protocol's settings (head warm-up, 10 epochs, parity
fine-tuning, 3 seeds, both tasks), the recipe accepting every --set, and the seed statistics by hand."""

from __future__ import annotations

import math

import pytest


def test_the_full_size_is_the_issue_protocol_and_the_recipe_takes_its_settings(load_benchmark, tmp_path):
    from flows.recipe import load_recipe

    bench = load_benchmark("tapt_minilm")
    args = bench.parse_args([])
    assert args.tasks == ["trec_coarse", "movie_sentiment"] and args.size["seeds"] == 3
    assert args.size["epochs"] >= 10 and args.size["head_warmup"] > 0
    assert args.size["finetune"]["learning_rate"] == 5e-5 and args.size["finetune"]["max_train_examples"] == "null"
    for quick in (False, True):
        size = bench.parse_args(["--quick"] if quick else []).size
        sets = bench.run_sets("trec_coarse", size, 1, 2)
        recipe = load_recipe(bench.RECIPE, [sets[i + 1] for i in range(0, len(sets), 2)])
        assert recipe.tapt.head_warmup_steps == size["head_warmup"] and recipe.tapt.epochs == size["epochs"]
        assert recipe.evaluate.finetune.num_seeds == size["seeds"] and list(recipe.evaluate.tasks) == ["trec_coarse"]


def test_the_detectable_difference_is_twice_the_standard_error_of_the_seed_means(load_benchmark):
    bench = load_benchmark("tapt_minilm")
    out = bench.seed_stats([0.80, 0.82, 0.84], [0.70, 0.71, 0.72])
    se = math.sqrt(0.0004 / 3 + 0.0001 / 3)  # sample variances 0.02^2 and 0.01^2
    assert out["difference"] == pytest.approx(0.11) and out["detectable"] == pytest.approx(2 * se)
    assert out["detected"] is True and out["paired"]["per_seed"] == pytest.approx([0.10, 0.11, 0.12])
    assert bench.seed_stats([0.70, 0.75], [0.72, 0.71])["detected"] is False
    assert bench.seed_stats([0.39, 0.39], [0.375, 0.375])["detected"] is None  # no spread: nothing to judge by


def test_keep_carries_the_other_tasks_with_their_commit_and_refuses_another_protocol(load_benchmark, tmp_path):
    import json

    bench = load_benchmark("tapt_minilm")
    args = bench.parse_args(["--tasks", "movie_sentiment"])
    earlier = {"commit": "aaa1111", "dirty": False, "date": "2025-03-05", "size": args.size, "first_seed": 1,
               "threads": 2, "tasks": [{"task": "trec_coarse", "adapted": [0.9]}, {"task": "movie_sentiment"}],
               "runs": {"trec_coarse": {"wall_s": 1.0}}}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    summary = {"size": args.size, "first_seed": 1, "threads": 2, "tasks": [], "runs": {}}
    kept = bench.kept_tasks(path, summary, ["movie_sentiment"])  # the task being run again is not carried
    assert [t["task"] for t in kept] == ["trec_coarse"] and kept[0]["adapted"] == [0.9]
    assert kept[0]["measured"] == {"commit": "aaa1111", "dirty": False, "date": "2025-03-05"}
    assert summary["runs"] == {"trec_coarse": {"wall_s": 1.0}}
    with pytest.raises(SystemExit, match="first_seed 1 differs"):
        bench.kept_tasks(path, {**summary, "first_seed": 7}, ["movie_sentiment"])


def test_the_unadapted_arm_from_the_parity_file_only_at_the_same_fine_tuning(load_benchmark, tmp_path):
    import json

    from flows.recipe import load_recipe

    bench = load_benchmark("tapt_minilm")
    size = bench.parse_args([]).size
    parity = bench.REPO / "benchmarks" / "finetune_parity.json"
    doc = json.loads(parity.read_text())
    ours = {r["seed"]: r["ours"]["accuracy"] for r in doc["tasks"]["movie_sentiment"]["runs"]}
    accuracies, source = bench.parity_unadapted(parity, "movie_sentiment", size, 1, 2, test_examples=1074)
    assert accuracies == [ours[1], ours[2], ours[3]]
    assert source == {"file": "benchmarks/finetune_parity.json", "commit": doc["commit"], "date": doc["date"],
                      "arm": "ours"}
    for kwargs, match in (({"first_seed": 4}, "seeds"), ({"threads": 1}, "threads"),
                          ({"test_examples": 200}, "test examples")):
        args = {"first_seed": 1, "threads": 2, "test_examples": 1074, **kwargs}
        with pytest.raises(SystemExit, match=match):
            bench.parity_unadapted(parity, "movie_sentiment", size, **args)
    other = {**size, "finetune": {**size["finetune"], "learning_rate": 1e-4}}
    with pytest.raises(SystemExit, match="learning_rate"):
        bench.parity_unadapted(parity, "movie_sentiment", other, 1, 2, 1074)
    # the run then leaves the un-adapted model out of its evaluation
    sets = bench.run_sets("movie_sentiment", size, 1, 2, unadapted=False)
    recipe = load_recipe(bench.RECIPE, [sets[i + 1] for i in range(0, len(sets), 2)])
    assert recipe.tapt.compare_unadapted is False
    assert "tapt.compare_unadapted=false" not in bench.run_sets("movie_sentiment", size, 1, 2)
