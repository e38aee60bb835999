"""Fine-tuning parity with transformers' Trainer (issue 32, item 1): the same Hugging Face checkpoint (the `minilm`
sample: sentence-transformers/all-MiniLM-L6-v2, a 22.7 M-parameter BertModel), the same train/dev/test files and
the same hyperparameters, fine-tuned by `bertfactory import-hf` + `bertfactory evaluate --task-file` (ours) and by
`AutoModelForSequenceClassification` + `Trainer` (the peer); test accuracy (mean ± std over seeds) and the
CPU-seconds of each side.

    .venv/bin/python benchmarks/finetune_parity.py                  # full size: both tasks, full train, 3 seeds
    .venv/bin/python benchmarks/finetune_parity.py --quick          # smoke size (a few minutes on 2 cores)
    .venv/bin/python benchmarks/finetune_parity.py --tasks trec_coarse --seeds 1 --train-limit 2000 --epochs 2
    .venv/bin/python benchmarks/finetune_parity.py --from-results benchmarks/finetune_parity.json   # tables again

Needs `bertfactory samples fetch minilm trec movie_reviews`. The full size writes benchmarks/finetune_parity.json
(other sizes RUNS/results.json unless --out) and prints markdown tables.

What runs, for each task of `--tasks` (trec_coarse, movie_sentiment):
1. The task's splits (evaluation.tasks.registry's reader of the built-in sample: its own train/dev/test) written once
   as JSONL files (`id`, `text`, `label` name), train cut to `--train-limit` and dev/test to `--eval-limit` by the
   same seeded subset as `evaluate.finetune.max_train_examples` (evaluation.finetune.subsample). Both sides read
   exactly these files.
2. Ours, per seed, a fresh process: `bertfactory evaluate MODEL --task-file train.jsonl --dev-file dev.jsonl
   --test-file test.jsonl --task-type classification --label-names ... --no-prefect` on the `bertfactory import-hf`
   of MiniLM (imported once), with every fine-tuning setting pinned by --set (`ours_sets`): one learning rate, one
   seed, the epochs, batch, max length, warmup ratio, weight decay, dropout, clipping, eval batch, linear schedule;
   no random-init twin and no non-neural baselines (other fine-tunings, not the one compared); a fresh run
   directory (no encodings cached by an earlier seed). Its defaults otherwise (the TensorBoard curves, report.md).
   Selection: the best dev-accuracy epoch restored and scored on test.
3. The peer, per seed, a fresh process (this script with --peer-worker): the HF checkpoint through
   `AutoTokenizer` (truncation at the same max length) and `AutoModelForSequenceClassification` (seeded by
   `set_seed(seed)` before the classifier is made), the files through `datasets`, `Trainer` with dynamic padding
   (`DataCollatorWithPadding`), AdamW at our betas / epsilon (1e-6: BERT's, not the Trainer's 1e-8), the same
   weight decay (not on biases and LayerNorm: the Trainer's rule and ours), linear schedule with our warmup step
   count (round(ratio x steps); the Trainer's own ratio rounds up), clipping 1.0, dev accuracy after every epoch
   (`eval_strategy=epoch`), `load_best_model_at_end` on `accuracy` (checkpoints: the model only), then test.
   A seed's finished pair is kept as RUNS/TASK/seedN.json: the same command at the same commit (clean tree), with
   the same files and settings, reuses it instead of measuring it again, so a stopped full-size run continues.
4. The clock: each process's user + system CPU seconds (resource.getrusage of the child) and wall seconds, at
   `--threads` torch / OpenMP threads on both sides (OMP_NUM_THREADS and torch.set_num_threads / evaluate.num_threads).
   Inside each process the fine-tuning alone is timed too (CPU and wall): the peer's `trainer.train()` +
   `trainer.predict(test)`; ours the one `evaluation.finetune.finetune_model` call (every epoch, the dev passes, the
   test pass) — our command runs as `python benchmarks/finetune_parity.py --ours-worker CLOCK.json evaluate ...`,
   which is the console script's `flows.cli.main(["evaluate", ...])` with a clock wrapped around that function.
   The rest of a process (imports, reading and tokenizing, loading the model, writing results / checkpoints) is
   each side's fixed cost.
5. Checks written beside the numbers: each side's hyperparameters as it reports them (ours from results.json's
   settings and the finetune module's optimiser constants, the peer from its TrainingArguments, tokenizer and model
   config) must be equal; both must have read the same number of examples; each side's chosen epoch must be the
   first best of its own dev curve; our tokenizer's ids for every text must equal the peer's.
Per task: mean ± std test accuracy per side, the difference (ours - peer) and whether ours is within 1 point
(or better), the ratio of CPU-seconds ours / peer (whole processes, and fine-tuning alone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from time_to_quality import run_watched  # noqa: E402  the timed child process (wall + CPU seconds)
import bertfactory  # noqa: E402,F401  pins the CPU kernels in os.environ: both sides' processes inherit the same

TASKS = ("trec_coarse", "movie_sentiment")
DEFAULT_RESULTS = REPO / "benchmarks" / "finetune_parity.json"
WITHIN = 0.01  # ours' mean test accuracy at least the peer's minus one point
# the pinned fine-tuning settings (both sides); the CLI sets the first six, the rest are fixed here
FIXED = {"classifier_dropout": 0.1, "max_grad_norm": 1.0, "eval_batch_size": 128}
QUICK = {"train_limit": 400, "eval_limit": 300, "epochs": 2, "max_len": 64, "seeds": 1}
OURS_WORKER = "--ours-worker"  # this script as our CLI with a clock on the fine-tuning (not an option of the parser)
COMPARED = ("learning_rate", "epochs", "batch_size", "max_seq_len", "warmup_steps", "total_steps", "weight_decay",
            "seed", "max_grad_norm", "adam_betas", "adam_epsilon", "schedule", "classifier_dropout",
            "eval_batch_size", "selection", "train_examples", "dev_examples", "test_examples")


# ---------------------------------------------------------------------------------------------------- the files

def write_task_files(task: str, directory: Path, train_limit: int | None, eval_limit: int | None) -> dict:
    """The built-in task's splits as train/dev/test JSONL files (train cut to `train_limit`, dev and test to
    `eval_limit`, by evaluation.finetune.subsample) -> {paths, label_names, sizes, majority}."""
    from evaluation.finetune import subsample
    from evaluation.tasks.registry import BUILTIN_TASKS

    data = BUILTIN_TASKS[task](None)
    directory.mkdir(parents=True, exist_ok=True)
    splits = {"train": subsample(data.train, train_limit), "dev": subsample(data.dev, eval_limit),
              "test": subsample(data.test, eval_limit)}
    paths = {}
    for split, examples in splits.items():
        path = directory / f"{split}.jsonl"
        with open(path, "w", encoding="utf-8") as out:
            for e in examples:
                out.write(json.dumps({"id": e.id, "text": e.text, "label": data.label_names[e.label]},
                                     ensure_ascii=False) + "\n")
        paths[split] = str(path)
    test_labels = [e.label for e in splits["test"]]
    majority = max(test_labels.count(k) for k in set(test_labels)) / len(test_labels)
    return {"paths": paths, "label_names": list(data.label_names), "source": data.source.get("path", ""),
            "sizes": {s: len(v) for s, v in splits.items()}, "test_majority": majority}


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def hyperparameters(args: argparse.Namespace) -> dict:
    """The settings both sides are pinned to (the seed is per run)."""
    return {"learning_rate": args.lr, "epochs": args.epochs, "batch_size": args.batch, "max_seq_len": args.max_len,
            "warmup_ratio": args.warmup, "weight_decay": args.weight_decay, **FIXED}


def total_steps(train_examples: int, hp: dict) -> int:
    return math.ceil(train_examples / hp["batch_size"]) * hp["epochs"]


def warmup_steps(train_examples: int, hp: dict) -> int:
    """Our rule for the warmup step count (evaluation.finetune_schedule.linear_warmup_decay), given to the peer as
    a step count: the Trainer's own warmup ratio rounds up (ceil), ours to the nearest step."""
    from evaluation.finetune_schedule import linear_warmup_decay

    return linear_warmup_decay(total_steps(train_examples, hp), hp["warmup_ratio"]).warmup_steps


def tokenizer_parity(model_dir: Path, hf_dir: Path, files: dict, max_len: int) -> dict:
    """Our TextEncoder (the imported model's tokenizer.json) against the peer's AutoTokenizer on every text of the
    files, truncated at `max_len`: how many differ, and how many each side truncated."""
    from transformers import AutoTokenizer

    from evaluation.encode import TextEncoder

    texts = [r["text"] for split in ("train", "dev", "test") for r in read_jsonl(files["paths"][split])]
    ours = [ids.tolist() for ids, _ in TextEncoder.from_file(model_dir / "tokenizer.json")
            .encode_pairs(texts, [None] * len(texts), max_len)]
    peer = AutoTokenizer.from_pretrained(str(hf_dir))(texts, truncation=True, max_length=max_len)["input_ids"]
    differ = [i for i, (a, b) in enumerate(zip(ours, peer)) if a != b]
    return {"texts": len(texts), "differ": len(differ), "examples": [texts[i][:120] for i in differ[:3]],
            "truncated": sum(len(a) >= max_len for a in ours), "peer_truncated": sum(len(b) >= max_len for b in peer),
            "mean_tokens": statistics.fmean(len(a) for a in ours)}


# --------------------------------------------------------------------------------------------------------- ours

def import_model(hf_dir: Path, out: Path, log: Path, threads: int) -> dict:
    """`bertfactory import-hf` of the checkpoint (once per runs directory), timed."""
    if (out / "config.json").is_file():
        return {"reused": True}
    return run_watched([cli(), "import-hf", str(hf_dir), str(out), "--overwrite"], log, threads, dict)


def cli() -> str:
    return str(Path(sys.executable).parent / "bertfactory")


def ours_sets(hp: dict, seed: int, threads: int) -> list[str]:
    """Every --set of our run: the pinned settings, one seed, nothing but the one fine-tuning compared."""
    values = {
        "evaluate.finetune.learning_rate": hp["learning_rate"], "evaluate.finetune.epochs": hp["epochs"],
        "evaluate.finetune.batch_size": hp["batch_size"], "evaluate.finetune.max_seq_len": hp["max_seq_len"],
        "evaluate.finetune.warmup_ratio": hp["warmup_ratio"], "evaluate.finetune.weight_decay": hp["weight_decay"],
        "evaluate.finetune.classifier_dropout": hp["classifier_dropout"],
        "evaluate.finetune.max_grad_norm": hp["max_grad_norm"], "evaluate.finetune.eval_batch_size": hp["eval_batch_size"],
        "evaluate.finetune.schedule": "linear", "evaluate.finetune.seed": seed, "evaluate.finetune.num_seeds": 1,
        "evaluate.finetune.learning_rates": "null", "evaluate.finetune.early_stopping_patience": "null",
        "evaluate.random_init_baseline": "false", "evaluate.baselines": "[]", "evaluate.device": "cpu",
        "evaluate.num_threads": threads,
    }
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def run_ours(model_dir: Path, task: str, files: dict, hp: dict, seed: int, run_dir: Path, threads: int) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    paths = files["paths"]
    command = [cli(), "evaluate", str(model_dir), "--run-dir", str(run_dir), "--task-file", paths["train"],
               "--dev-file", paths["dev"], "--test-file", paths["test"], "--task-type", "classification",
               "--task-name", task, "--text-column", "text", "--label-column", "label",
               "--label-names", ",".join(files["label_names"]), "--no-prefect", *ours_sets(hp, seed, threads)]
    spans = run_dir / "finetune_clock.json"
    launcher = [sys.executable, str(Path(__file__).resolve()), OURS_WORKER, str(spans)]
    clock = run_watched(launcher + command[1:], run_dir / "ours.log", threads, dict)
    clock.pop("snapshots", None)
    timed = json.loads(spans.read_text())
    if len(timed) != 1:
        sys.exit(f"error: {run_dir}: expected one fine-tuning (finetune_model call) in our run, found {len(timed)}")
    return {**clock, **ours_report(run_dir, task), "command": " ".join(command),
            "finetune_cpu_s": timed[0]["cpu_s"], "finetune_wall_s": timed[0]["wall_s"]}


def ours_worker(spans_path: Path, cli_args: list[str]) -> int:
    """`bertfactory CLI_ARGS` in this process (flows.cli.main, the console script's entry point), with the CPU and
    wall seconds of each evaluation.finetune.finetune_model call (one task's fine-tuning of one model: every epoch,
    the dev passes and the test pass) written to `spans_path`: the span the peer's own clock covers."""
    import evaluation.finetune as finetune

    original, spans = finetune.finetune_model, []

    def timed(*args, **kwargs):
        cpu, wall = cpu_now(), time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spans.append({"cpu_s": cpu_now() - cpu, "wall_s": time.perf_counter() - wall})

    finetune.finetune_model = timed  # evaluation.run imports it when a task runs
    from flows.cli import main as cli_main

    sys.argv = ["bertfactory", *cli_args]
    try:
        return cli_main(cli_args)
    finally:
        spans_path.write_text(json.dumps(spans))


def ours_report(run_dir: Path, task: str) -> dict:
    """Our run's accuracy, curve and hyperparameters as its results.json reports them."""
    from evaluation.finetune import ADAM_BETAS, ADAM_EPS
    from evaluation.finetune_schedule import linear_warmup_decay

    results = json.loads((run_dir / "eval" / "results.json").read_text())
    entry = results["tasks"][task]
    s, pretrained = entry["settings"], entry["pretrained"]
    run = pretrained["runs"][0]
    rates = [g["learning_rate"] for g in pretrained["lr_grid"]]
    curve = [e.get("dev_score") for e in run["epochs"]]
    sizes = entry["data"]["sizes"]
    steps = run["steps"]
    used = {
        "learning_rate": rates[0] if len(rates) == 1 else rates, "epochs": s["epochs"], "batch_size": s["batch_size"],
        "max_seq_len": s["max_seq_len"], "total_steps": steps,
        "warmup_steps": linear_warmup_decay(steps, s["warmup_ratio"]).warmup_steps if s["schedule"] == "linear" else None,
        "weight_decay": s["weight_decay"], "seed": run["seed"], "max_grad_norm": s["max_grad_norm"],
        "adam_betas": list(ADAM_BETAS), "adam_epsilon": ADAM_EPS, "schedule": s["schedule"],
        "classifier_dropout": s["classifier_dropout"], "eval_batch_size": s["eval_batch_size"],
        "selection": "best dev accuracy epoch" if s["early_stopping_patience"] is None and
        s["layerwise_lr_decay"] == 1.0 and not s["gradual_unfreezing"] else "other",
        "train_examples": sizes["train"], "dev_examples": sizes["dev"], "test_examples": sizes["test"],
    }
    return {"accuracy": pretrained["accuracy"], "dev_accuracy": run["dev"]["accuracy"], "best_epoch": run["best_epoch"],
            "dev_curve": curve, "train_loss": [e["train_loss"] for e in run["epochs"]],
            "results_finetune_s": results.get("timings", {}).get(f"{task}.pretrained"), "hyperparameters": used,
            "truncated": entry["data"].get("truncated")}


# --------------------------------------------------------------------------------------------------------- peer

def run_peer(hf_dir: Path, task: str, files: dict, hp: dict, seed: int, run_dir: Path, threads: int) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = {"hf_dir": str(hf_dir), "task": task, "files": files, "hp": hp, "seed": seed, "threads": threads,
            "warmup_steps": warmup_steps(files["sizes"]["train"], hp), "out": str(run_dir)}
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=2))
    command = [sys.executable, str(Path(__file__).resolve()), "--peer-worker", str(run_dir / "spec.json")]
    clock = run_watched(command, run_dir / "peer.log", threads, dict)
    clock.pop("snapshots", None)
    report = json.loads((run_dir / "peer.json").read_text())
    shutil.rmtree(run_dir / "trainer", ignore_errors=True)  # its epoch checkpoints
    return {**clock, **report}


def cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peer_worker(spec_path: Path) -> None:
    """The peer's process: AutoModelForSequenceClassification + Trainer on the files (see the module docstring)."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments, set_seed)

    spec = json.loads(spec_path.read_text())
    hp, seed, out = spec["hp"], spec["seed"], Path(spec["out"])
    torch.set_num_threads(spec["threads"])
    labels = spec["files"]["label_names"]
    tokenizer = AutoTokenizer.from_pretrained(spec["hf_dir"])

    def dataset(split: str):
        rows = read_jsonl(spec["files"]["paths"][split])
        raw = Dataset.from_dict({"text": [r["text"] for r in rows], "label": [labels.index(r["label"]) for r in rows]})
        return raw.map(lambda b: tokenizer(b["text"], truncation=True, max_length=hp["max_seq_len"]), batched=True,
                       remove_columns=["text"])

    splits = {s: dataset(s) for s in ("train", "dev", "test")}
    set_seed(seed)  # the classifier's init (Trainer re-seeds before training: dropout, data order)
    model = AutoModelForSequenceClassification.from_pretrained(
        spec["hf_dir"], num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id={n: i for i, n in enumerate(labels)})

    def accuracy(prediction) -> dict:
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    training_args = TrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=hp["epochs"], learning_rate=hp["learning_rate"],
        per_device_train_batch_size=hp["batch_size"], per_device_eval_batch_size=hp["eval_batch_size"],
        warmup_steps=spec["warmup_steps"], weight_decay=hp["weight_decay"], lr_scheduler_type="linear",
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-6, max_grad_norm=hp["max_grad_norm"], seed=seed,
        eval_strategy="epoch", save_strategy="epoch", logging_strategy="epoch", load_best_model_at_end=True,
        metric_for_best_model="accuracy", greater_is_better=True, save_total_limit=1, save_only_model=True,
        use_cpu=True, report_to="none", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=training_args, train_dataset=splits["train"], eval_dataset=splits["dev"],
                      processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer),
                      compute_metrics=accuracy)
    cpu0, wall0 = cpu_now(), time.perf_counter()
    trainer.train()
    test = trainer.predict(splits["test"])
    finetune_cpu, finetune_wall = cpu_now() - cpu0, time.perf_counter() - wall0
    history = trainer.state.log_history
    curve = [h["eval_accuracy"] for h in history if "eval_accuracy" in h]
    # the epoch of the checkpoint the Trainer restored (checkpoint-<step>), not read off the curve: the check below
    # compares it with the curve's first best
    best_step = int(Path(trainer.state.best_model_checkpoint or "checkpoint-0").name.rsplit("-", 1)[-1])
    per_epoch = math.ceil(len(splits["train"]) / hp["batch_size"])
    best = best_step // per_epoch if best_step else None
    a = trainer.args
    dropout = model.config.classifier_dropout if model.config.classifier_dropout is not None else \
        model.config.hidden_dropout_prob
    used = {
        "learning_rate": a.learning_rate, "epochs": int(a.num_train_epochs), "batch_size": a.per_device_train_batch_size,
        "max_seq_len": hp["max_seq_len"], "total_steps": trainer.state.max_steps,
        "warmup_steps": a.get_warmup_steps(trainer.state.max_steps), "weight_decay": a.weight_decay, "seed": a.seed,
        "max_grad_norm": a.max_grad_norm, "adam_betas": [a.adam_beta1, a.adam_beta2], "adam_epsilon": a.adam_epsilon,
        "schedule": str(getattr(a.lr_scheduler_type, "value", a.lr_scheduler_type)), "classifier_dropout": dropout,
        "eval_batch_size": a.per_device_eval_batch_size,
        "selection": "best dev accuracy epoch" if a.load_best_model_at_end and a.metric_for_best_model == "accuracy"
        and str(getattr(a.eval_strategy, "value", a.eval_strategy)) == "epoch" else "other",
        "train_examples": len(splits["train"]), "dev_examples": len(splits["dev"]), "test_examples": len(splits["test"]),
    }
    doc = {"accuracy": test.metrics["test_accuracy"], "dev_accuracy": trainer.state.best_metric, "best_epoch": best,
           "dev_curve": curve, "train_loss": [h["loss"] for h in history if "loss" in h],
           "finetune_wall_s": finetune_wall, "finetune_cpu_s": finetune_cpu, "hyperparameters": used,
           "truncated_note": "the tokenizer truncates at max_length"}
    tmp = out / "peer.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
    tmp.replace(out / "peer.json")


# ------------------------------------------------------------------------------------------------- the comparison

def compare_run(ours: dict, peer: dict) -> dict:
    """The checks of one (task, seed): hyperparameters equal, each side's chosen epoch its dev curve's first best."""
    a, b = ours["hyperparameters"], peer["hyperparameters"]
    differ = {k: {"ours": a.get(k), "peer": b.get(k)} for k in COMPARED if not _same(a.get(k), b.get(k))}

    def first_best(side: dict) -> bool:
        curve = [-math.inf if v is None else v for v in side["dev_curve"]]
        return bool(curve) and side["best_epoch"] == curve.index(max(curve)) + 1

    return {"hyperparameters_differ": differ, "ours_first_best": first_best(ours), "peer_first_best": first_best(peer)}


def _same(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return x is not None and y is not None and math.isclose(float(x), float(y), rel_tol=1e-9)
    return x == y


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(runs: list[dict]) -> dict:
    """One task's runs (each {seed, ours, peer, checks}) -> means, difference, CPU ratios."""
    out = {}
    for side in ("ours", "peer"):
        acc = [r[side]["accuracy"] for r in runs]
        m, s = mean_std(acc)
        out[side] = {"accuracy_mean": m, "accuracy_std": s, "cpu_s": sum(r[side]["cpu_s"] for r in runs),
                     "wall_s": sum(r[side]["wall_s"] for r in runs),
                     "finetune_cpu_s": sum(r[side]["finetune_cpu_s"] for r in runs),
                     "finetune_wall_s": sum(r[side]["finetune_wall_s"] for r in runs)}
    out["difference"] = out["ours"]["accuracy_mean"] - out["peer"]["accuracy_mean"]
    out["within_1_point"] = out["difference"] >= -WITHIN
    out["cpu_ratio"] = out["ours"]["cpu_s"] / out["peer"]["cpu_s"]
    out["wall_ratio"] = out["ours"]["wall_s"] / out["peer"]["wall_s"]
    out["finetune_cpu_ratio"] = out["ours"]["finetune_cpu_s"] / out["peer"]["finetune_cpu_s"]
    out["finetune_wall_ratio"] = out["ours"]["finetune_wall_s"] / out["peer"]["finetune_wall_s"]
    out["hyperparameters_equal"] = all(not r["checks"]["hyperparameters_differ"] for r in runs)
    out["selection_ok"] = all(r["checks"]["ours_first_best"] and r["checks"]["peer_first_best"] for r in runs)
    return out


def tables(result: dict) -> str:
    hp = result["hyperparameters"]
    lines = [f"MiniLM (all-MiniLM-L6-v2, 22.7 M parameters); lr {hp['learning_rate']:g}, {hp['epochs']} epochs, batch "
             f"{hp['batch_size']}, max length {hp['max_seq_len']}, warmup {hp['warmup_ratio']:g}, weight decay "
             f"{hp['weight_decay']:g}, {result['threads']} thread(s), seeds {result['seeds']}", "",
             "| task (train / dev / test) | ours: test acc | peer: test acc | ours - peer | within 1 pt | "
             "CPU s ours / peer (ratio) | fine-tuning CPU s ours / peer (ratio) |", "|---|---|---|---|---|---|---|"]
    for task, t in result["tasks"].items():
        s, o, p = t["summary"], t["summary"]["ours"], t["summary"]["peer"]
        sizes = t["files"]["sizes"]
        lines.append(
            f"| {task} ({sizes['train']:,} / {sizes['dev']:,} / {sizes['test']:,}) | {o['accuracy_mean']:.4f} ± "
            f"{o['accuracy_std']:.4f} | {p['accuracy_mean']:.4f} ± {p['accuracy_std']:.4f} | "
            f"{100 * s['difference']:+.2f} pt | {'yes' if s['within_1_point'] else 'no'} | {o['cpu_s']:.0f} / "
            f"{p['cpu_s']:.0f} ({s['cpu_ratio']:.2f}x) | {o['finetune_cpu_s']:.0f} / {p['finetune_cpu_s']:.0f} "
            f"({s['finetune_cpu_ratio']:.2f}x) |")
    lines += ["", "| task | seed | ours acc (best epoch, dev curve) | peer acc (best epoch, dev curve) | CPU s ours / peer "
              "| checks |", "|---|---|---|---|---|---|"]
    for task, t in result["tasks"].items():
        for r in t["runs"]:
            o, p, c = r["ours"], r["peer"], r["checks"]
            problems = [f"differ: {', '.join(c['hyperparameters_differ'])}"] if c["hyperparameters_differ"] else []
            problems += [f"{side} did not keep its first best epoch" for side in ("ours", "peer")
                         if not c[f"{side}_first_best"]]
            lines.append(f"| {task} | {r['seed']} | {o['accuracy']:.4f} ({o['best_epoch']}, {_curve(o)}) | "
                         f"{p['accuracy']:.4f} ({p['best_epoch']}, {_curve(p)}) | {o['cpu_s']:.0f} / {p['cpu_s']:.0f} | "
                         f"{'; '.join(problems) or 'ok'} |")
    lines.append("")
    for task, t in result["tasks"].items():
        tok = t["tokenizer_parity"]
        lines.append(f"{task}: tokenizers agree on {tok['texts'] - tok['differ']:,} of {tok['texts']:,} texts; "
                     f"{tok['truncated']:,} truncated at {hp['max_seq_len']} (mean {tok['mean_tokens']:.1f} tokens); "
                     f"test majority rate {t['files']['test_majority']:.3f}")
    return "\n".join(lines)


def _curve(side: dict) -> str:
    return " ".join("-" if v is None else f"{v:.3f}" for v in side["dev_curve"])


def pair_key(provenance: dict, hp: dict, threads: int, files: dict, seed: int) -> str:
    """What one seed's pair of runs depends on: the commit (a clean tree only), the settings, the threads, the
    bytes of the task files. A stopped comparison continues from the pairs it finished under the same key (run the
    same command at the same commit again); any difference measures the pair again."""
    digest = hashlib.sha256()
    for split in ("train", "dev", "test"):
        digest.update(Path(files["paths"][split]).read_bytes())
    state = {"commit": provenance["commit"], "dirty": provenance["dirty"], "hp": hp, "threads": threads,
             "files": digest.hexdigest(), "seed": seed}
    if provenance["dirty"]:  # uncommitted changes: nothing to tell two trees apart, never reused
        state["date"] = provenance["date"]
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def write_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
    tmp.replace(path)


def run_task(task: str, args: argparse.Namespace, model_dir: Path, hf_dir: Path, hp: dict, provenance: dict) -> dict:
    root = args.runs / task
    files = write_task_files(task, root / "data", args.train_limit, args.eval_limit)
    entry = {"files": files, "tokenizer_parity": tokenizer_parity(model_dir, hf_dir, files, hp["max_seq_len"]),
             "runs": []}
    for seed in args.seed_list:
        done = root / f"seed{seed}.json"
        key = pair_key(provenance, hp, args.threads, files, seed)
        earlier = json.loads(done.read_text()) if done.is_file() else None
        if earlier is not None and earlier.get("key") == key:
            ours, peer = earlier["ours"], earlier["peer"]
            print(f"{task} seed {seed}: measured earlier by this commit with these files and settings ({done})",
                  flush=True)
        else:
            ours = run_ours(model_dir, task, files, hp, seed, root / f"ours-seed{seed}", args.threads)
            peer = run_peer(hf_dir, task, files, hp, seed, root / f"peer-seed{seed}", args.threads)
            write_atomic(done, {"key": key, "ours": ours, "peer": peer})
        entry["runs"].append({"seed": seed, "ours": ours, "peer": peer, "checks": compare_run(ours, peer),
                              "measured_earlier": earlier is not None and earlier.get("key") == key})
        print(f"{task} seed {seed}: ours {ours['accuracy']:.4f} ({ours['cpu_s']:.0f} CPU s), peer "
              f"{peer['accuracy']:.4f} ({peer['cpu_s']:.0f} CPU s)", flush=True)
    entry["summary"] = summarize(entry["runs"])
    return entry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", type=int, default=None, help="seeds per task (default 3; --quick 1)")
    parser.add_argument("--first-seed", type=int, default=1, help="the seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--train-limit", type=int, default=None, help="training examples (default: the full split)")
    parser.add_argument("--eval-limit", type=int, default=None, help="dev and test examples (default: all)")
    parser.add_argument("--epochs", type=int, default=None, help="default 3 (--quick 2)")
    parser.add_argument("--max-len", type=int, default=None, help="tokens per input, [CLS]/[SEP] included (default 128)")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (both sides)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=0.1, help="warmup ratio of the steps")
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=2, help="torch / OpenMP threads on both sides")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke size: {', '.join(f'{k}={v}' for k, v in QUICK.items())} unless given")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "finetune-parity")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON (default: {DEFAULT_RESULTS.relative_to(REPO)} at the full size, "
                        "RUNS/results.json otherwise)")
    parser.add_argument("--from-results", type=Path, default=None, help="print an earlier results JSON's tables")
    parser.add_argument("--peer-worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = {"seeds": 3, "epochs": 3, "max_len": 128, "train_limit": None, "eval_limit": None}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK[key] if args.quick else value)
    for name in ("seeds", "epochs", "max_len", "batch", "threads", "train_limit", "eval_limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.max_len < 3:
        parser.error("--max-len must be at least 3")
    args.seed_list = [args.first_seed + k for k in range(args.seeds)]
    full = args.train_limit is None and args.eval_limit is None and args.seeds >= 3 and args.epochs == 3 \
        and args.max_len == 128 and set(args.tasks) == set(TASKS)
    if args.out is None:
        args.out = DEFAULT_RESULTS if full else args.runs / "results.json"
    return args


def run(args: argparse.Namespace) -> dict:
    """The whole comparison (every task of args.tasks) -> the results document (also written to args.out)."""
    from bertfactory.samples import is_fetched, sample_path

    from evaluation.tasks.registry import BUILTIN_SAMPLES

    missing = [s for s in ("minilm", *(BUILTIN_SAMPLES[t] for t in args.tasks)) if not is_fetched(s)]
    if missing:
        sys.exit(f"error: needs `bertfactory samples fetch {' '.join(missing)}`")
    started = time.perf_counter()
    args.runs.mkdir(parents=True, exist_ok=True)
    hf_dir = sample_path("minilm")
    model_dir = args.runs / "minilm"
    imported = import_model(hf_dir, model_dir, args.runs / "import.log", args.threads)
    hp = hyperparameters(args)

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()

    # provenance (scripts/readme_quality.py quotes only a result of a clean tree): commit, tracked changes, UTC date
    commit, dirty = git("rev-parse", "--short", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result = {"commit": commit, "dirty": dirty, "date": date, "hyperparameters": hp, "threads": args.threads,
              "seeds": args.seed_list, "sizes": {"train_limit": args.train_limit, "eval_limit": args.eval_limit},
              "import": imported, "command": " ".join(sys.argv), "tasks": {}}
    for task in args.tasks:
        result["tasks"][task] = run_task(task, args, model_dir, hf_dir, hp,
                                         {"commit": commit, "dirty": dirty, "date": date})
    result["total_wall_s"] = time.perf_counter() - started  # this invocation's: without pairs measured earlier
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [OURS_WORKER]:
        sys.exit(ours_worker(Path(argv[1]), argv[2:]))
    args = parse_args(argv)
    if args.peer_worker:
        peer_worker(args.peer_worker)
        return
    if args.from_results:
        print(tables(json.loads(args.from_results.read_text())))
        return
    result = run(args)
    print(tables(result))
    print(f"\ncommit {result['commit']}; {result['total_wall_s']:.0f} s in all; results {args.out}")


if __name__ == "__main__":
    main()
