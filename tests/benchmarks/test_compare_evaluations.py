"""benchmarks/compare_evaluations.py on two hand-made results.json: the rows' means, differences and per-seed drift,
a different learning rate reported as such, the timings' ratios, the JSON document, and two checkpoints refused."""

from __future__ import annotations

import json

import pytest


def run(seed, test, losses, best_epoch=2):
    return {"seed": seed, "test": {"accuracy": test}, "best_epoch": best_epoch,
            "epochs": [{"epoch": i + 1, "train_loss": x} for i, x in enumerate(losses)]}


def results(lr_pre, pre_runs, random_runs, total, model="m" * 64):
    def model_entry(lr, runs):
        scores = [r["test"]["accuracy"] for r in runs]
        mean = sum(scores) / len(scores)
        std = (sum((s - mean) ** 2 for s in scores) / max(1, len(scores) - 1)) ** 0.5
        return {"learning_rate": lr, "accuracy": mean, "accuracy_std": std, "runs": runs}

    return {"checkpoint": {"model_sha256": model}, "created_by": "test", "config": {},
            "tasks": {"trec_coarse": {"primary_metric": "accuracy", "mdd": {"paired": 0.063},
                                      "pretrained": model_entry(lr_pre, pre_runs),
                                      "random_init": model_entry(1e-3, random_runs)}},
            "timings": {"trec_coarse.pretrained": 30.0, "trec_coarse.random_init": 20.0, "total": total}}


def test_the_comparison_of_two_evaluations(load_benchmark, tmp_path, capsys):
    bench = load_benchmark("compare_evaluations")
    a = results(1e-3, [run(1, 0.70, [1.0, 0.5]), run(2, 0.72, [1.0, 0.4])],
                [run(1, 0.60, [1.2, 0.8]), run(2, 0.62, [1.1, 0.7])], 55.0)
    b = results(1e-3, [run(1, 0.70, [1.0, 0.5]), run(2, 0.74, [1.0, 0.41])],
                [run(1, 0.60, [1.2, 0.8]), run(2, 0.62, [1.1, 0.7])], 30.0)
    b["tasks"]["trec_coarse"]["random_init"]["learning_rate"] = 3e-4
    (tmp_path / "a" / "eval").mkdir(parents=True)
    (tmp_path / "a" / "eval" / "results.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert bench.main([str(tmp_path / "a"), str(tmp_path / "b.json"), "--labels", "padded", "unpadded",
                       "--json", str(tmp_path / "cmp.json")]) == 0
    out = capsys.readouterr().out
    assert "| trec_coarse | pretrained | 2 | 0.001 / 0.001 | 0.7100 ± 0.0141 | 0.7200 ± 0.0283 | +0.0100 | 0.063 | " \
           "0.0200 / 2.5e-02 |" in out
    assert "| trec_coarse | random init | 2 | 0.001 / 0.0003 |" in out and "other lr |" in out
    assert "| total | 55.0 | 30.0 | 0.55 |" in out
    doc = json.loads((tmp_path / "cmp.json").read_text())
    assert doc["format"] == bench.FORMAT and doc["labels"] == ["padded", "unpadded"]
    pre = doc["rows"][0]
    assert pre["drift"]["seeds"] == [1, 2] and pre["drift"]["same_best_epochs"]
    assert pre["difference"] == pytest.approx(0.01) and doc["rows"][1]["drift"] is None
    other = results(1e-3, a["tasks"]["trec_coarse"]["pretrained"]["runs"], [run(1, 0.6, [1.0])], 1.0, model="n" * 64)
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="different checkpoints"):
        bench.main([str(tmp_path / "a"), str(tmp_path / "other.json")])
