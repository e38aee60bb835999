"""The README's demo excerpt, regenerated from a run directory of `make demo` (never typed by hand).

    .venv/bin/python scripts/readme_demo.py runs/local            # rewrite README.md's excerpt from that run
    .venv/bin/python scripts/readme_demo.py runs/local --check    # exit 1 when README.md's excerpt is not that run's

The excerpt is the block between the two `demo-excerpt` markers in README.md: one line saying which commit made the
run, when, on which machine (CPU model, vendor, cores, instruction sets: bertfactory/machine.py; timings and some
scores depend on it) and how long each stage took (from the stage stamps, RUN/.bertfactory/<stage>.json), then the
table that `bertfactory run` printed at its end (flows/summary.py, read from the same run directory). A run made
from a tree with uncommitted changes, or by code without a git checkout, is refused: its figures could not be traced
to a commit. `--check` is what a reviewer runs after `make demo` to see that the README quotes the current run.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bertfactory.machine import render as render_machine  # noqa: E402
from flows.stamps import recorded_run  # noqa: E402
from flows.summary import summary_table  # noqa: E402
import readme_block  # noqa: E402

BEGIN = "<!-- demo-excerpt:begin (scripts/readme_demo.py writes this block from a `make demo` run; do not edit) -->"
END = "<!-- demo-excerpt:end -->"
STAGES = ("preprocess", "pretrain", "evaluate")


class ExcerptError(Exception):
    """The run directory cannot give an excerpt (a stage not finished, no commit recorded), or README has no block."""


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def machine_note(stamps: dict[str, dict]) -> str:
    """The machine the stages ran on, one line from their stamps: its rendering when they agree, else each group of
    stages with its own ('preprocess on ...; pretrain, evaluate on ...'). A stamp of an earlier bertfactory records
    none: 'machine not recorded'."""
    groups: dict[str, list[str]] = {}
    for stage, stamp in stamps.items():
        groups.setdefault(render_machine(stamp.get("machine")), []).append(stage)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{', '.join(stages)} on {machine}" for machine, stages in groups.items())


def provenance_line(run_dir: Path) -> str:
    """'Measured by `make demo` at commit C on DATE (MACHINE): preprocess ..., pretrain ..., evaluate ...; ... in
    all.'"""
    stamps = {stage: recorded_run(run_dir, stage) for stage in STAGES}
    missing = [stage for stage, stamp in stamps.items() if not stamp]
    if missing:
        raise ExcerptError(f"{run_dir}: stage(s) {', '.join(missing)} have not finished there (no stamp in "
                           f"{run_dir / '.bertfactory'}); run `make demo` first")
    untimed = [stage for stage, stamp in stamps.items() if stamp.get("seconds") is None or not stamp.get("code")]
    if untimed:
        raise ExcerptError(f"{run_dir}: the stamps of {', '.join(untimed)} record no duration or code revision "
                           "(written by an older bertfactory); rerun `make demo` with --force")
    commits = {stage: stamp["code"].get("commit") for stage, stamp in stamps.items()}
    if len(set(commits.values())) != 1 or None in commits.values():
        raise ExcerptError(f"{run_dir}: the stages ran at different or unknown commits ({commits}); rerun the demo "
                           "with --force from one commit")
    dirty = [stage for stage, stamp in stamps.items() if stamp["code"].get("dirty")]
    if dirty:
        raise ExcerptError(f"{run_dir}: {', '.join(dirty)} ran from a tree with uncommitted changes; commit, then "
                           "rerun the demo with --force")
    commit = next(iter(commits.values()))
    finished = max(datetime.fromisoformat(stamp["finished_at"]) for stamp in stamps.values())
    times = ", ".join(f"{stage} {_duration(stamps[stage]['seconds'])}" for stage in STAGES)
    total = sum(stamps[stage]["seconds"] for stage in STAGES)
    return (f"Measured by `make demo` at commit {commit[:7]} on {finished:%Y-%m-%d} ({machine_note(stamps)}): "
            f"{times}; {_duration(total)} in all.")


def excerpt(run_dir: Path) -> str:
    """The whole block, markers included."""
    return "\n".join([BEGIN, provenance_line(run_dir), "", "```", summary_table(run_dir), "```", END])


def replace_block(readme: str, block: str) -> str:
    return readme_block.replace_block(readme, BEGIN, END, block, ExcerptError, "demo excerpt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, nargs="?", default=REPO / "runs" / "local",
                        help="the demo's run directory (default runs/local, where `make demo` writes)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the README differs")
    args = parser.parse_args(argv)
    try:
        readme = args.readme.read_text(encoding="utf-8")
        updated = replace_block(readme, excerpt(args.run_dir))
    except ExcerptError as err:
        print(f"readme_demo: {err}", file=sys.stderr)
        return 2
    return readme_block.write_or_check(
        args.readme, readme, updated, args.check, "readme_demo",
        stale=f"{args.readme}'s demo excerpt is not {args.run_dir}'s run; regenerate it with "
              f"`python scripts/readme_demo.py {args.run_dir}`",
        checked=f"{args.readme} quotes {args.run_dir}", written=f"{args.readme}'s demo excerpt is {args.run_dir}'s run")


if __name__ == "__main__":
    sys.exit(main())
