"""ModernBERT-class vs BERT at equal CPU-minutes (issue 22): the tiny modern twin against the tiny RoBERTa twin on the
same real shards, trained for the same wall-clock CPU budget, then compared on held-out MLM, fine-tuning and
inference speed on mixed-length real inputs.

    .venv/bin/python benchmarks/modern_vs_bert.py                 # defaults: 5 min per model, 12 min on 2 cores
    .venv/bin/python benchmarks/modern_vs_bert.py --minutes 2 --seeds 2 --runs runs/modern-vs-bert-quick

Why tiny RoBERTa (configs/tiny-roberta.yaml) and not the BERT twin (configs/local.yaml): it shares everything with
configs/tiny-modernbert.yaml that is not the ModernBERT recipe - the cased byte-level BPE tokenizer (8,000), the
FULL-SENTENCES 128-token rows, dynamic masking, masked LM alone (no NSP), Adam betas 0.9/0.98 - and about as many
encoder parameters (396K vs 417K), so the shards' rows and the held-out rows are the same ones and only the
architecture and the recipe differ. local.yaml's BERT has another tokenizer (lowercased WordPiece), NSP pairs and
static masks, so its held-out rows could not be the modern twin's.

What it does, every step through the project's own entry points (`bertfactory preprocess / pretrain / evaluate`,
evaluation.heldout.evaluate_objective):
1. Preprocess each recipe (the modern twin with tiny-roberta's 2 train / 1 held-out shard layout, so that the two shard
   sets hold the same rows; the tokenizers are checked byte-identical). Each keeps its recipe's masking rate for
   training: RoBERTa 15 %, ModernBERT 30 % (the rate lives in the shards' manifest, read by the dynamic masker).
2. The trainer has no time stop, so the budget is calibrated: each model pretrains `--calibration-steps` steps, the
   seconds per step of that run (its summary.json) give the steps that fill `--minutes`, and the calibration run is
   deleted; the real run's achieved steps, trainer seconds, wall seconds and CPU seconds are reported.
3. Held-out MLM: both checkpoints are scored by their own objective on the whole held-out split of BOTH shard sets, so
   each column compares the two models on the same rows under the same dynamic masks (seed 0): at 15 % masking
   (RoBERTa's shards) and at 30 % (ModernBERT's).
4. Fine-tuning: `bertfactory evaluate` on `--tasks` (default movie_sentiment and trec_coarse, 800 train / 400 eval
   examples, 3 epochs at lr 5e-4 as the twins' recipes), mean ± std over `--seeds` seeds.
5. Inference tokens/s: held-out rows cut to seeded random lengths 8..128 (real token sequences), batches of
   `--batch-size`, the encoder's forward in eval mode under torch.inference_mode with `--threads` threads: padded to
   the batch's longest and unpadded (varlen path) for both models; median of `--repeats` passes over all batches.
   Tokens/s counts real tokens only.
The results go to RUNS/results.json and a markdown table on stdout (recorded in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = {  # label -> (recipe, extra --set lines)
    "RoBERTa (tiny-roberta, mlm)": ("tiny-roberta.yaml", []),
    # tiny-roberta's shard layout, so that both shard sets hold the same rows in the same order
    "ModernBERT (tiny-modernbert)": ("tiny-modernbert.yaml",
                                     ["preprocess.shards={train_shards: 2, heldout_shards: 1}"]),
}


def bertfactory(args: list[str], log: Path, threads: int) -> tuple[float, float]:
    """Run one CLI command (output to `log`) -> (wall seconds, CPU seconds of the child, user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "a") as out:
        proc = subprocess.run([str(Path(sys.executable).parent / "bertfactory"), *args], cwd=REPO, stdout=out,
                              stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"error: bertfactory {' '.join(args[:2])} exited {proc.returncode}: {tail[0][:300]} (log {log})")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def sets(lines: list[str]) -> list[str]:
    return [a for s in lines for a in ("--set", s)]


def train(label: str, run_dir: Path, args) -> dict:
    recipe, extra = MODELS[label]
    config = str(REPO / "configs" / recipe)
    log = run_dir.parent / f"{run_dir.name}.log"
    common = extra + [f"pretrain.num_threads={args.threads}", "pretrain.save_every=100000"]
    if not (run_dir / "shards" / "manifest.json").is_file():
        bertfactory(["preprocess", config, "--run-dir", str(run_dir), "--no-prefect", *sets(common)], log,
                    args.threads)
    shutil.rmtree(run_dir / "pretrain", ignore_errors=True)
    bertfactory(["pretrain", config, "--run-dir", str(run_dir), "--no-prefect",
                 *sets(common + [f"pretrain.max_steps={args.calibration_steps}"])], log, args.threads)
    calibration = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    per_step = calibration["seconds"] / calibration["steps"]
    steps = max(args.calibration_steps, round(args.minutes * 60 / per_step))
    shutil.rmtree(run_dir / "pretrain")
    wall, cpu = bertfactory(["pretrain", config, "--run-dir", str(run_dir), "--no-prefect",
                             *sets(common + [f"pretrain.max_steps={steps}"])], log, args.threads)
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    return {"recipe": recipe, "calibration_s_per_step": per_step, "steps": summary["steps"],
            "trainer_seconds": summary["seconds"], "wall_seconds": wall, "cpu_seconds": cpu,
            "parameters": summary["parameters"], "tokens": summary["tokens"], "train_loss": summary["loss"],
            "_common": common, "_config": config, "_steps": steps}


def heldout(run_dirs: dict[str, Path]) -> dict:
    """Every checkpoint scored on the whole held-out split of every shard set (evaluation.heldout)."""
    import torch

    from evaluation.config import ObjectiveEvalConfig
    from evaluation.heldout import evaluate_objective
    from training.checkpoint import load_pretrained, read_checkpoint_config
    from bertfactory.io import sha256_file

    shas = {label: sha256_file(d / "pretrain" / "final" / "tokenizer.json") for label, d in run_dirs.items()}
    if len(set(shas.values())) != 1:
        sys.exit(f"error: the twins' tokenizers differ ({shas}); held-out rows would not be the same")
    # the rows must be the same ones: the two preprocess runs differ only in the manifest's masking rate
    digests = {label: [sha256_file(f) for f in sorted((d / "shards").glob("*/*.arrow"))]
               for label, d in run_dirs.items()}
    if len({tuple(v) for v in digests.values()}) != 1:
        sys.exit(f"error: the twins' shard files differ ({', '.join(str(d / 'shards') for d in run_dirs.values())})"
                 "; the held-out comparison needs the same rows")
    out: dict = {}
    for label, run_dir in run_dirs.items():
        final = run_dir / "pretrain" / "final"
        model, _, _ = load_pretrained(final)
        doc = read_checkpoint_config(final)
        for shards_of, shard_run in run_dirs.items():
            rate = json.loads((shard_run / "shards" / "manifest.json").read_text())["masking"]["masked_lm_prob"]
            scores = evaluate_objective(model, doc, shard_run / "shards", next(iter(shas.values())),
                                        ObjectiveEvalConfig(max_batches=None, seed=0), torch.device("cpu"))
            out.setdefault(label, {})[f"{rate:g}"] = {
                "mlm_loss": scores["mlm_loss"], "mlm_acc": scores["mlm_acc"], "instances": scores["instances"],
                "unigram_loss": scores["unigram_token_loss"], "shards_of": shards_of}
    return out


def finetune(label: str, run_dir: Path, info: dict, args) -> dict:
    tasks = "{" + ", ".join(f"{t}: {{}}" for t in args.tasks) + "}"
    lines = info["_common"] + [f"pretrain.max_steps={info['_steps']}", f"evaluate.tasks={tasks}",
                               f"evaluate.finetune.num_seeds={args.seeds}", "evaluate.finetune.max_train_examples=800",
                               "evaluate.finetune.max_eval_examples=400", "evaluate.objective.enabled=false",
                               "evaluate.intrinsic.enabled=false", "evaluate.feature_based.enabled=false",
                               "evaluate.random_init_baseline=false", f"evaluate.num_threads={args.threads}"]
    shutil.rmtree(run_dir / "eval", ignore_errors=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    wall, _ = bertfactory(["evaluate", info["_config"], "--run-dir", str(run_dir), *sets(lines)], log, args.threads)
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    out = {"wall_seconds": wall}
    for task in args.tasks:
        entry = results["tasks"][task]
        metric = entry["primary_metric"]
        scores = entry["pretrained"]
        out[task] = {"metric": metric, "mean": scores[metric], "std": scores.get(f"{metric}_std")}
    return out


def mixed_length_batches(shard_dir: Path, batch_size: int, seed: int):
    """Held-out rows cut to seeded random lengths 8..128 -> list of (input_ids [B, T], attention_mask [B, T])."""
    import numpy as np
    import pyarrow.ipc as ipc
    import torch

    rows = []
    for part in sorted((shard_dir / "heldout").glob("*.arrow")):
        try:
            table = ipc.open_file(part).read_all()
        except Exception:  # noqa: BLE001 - the shards may be written as an IPC stream
            table = ipc.open_stream(part).read_all()
        rows += table.column("input_ids").to_pylist()
    rng = np.random.default_rng(seed)
    cut = [row[: int(rng.integers(8, min(128, len(row)) + 1))] for row in rows if len(row) >= 8]
    batches = []
    for start in range(0, len(cut), batch_size):
        chunk = cut[start:start + batch_size]
        longest = max(map(len, chunk))
        ids = torch.zeros(len(chunk), longest, dtype=torch.long)
        mask = torch.zeros(len(chunk), longest, dtype=torch.long)
        for i, row in enumerate(chunk):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        batches.append((ids, mask))
    return batches


def inference(run_dirs: dict[str, Path], args) -> dict:
    import torch

    from training.checkpoint import load_pretrained

    torch.set_num_threads(args.threads)
    batches = mixed_length_batches(next(iter(run_dirs.values())) / "shards", args.batch_size, seed=0)
    real = sum(int(m.sum()) for _, m in batches)
    padded = sum(m.numel() for _, m in batches)
    out: dict = {"real_tokens": real, "padded_tokens": padded, "batches": len(batches)}
    for label, run_dir in run_dirs.items():
        model, _, _ = load_pretrained(run_dir / "pretrain" / "final")
        encoder = model.backbone()
        for unpad in (False, True):
            times = []
            with torch.inference_mode():
                for ids, mask in batches[:2]:  # warm-up: first-call allocations are not the steady state
                    encoder(ids, None, mask, unpad=unpad)
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    for ids, mask in batches:
                        encoder(ids, None, mask, unpad=unpad)
                    times.append(time.perf_counter() - start)
            out.setdefault(label, {})["unpadded" if unpad else "padded"] = {
                "median_s": statistics.median(times), "tokens_per_s": real / statistics.median(times)}
    return out


def table(result: dict, args) -> str:
    labels = list(MODELS)
    trained, held, tuned, speed = result["train"], result["heldout"], result["finetune"], result["inference"]
    lines = ["| | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]

    def row(name, cell):
        lines.append(f"| {name} | " + " | ".join(cell(label) for label in labels) + " |")

    row("training masking (recipe)", lambda l: "15 %" if "roberta" in trained[l]["recipe"] else "30 %")
    row("parameters (with embeddings)", lambda l: f"{trained[l]['parameters']:,}")
    row("calibrated s/step -> steps", lambda l: f"{trained[l]['calibration_s_per_step']:.3f} -> {trained[l]['steps']}")
    row("pretrain trainer s / wall s / CPU s",
        lambda l: f"{trained[l]['trainer_seconds']:.0f} / {trained[l]['wall_seconds']:.0f} / "
                  f"{trained[l]['cpu_seconds']:.0f}")
    row("tokens seen", lambda l: f"{trained[l]['tokens']:,}")
    for rate in sorted(next(iter(held.values()))):
        row(f"held-out MLM loss / acc at {float(rate):.0%} masking (same rows, same masks)",
            lambda l, r=rate: f"{held[l][r]['mlm_loss']:.3f} / {held[l][r]['mlm_acc']:.3f}")
    for rate in sorted(next(iter(held.values()))):  # the shards' own no-context baseline, the same for both
        row(f"unigram (no-context) loss at {float(rate):.0%} masking", lambda l, r=rate: f"{held[l][r]['unigram_loss']:.3f}")
    for task in args.tasks:
        row(f"{task} {tuned[labels[0]][task]['metric']} (mean ± std, {args.seeds} seeds)",
            lambda l, t=task: f"{tuned[l][t]['mean']:.3f} ± {tuned[l][t]['std'] or 0:.3f}")
    for mode in ("padded", "unpadded"):
        row(f"inference tokens/s, {mode} (median of {args.repeats})",
            lambda l, m=mode: f"{speed[l][m]['tokens_per_s']:,.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="pretraining wall-clock budget per model")
    parser.add_argument("--calibration-steps", type=int, default=30, help="steps of the timing run per model")
    parser.add_argument("--threads", type=int, default=2, help="torch threads everywhere (pinned)")
    parser.add_argument("--tasks", nargs="+", default=["movie_sentiment", "trec_coarse"])
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per task")
    parser.add_argument("--batch-size", type=int, default=32, help="inference batch size")
    parser.add_argument("--repeats", type=int, default=5, help="inference passes; the median is reported")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "modern-vs-bert")
    args = parser.parse_args()
    args.runs.mkdir(parents=True, exist_ok=True)
    run_dirs = {label: args.runs / MODELS[label][0].removesuffix(".yaml") for label in MODELS}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "commit": commit, "train": {},
                    "finetune": {}}
    for label, run_dir in run_dirs.items():
        result["train"][label] = train(label, run_dir, args)
        print(f"{label}: {result['train'][label]['steps']} steps", flush=True)
    result["heldout"] = heldout(run_dirs)
    for label, run_dir in run_dirs.items():
        result["finetune"][label] = finetune(label, run_dir, result["train"][label], args)
    result["inference"] = inference(run_dirs, args)
    for info in result["train"].values():
        for key in [k for k in info if k.startswith("_")]:
            del info[key]
    tmp = args.runs / "results.json.tmp"
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
    tmp.replace(args.runs / "results.json")
    speed = result["inference"]
    print(table(result, args))
    print(f"\ncommit {commit}; inference inputs: {speed['batches']} batches, {speed['real_tokens']:,} real tokens, "
          f"{speed['padded_tokens']:,} padded positions")


if __name__ == "__main__":
    main()
