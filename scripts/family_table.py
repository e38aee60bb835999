"""Measure every member's tiny twin on the real corpus and write the measured column of docs/family.md.

Each twin runs as a user runs it, `bertfactory run configs/<twin> --run-dir RUNS/<member>` (Prefect, the whole
recipe: preprocess, every pretraining step, evaluate), with the fine-tuning tasks left out (they are the demo's
and issue 18's business); its evaluate stage scores the member's own objective on the held-out shards against the
no-context baseline (evaluation/heldout.py). The table between the `family-measured` markers of docs/family.md is
rewritten from the runs' results.json and summary.json, with the commit and date, so it is never typed by hand.

    python scripts/family_table.py                       # every member, runs/family/, ~1 h on 2 cores
    python scripts/family_table.py --members roberta xlnet --jobs 2
    python scripts/family_table.py --write-only          # rebuild the table from existing runs

Twins already complete in RUNS are not retrained (the flow's stage cache): delete RUNS/<member> to measure anew.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "family.md"
START, END = "<!-- family-measured:start -->", "<!-- family-measured:end -->"

TWINS = {  # member -> tiny twin
    "BERT": "local.yaml",
    "RoBERTa": "tiny-roberta.yaml",
    "ALBERT": "tiny-albert.yaml",
    "SpanBERT": "tiny-spanbert.yaml",
    "ELECTRA": "tiny-electra.yaml",
    "XLNet": "tiny-xlnet.yaml",
    "Transformer-XL": "tiny-transformer-xl.yaml",
    "XLM": "tiny-xlm.yaml",
    "mBERT": "tiny-mbert.yaml",
}
NO_TASKS = ["evaluate.tasks={}", "evaluate.feature_based.enabled=false", "evaluate.random_init_baseline=false"]


def run_twin(member: str, runs: Path) -> tuple[str, str | None]:
    run_dir = runs / member.lower()
    cmd = [str(Path(sys.executable).parent / "bertfactory"), "run", str(REPO / "configs" / TWINS[member]),
           "--run-dir", str(run_dir)] + [a for s in NO_TASKS for a in ("--set", s)]
    log = runs / f"{member.lower()}.log"
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if proc.returncode:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        return member, f"exit {proc.returncode}: {tail[0][:200]} (log {log})"
    return member, None


def row(member: str, runs: Path, error: str | None) -> str:
    run_dir = runs / member.lower()
    if error:
        return f"| {member} | `{TWINS[member]}` | failed: {error} | | | |"
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    head = results["objective"]["headline"]
    minutes = summary["seconds"] / 60
    value = f"{head['metric']} **{head['value']:.3f}** vs {head['baseline']:.3f} ({head['baseline_name']})"
    if "perplexity" in head:
        value += f"; perplexity {head['perplexity']:.0f} vs {head['baseline_perplexity']:.0f}"
    extra = {k: v for k, v in results["objective"].items() if k.endswith("_acc")}
    accs = ", ".join(f"{k} {v:.3f}" for k, v in sorted(extra.items()))
    return (f"| {member} | `{TWINS[member]}` | {value} | {accs} | {summary['steps']} steps, "
            f"{summary['tokens']:,} tokens | {minutes:.1f} |")


def write_table(runs: Path, errors: dict[str, str | None]) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    lines = [START, "",
             f"Measured by `python scripts/family_table.py` at commit {commit} on "
             f"{datetime.now(timezone.utc):%Y-%m-%d} (2-core CPU, one torch thread per run): each tiny twin's whole "
             "recipe on the real samples, scored on its held-out shards by its own objective against the best "
             "no-context predictor (evaluation/heldout.py).", "",
             "| member | tiny twin | held-out objective vs no-context baseline | accuracies | trained | pretrain min |",
             "|---|---|---|---|---|---|"]
    for member in TWINS:
        if member in errors or (runs / member.lower() / "eval" / "results.json").is_file():
            lines.append(row(member, runs, errors.get(member)))
    lines += ["", END]
    text = DOC.read_text(encoding="utf-8")
    if START in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
        text = before + "\n".join(lines) + after
    else:
        text = text.rstrip("\n") + "\n\n## Measured: tiny twins on the real corpus\n\n" + "\n".join(lines) + "\n"
    DOC.write_text(text, encoding="utf-8")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", nargs="*", choices=list(TWINS), default=list(TWINS))
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "family", help="where the twins' runs go")
    parser.add_argument("--jobs", type=int, default=1, help="twins trained at once (each one torch thread)")
    parser.add_argument("--write-only", action="store_true", help="only rebuild the table from existing runs")
    args = parser.parse_args()
    args.runs.mkdir(parents=True, exist_ok=True)
    errors: dict[str, str | None] = {}
    if not args.write_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            for member, error in pool.map(lambda m: run_twin(m, args.runs), args.members):
                errors[member] = error
                print(f"{member}: {'ok' if error is None else error}", flush=True)
    write_table(args.runs, errors)


if __name__ == "__main__":
    main()
