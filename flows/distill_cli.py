"""The `bertfactory distill CONFIG --run-dir RUN` command (parser and handler; flows/cli.py wires them in) and the
Prefect flow `distill` that runs the same stage.

    bertfactory run configs/local.yaml --run-dir runs/local
    bertfactory distill configs/distill-local.yaml --run-dir runs/local [--set pkd.epochs=5] [--prefect]

Writes RUN/distill/results.json (per method: teacher.score, student.score, retention, teacher.params,
student.params, speedup, student_direct.score) and RUN/distill/report.md; see training/distill/stage.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow


def add_distill_parser(sub) -> None:
    text = "distil the run's teacher into DistilBERT / BERT-PKD / TinyBERT students -> RUN/distill"
    p = sub.add_parser("distill", help=text, description=text + ". Teacher and students are scored side by side on "
                       "a real task (results.json + report.md). See training/distill/.")
    p.add_argument("config", help="distill YAML, e.g. configs/distill-local.yaml")
    p.add_argument("--run-dir", required=True, help="run directory holding the teacher (pretrain/final) and shards")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set pkd.epochs=5 (repeatable; values are YAML)")
    p.add_argument("--prefect", action="store_true", help="run as the Prefect flow `distill` (default: directly)")


@flow(name="distill")
def distill_flow(config: str, run_dir: str, overrides: list[str] | None = None) -> dict:
    from training.distill.stage import load_distill_config, run_distill

    return run_distill(load_distill_config(config, overrides or []), Path(run_dir))


def cmd_distill(args) -> int:
    from training.distill.stage import load_distill_config, run_distill

    cfg = load_distill_config(args.config, args.overrides)  # validate before starting anything
    run_dir = Path(args.run_dir)
    if args.prefect:
        results = distill_flow(args.config, str(run_dir), args.overrides)
    else:
        results = run_distill(cfg, run_dir)
    print((run_dir / "distill" / "report.md").read_text(encoding="utf-8"))
    print(f"results: {run_dir / 'distill' / 'results.json'} ({len(results['methods'])} methods)")
    return 0
