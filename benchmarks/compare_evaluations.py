"""Two evaluations of one checkpoint side by side: did a change to the evaluate stage move the scores?

Reads the results.json of two evaluate runs (A = the reference, B = the change) on the same checkpoint and
settings apart from the change, and prints, per task and model (pretrained, random init): the learning rate each
chose, the test primary metric (mean +- sample std over the seeds at that rate), B - A, and the task's minimal
detectable difference between two models (results.json's `mdd.paired`, McNemar at alpha 0.05 / power 0.8 on
classification tasks); where both chose the same rate, the largest per-seed difference of the test score and of
the epochs' train losses (relative), i.e. how far the two computations drifted apart run by run. Then each part's
time and the stage total, A / B.

    python benchmarks/compare_evaluations.py RUN_A RUN_B --labels padded unpadded \\
        --json benchmarks/finetune_unpad.json        # RUN_*: run directories (RUN/eval/results.json) or the files

--json writes the same comparison as a document (format bertfactory.evaluation-comparison, version 1) with both
runs' commit and settings, so RESULTS.md quotes a file, not a terminal.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

FORMAT = "bertfactory.evaluation-comparison"
MODELS = ("pretrained", "random_init")


def read_results(path: Path) -> dict:
    file = path / "eval" / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"{path}: no evaluate results (looked for {file})")
    return json.loads(file.read_text())


def _runs_by_seed(model: dict) -> dict[int, dict]:
    return {r["seed"]: r for r in model.get("runs", [])}


def _largest_drift(a: dict, b: dict, primary: str) -> dict | None:
    """Per seed present in both at the same learning rate: largest |test difference| and relative train-loss drift."""
    if a.get("learning_rate") != b.get("learning_rate"):
        return None
    runs_a, runs_b = _runs_by_seed(a), _runs_by_seed(b)
    seeds = sorted(set(runs_a) & set(runs_b))
    if not seeds:
        return None
    test = max(abs(runs_b[s]["test"][primary] - runs_a[s]["test"][primary]) for s in seeds)
    loss = 0.0
    for s in seeds:
        for ea, eb in zip(runs_a[s]["epochs"], runs_b[s]["epochs"]):
            loss = max(loss, abs(eb["train_loss"] - ea["train_loss"]) / max(abs(ea["train_loss"]), 1e-12))
    same_epochs = all(runs_a[s]["best_epoch"] == runs_b[s]["best_epoch"] for s in seeds)
    return {"seeds": seeds, "max_test_difference": test, "max_train_loss_relative_difference": loss,
            "same_best_epochs": same_epochs}


def compare(a: dict, b: dict) -> dict:
    if a.get("checkpoint", {}).get("model_sha256") != b.get("checkpoint", {}).get("model_sha256"):
        raise SystemExit("the two evaluations are of different checkpoints; compare runs of one checkpoint")
    rows = []
    for task in sorted(set(a["tasks"]) & set(b["tasks"])):
        ta, tb = a["tasks"][task], b["tasks"][task]
        primary = ta["primary_metric"]
        for model in MODELS:
            if model not in ta or model not in tb:
                continue
            ma, mb = ta[model], tb[model]
            rows.append({
                "task": task, "model": model, "metric": primary, "seeds": len(ma.get("runs", [])),
                "learning_rate": [ma.get("learning_rate"), mb.get("learning_rate")],
                "test": [[ma[primary], ma.get(f"{primary}_std", 0.0)], [mb[primary], mb.get(f"{primary}_std", 0.0)]],
                "difference": mb[primary] - ma[primary],
                "detectable": ta.get("mdd", {}).get("paired"),
                "drift": _largest_drift(ma, mb, primary)})
    parts = sorted(set(a.get("timings", {})) & set(b.get("timings", {})) - {"total"})
    timings = {p: [a["timings"][p], b["timings"][p]] for p in parts}
    if "total" in a.get("timings", {}) and "total" in b.get("timings", {}):
        timings["total"] = [a["timings"]["total"], b["timings"]["total"]]
    return {"rows": rows, "timings": timings}


def _fmt(x: float | None, digits: int = 4) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def render(result: dict, labels: tuple[str, str]) -> str:
    a, b = labels
    lines = [f"| task | model | seeds | lr {a} / {b} | test {a} | test {b} | {b} - {a} | detectable | "
             f"largest per-seed test / train-loss difference |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        (ma, sa), (mb, sb) = r["test"]
        drift = r["drift"]
        drift_text = (f"{drift['max_test_difference']:.4f} / {drift['max_train_loss_relative_difference']:.1e}"
                      f"{'' if drift['same_best_epochs'] else ' (other best epochs)'}" if drift else "other lr")
        lines.append(f"| {r['task']} | {r['model'].replace('_', ' ')} | {r['seeds']} | {r['learning_rate'][0]:g} / "
                     f"{r['learning_rate'][1]:g} | {ma:.4f} ± {sa:.4f} | {mb:.4f} ± {sb:.4f} | {r['difference']:+.4f} | "
                     f"{_fmt(r['detectable'], 3)} | {drift_text} |")
    lines += ["", f"| part (s) | {a} | {b} | {b} / {a} |", "|---|---|---|---|"]
    for part, (ta, tb) in result["timings"].items():
        if max(ta, tb) >= 1.0:
            lines.append(f"| {part} | {ta:.1f} | {tb:.1f} | {tb / ta:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="the reference evaluation: a run directory or its results.json")
    parser.add_argument("b", type=Path, help="the changed evaluation of the same checkpoint")
    parser.add_argument("--labels", nargs=2, default=("A", "B"), metavar=("A", "B"))
    parser.add_argument("--json", type=Path, help="also write the comparison here")
    args = parser.parse_args(argv)
    ra, rb = read_results(args.a), read_results(args.b)
    result = compare(ra, rb)
    print(render(result, tuple(args.labels)))
    if args.json:
        doc = {"format": FORMAT, "version": 1, "labels": list(args.labels),
               "runs": {label: {"created_by": r.get("created_by"), "settings": r.get("config")}
                        for label, r in zip(args.labels, (ra, rb))},
               **result}
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        tmp.replace(args.json)
    differences = [r["difference"] for r in result["rows"]]
    print(f"\nmean |{args.labels[1]} - {args.labels[0]}| over {len(differences)} rows: "
          f"{float(np.mean(np.abs(differences))) if differences else 0.0:.4f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
