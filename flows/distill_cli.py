"""The `bertfactory distill CONFIG --run-dir RUN` command (parser and handler; flows/cli.py wires them in); the
Prefect flow `distill` is in flows/distill_flow.py. Both skip a distillation whose config and inputs are unchanged.

    bertfactory run configs/local.yaml --run-dir runs/local
    bertfactory distill configs/distill-local.yaml --run-dir runs/local [--set pkd.epochs=5] [--prefect]

Writes RUN/distill/results.json (per method: teacher.score, student.score, retention, teacher.params,
student.params, speedup, student_direct.score) and RUN/distill/report.md; see distillation/stage.py.
"""

from __future__ import annotations

from pathlib import Path


def add_distill_parser(sub) -> None:
    text = "distil the run's teacher into DistilBERT / BERT-PKD / TinyBERT students -> RUN/distill"
    p = sub.add_parser("distill", help=text, description=text + ". Teacher and students are scored side by side on "
                       "a real task (results.json + report.md). CONFIG is a distillation config (kind `distill` in "
                       "`bertfactory recipes list`; its teacher, shards and task), not a pipeline recipe; a teacher "
                       "of our own is trained first with `bertfactory run RECIPE --run-dir RUN`. Unchanged config and "
                       "inputs: up to date, nothing retrained. See docs/distill.md.")
    p.add_argument("config", help="distill YAML or bundled config name, e.g. distill-local")
    p.add_argument("--run-dir", required=True, help="run directory holding the teacher (pretrain/final) and shards")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set pkd.epochs=5 (repeatable; values are YAML)")
    p.add_argument("--prefect", action="store_true", help="run as the Prefect flow `distill` (default: directly)")


def cmd_distill(args) -> int:
    from distillation.stage import load_distill_config

    from .distill_flow import distill, run_distill_stage
    from .lock import run_dir_lock

    from .recipe import resolve_recipe

    args.config = str(resolve_recipe(args.config))  # a bundled config's name (distill-local) works from anywhere
    cfg = load_distill_config(args.config, args.overrides)  # validate before starting anything
    from bertfactory.run_location import resolve_run_dir

    run_dir = resolve_run_dir(args.run_dir)  # a URL: checked, then its working copy (docs/cluster.md)
    if args.prefect:
        from .prefect_api import require_api

        require_api()
        result = distill(args.config, args.run_dir if run_dir != Path(args.run_dir) else str(run_dir), args.overrides)
    else:
        with run_dir_lock(run_dir, "distill"):
            result = run_distill_stage(cfg, run_dir)
    results = result["summary"]
    if result["status"] == "up-to-date":
        print(f"distill: up to date (key {result['key'][:12]}): config and inputs unchanged since the last run")
    print((run_dir / "distill" / "report.md").read_text(encoding="utf-8"))
    print(f"results: {run_dir / 'distill' / 'results.json'} ({len(results['methods'])} methods)")
    return 0
