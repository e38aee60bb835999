"""Distillation over several tasks and seeds: mean +- std of teacher score, student score and retention per method.

Each (task, seed) is one ordinary distillation stage (flows/distill_flow.py's `run_distill_stage`, so a finished
pair is not trained again when config and inputs are unchanged) in RUN/<task>/seed-<seed>/, with the config's
teacher and shard paths resolved against RUN. The seed is the stage's `seed`: it seeds the teacher's fine-tuning,
the students' general and task distillation, TinyBERT's initialisation and augmentation. Writes RUN/summary.json
and prints two markdown tables (mean +- std per method, then per seed); retention = student / teacher score of the
same seed (mean +- sample std over seeds).

    python benchmarks/distill_seeds.py --config configs/distill-minilm.yaml --run-dir runs/distill-minilm \\
        --tasks movie_sentiment trec_coarse --seeds 1 2 3 [--set tinybert.general_steps=0]
    python benchmarks/distill_seeds.py ... --only-summary     # the table of the pairs already run, training nothing
    python benchmarks/distill_seeds.py ... --only-summary --keep-pairs benchmarks/studies/NAME   # ... and keep them
    python benchmarks/distill_seeds.py ... --only-summary --as-of RUN/summary.json   # ... labelled with the code
                                                              # that trained them (chunks run in parallel)
    python benchmarks/distill_seeds.py --merge RUN_A/summary.json RUN_B/summary.json --out benchmarks/distill_minilm.json

--merge joins the summaries of runs that used different overrides per task (e.g. one task at its full train split,
another at a subset): one document with every task, each with the fine-tuning settings it ran at; the summaries must
come from one clean commit. With --keep EARLIER.json (an earlier merged document), its tasks that the new summaries
do not measure again are carried over, each marked with the commit and date it was measured at (`measured`), so a
rerun of one task does not silently re-date the others:

    python benchmarks/distill_seeds.py --merge runs/distill-movie-full/summary.json \
        --keep benchmarks/distill_minilm.json --out benchmarks/distill_minilm.json

Run pairs in chunks (e.g. one task per invocation) on a shared machine: finished pairs are reused. Each task of
summary.json names the code that trained each seed (`measured_seeds`, read from the pairs' stage stamps), so a study
finished over several sessions is quoted with every seed's commit (scripts/readme_quality.py), not the commit that
summarised it.

Every pair that trains also gets RUN/<task>/seed-<seed>/phases.json: wall and process CPU seconds of each phase (the
teacher import, each fine-tuning, each distillation loop, the augmentation, the speed passes, the rest), so a bigger
run can be sized from a small one before it starts; on a shared machine the CPU seconds are the figure that carries
over, the wall seconds depend on the load.

A study spread over sessions outlives the machine that ran its first seeds only if its results do: RUN holds
gigabytes (teacher copies, caches) and is not committed. --keep-pairs DIR copies each finished pair's small files
(results.json, report.md, metrics.jsonl with the loss lines, phases.json and the stage stamp that names the code that
trained it: ~45 kB a pair) into DIR/<task>/seed-<seed>/, the layout of RUN, so the summary of every seed kept so far is

    python benchmarks/distill_seeds.py --config ... --run-dir benchmarks/studies/NAME --tasks ... --seeds 1 2 3 \
        --set ... --only-summary

from a fresh clone, whatever machine trained each seed (a seed's commit comes from its kept stamp).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bertfactory  # noqa: E402,F401  before torch: the pinned CPU kernels (bertfactory/cpu_kernels.py)
from bertfactory import storage  # noqa: E402
import torch  # noqa: E402


REPO = Path(__file__).resolve().parents[1]


def portable_overrides(overrides: list[str], repo: Path = REPO) -> list[str]:
    """`key=/abs/path` inside this checkout -> `key=path` relative to it: a merged document is committed and quoted
    from other checkouts (scripts/readme_quality.py names the shards), where the measuring machine's absolute path
    would read otherwise. Other values as they are."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        path = Path(value)
        if sep and path.is_absolute() and path.is_relative_to(repo):
            item = f"{key}={path.relative_to(repo).as_posix()}"
        out.append(item)
    return out


def _under(base: Path, location: str | None) -> str | None:
    """A RUN-relative cache location resolved against the study's RUN (a URL or null as it is)."""
    return str(base / location) if location is not None and not storage.is_url(location) else location


class PhaseTimer:
    """Times the stage's phases by wrapping the functions distillation.stage calls them through (its module
    attributes), so the stage itself stays free of benchmark bookkeeping. `phases` lists {phase, wall_s, cpu_s}."""

    def __init__(self) -> None:
        self.phases: list[dict] = []
        self._originals: list[tuple[object, str, object]] = []

    def wrap(self, module, name: str, label) -> None:
        original = getattr(module, name)
        self._originals.append((module, name, original))

        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.phases.append({"phase": label(*args, **kwargs), "wall_s": round(time.perf_counter() - wall, 2),
                                    "cpu_s": round(time.process_time() - cpu, 2)})

        setattr(module, name, timed)

    def restore(self) -> None:
        """Put the wrapped functions back."""
        for module, name, original in reversed(self._originals):
            setattr(module, name, original)
        self._originals.clear()

    @classmethod
    def around_stage(cls) -> "PhaseTimer":
        import distillation.stage as stage

        timer = cls()
        timer.wrap(stage, "load_teacher", lambda *a, **k: "teacher import")
        timer.wrap(stage, "_finetune", lambda encoder, task, cfg, pad_id, name: f"fine-tune {name}")
        timer.wrap(stage, "run_distillation", lambda model, objective, batches, steps, *a, **k:
                   f"{type(objective).__name__} on {type(batches).__name__}, {steps} steps")
        timer.wrap(stage, "augment_features", lambda *a, **k: "augmentation")
        timer.wrap(stage, "inference_seconds", lambda *a, **k: "speed passes")
        return timer

    def report(self, wall_s: float, cpu_s: float) -> dict:
        """The phases plus the remainder (task preparation, test scoring) and the totals."""
        rest = {"phase": "rest (task preparation, scoring)",
                "wall_s": round(wall_s - sum(p["wall_s"] for p in self.phases), 2),
                "cpu_s": round(cpu_s - sum(p["cpu_s"] for p in self.phases), 2)}
        return {"phases": [*self.phases, rest], "wall_s": round(wall_s, 2), "cpu_s": round(cpu_s, 2)}


def mean_std(values: list[float]) -> dict:
    """Mean and sample standard deviation (0 for a single value) of `values`."""
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


# a pair's files that say what it measured and which code measured it, relative to RUN/<task>/seed-<seed>/ (the
# models, teacher copies and TensorBoard files stay behind: they are what makes RUN large)
KEPT_PAIR_FILES = ("distill/results.json", "distill/report.md", "distill/metrics.jsonl", "phases.json",
                   ".bertfactory/distill.json")


def keep_pair(pair_dir: Path, kept_dir: Path) -> list[str]:
    """Copy a finished pair's KEPT_PAIR_FILES into `kept_dir` (same relative paths; each written atomically, the
    stamp last, so a kept pair with a stamp is complete). -> the files copied. A pair without results.json is not
    finished: refused (ValueError), nothing copied."""
    from bertfactory.io import atomic_write_bytes

    pair_dir, kept_dir = Path(pair_dir), Path(kept_dir)
    if not (pair_dir / KEPT_PAIR_FILES[0]).is_file():
        raise ValueError(f"{pair_dir}: no {KEPT_PAIR_FILES[0]}, the pair has not finished; nothing kept")
    copied = []
    for name in KEPT_PAIR_FILES:  # the stamp is last in the tuple: written after the results it vouches for
        if (pair_dir / name).is_file():
            atomic_write_bytes(kept_dir / name, (pair_dir / name).read_bytes())
            copied.append(name)
    return copied


def pair_provenance(pair_dir: Path) -> dict | None:
    """The code that trained a pair, from its stage stamp (flows/stamps.py): {"commit" (short), "dirty", "date"
    (when it finished)}; None without a stamp."""
    import json

    stamp = Path(pair_dir) / ".bertfactory" / "distill.json"
    if not stamp.is_file():
        return None
    doc = json.loads(stamp.read_text(encoding="utf-8"))
    code = doc.get("code") or {}
    return {"commit": (code.get("commit") or "")[:7] or None, "dirty": code.get("dirty"), "date": doc.get("finished_at")}


def seeds_measured(by_seed: dict[int, dict | None]) -> list[dict] | None:
    """Seeds grouped by the code that trained them, [{"seeds", "commit", "dirty", "date" (the group's last)}], so a
    study whose seeds ran at several commits (one session each) names each; None when a pair has no stamp."""
    if not by_seed or any(p is None for p in by_seed.values()):
        return None
    groups: dict[tuple, dict] = {}
    for seed in sorted(by_seed):
        p = by_seed[seed]
        group = groups.setdefault((p["commit"], p["dirty"]), {"seeds": [], "commit": p["commit"], "dirty": p["dirty"],
                                                              "date": p["date"]})
        group["seeds"].append(seed)
        group["date"] = max(group["date"] or "", p["date"] or "") or None
    return sorted(groups.values(), key=lambda g: g["seeds"][0])


def summarise(results: dict[str, dict[int, dict]]) -> dict:
    """{task: {seed: results.json}} -> {task: {method: {teacher, student, retention, direct, speedup: mean_std}}}."""
    summary: dict = {}
    for task, by_seed in results.items():
        methods: dict = {}
        for name in sorted({m for r in by_seed.values() for m in r["methods"]}):
            rows = [r["methods"][name] for r in by_seed.values() if name in r["methods"]]
            methods[name] = {
                "teacher": mean_std([row["teacher"]["score"] for row in rows]),
                "student": mean_std([row["student"]["score"] for row in rows]),
                "retention": mean_std([row["retention"] for row in rows if row["retention"] is not None]),
                "direct": mean_std([row["student_direct"]["score"] for row in rows]),
                "speedup": mean_std([row["speedup"] for row in rows if row["speedup"] is not None]),
                "seeds": sorted(seed for seed, r in by_seed.items() if name in r["methods"]),
            }
            # TinyBERT's in-run ablations (no_gd, no_da, no_td) and the general distillation each pair started from
            ablations = sorted({k for row in rows for k in row.get("ablations") or {}})
            if ablations:
                methods[name]["ablations"] = {k: mean_std([row["ablations"][k] for row in rows
                                                           if k in (row.get("ablations") or {})]) for k in ablations}
            general = [row["general_distillation"] for row in rows if row.get("general_distillation")]
            if general:
                methods[name]["general_distillation"] = {
                    "steps": sorted({g["steps"] for g in general}), "entries": sorted({g["key"] for g in general}),
                    "reused": sum(bool(g["reused"]) for g in general)}
        majority = {r["majority_accuracy"] for r in by_seed.values()}
        summary[task] = {"methods": methods, "majority_accuracy": sorted(majority)}
    return summary


def render(summary: dict) -> str:
    def cell(stat: dict, percent: bool = False) -> str:
        if percent:
            return f"{stat['mean']:.1%} ± {stat['std']:.1%}"
        return f"{stat['mean']:.4f} ± {stat['std']:.4f}"

    lines = ["| task | method | seeds | teacher | student | retention | student without task/general distillation "
             "| speed-up (in run) |", "|---|---|---|---|---|---|---|---|"]
    for task, entry in summary.items():
        for name, m in entry["methods"].items():
            lines.append(f"| {task} | {name} | {len(m['seeds'])} | {cell(m['teacher'])} | {cell(m['student'])} | "
                         f"{cell(m['retention'], True)} | {cell(m['direct'])} | {m['speedup']['mean']:.2f}× |")
    return "\n".join(lines)


ABLATION_NAMES = {"no_gd": "without general distillation", "no_da": "without augmentation"}


def render_seeds(results: dict[str, dict[int, dict]]) -> str:
    """The per-seed table ({task: {seed: results.json}}): each method's test score with its retention against the
    same seed's teacher, the same student fine-tuned directly on the task where that is another model (TinyBERT: without
    task distillation; DistilBERT with general distillation: without it), and the majority class."""
    methods = sorted({m for by_seed in results.values() for r in by_seed.values() for m in r["methods"]})
    # a method whose student *is* its direct fine-tuning (DistilBERT's layer copy + fine-tuning) gets no second column
    rows_of = {m: [r["methods"][m] for by_seed in results.values() for r in by_seed.values() if m in r["methods"]]
               for m in methods}
    direct = [m for m in methods
              if any(row["student_direct"]["score"] != row["student"]["score"] for row in rows_of[m])]
    # TinyBERT's other in-run ablations (no_td is the direct column)
    ablated = [(m, k) for m in methods for k in sorted({k for row in rows_of[m] for k in row.get("ablations") or {}})
               if k != "no_td"]
    head = ["task", "seed", "teacher", *[f"{m} (retention)" for m in methods],
            *[f"{m} fine-tuned directly" for m in direct], *[f"{m} {ABLATION_NAMES.get(k, k)}" for m, k in ablated],
            "majority class"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task, by_seed in results.items():
        for seed, r in sorted(by_seed.items()):
            rows = r["methods"]
            teacher = next(iter(rows.values()))["teacher"]["score"]
            cells = [task, str(seed), f"{teacher:.3f}"]
            cells += [f"{rows[m]['student']['score']:.3f} ({rows[m]['retention']:.1%})" if m in rows else "—"
                      for m in methods]
            cells += [f"{rows[m]['student_direct']['score']:.3f}" if m in rows else "—" for m in direct]
            cells += [f"{rows[m]['ablations'][k]:.3f}" if k in (rows.get(m, {}).get("ablations") or {}) else "—"
                      for m, k in ablated]
            cells.append(f"{r['majority_accuracy']:.3f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merge(paths: list[Path], keep: Path | None = None) -> dict:
    """Several RUN/summary.json -> one document: the tasks of all, each with the overrides and the fine-tuning
    settings (train examples, max length, epochs, rate) it ran at, and `measured` (commit, date, dirty). Refused
    (ValueError) when the summaries come from different commits, from a dirty tree, or repeat a task. `keep`: an
    earlier merged document whose other tasks are carried over with their own `measured`, in its order."""
    import json

    from distillation.stage import load_distill_config

    docs = [(path, json.loads(Path(path).read_text(encoding="utf-8"))) for path in paths]
    commits = {doc.get("commit") for _, doc in docs}
    if len(commits) != 1 or None in commits:
        raise ValueError(f"summaries from different or unrecorded commits: {sorted(map(str, commits))}")
    dirty = [str(path) for path, doc in docs if doc.get("dirty") is not False]
    if dirty:
        raise ValueError(f"measured from a tree with uncommitted changes: {', '.join(dirty)}")
    def ran_at(doc: dict) -> dict:  # the overrides and fine-tuning settings a summary's tasks ran at
        ft = load_distill_config(doc["config"], doc["overrides"]).finetune
        return {"overrides": portable_overrides(doc["overrides"]),
                "finetune": {"max_train_examples": ft.max_train_examples, "max_seq_len": ft.max_seq_len,
                             "epochs": ft.epochs, "learning_rate": ft.learning_rate}}

    tasks: dict = {}
    for path, doc in docs:
        settings = ran_at(doc)
        for task, entry in doc["tasks"].items():
            if task in tasks:
                raise ValueError(f"{path}: task {task} is in two summaries")
            tasks[task] = {**entry, **settings, "measured": {key: doc[key] for key in ("commit", "date", "dirty")}}
    configs = sorted({doc["config"] for _, doc in docs})
    merged_from = [str(path) for path, _ in docs]
    if keep is not None:
        earlier = json.loads(Path(keep).read_text(encoding="utf-8"))
        if earlier.get("dirty") is not False or not earlier.get("commit"):
            raise ValueError(f"--keep {keep}: not a document of one clean commit")
        if {c.strip() for c in earlier["config"].split(",")} != set(configs):
            raise ValueError(f"--keep {keep}: measured with {earlier['config']}, not {', '.join(configs)}")
        when = {key: earlier[key] for key in ("commit", "date", "dirty")}
        # an earlier plain summary (not merged) holds its overrides once, for all its tasks: each carried task gets
        # them, so that it still says what it ran at (the shards its general students distilled on, its length)
        settings = ran_at(earlier) if "overrides" in earlier else {}
        kept = [task for task in earlier["tasks"] if task not in tasks]
        # the earlier order, each task either measured again (the new entry) or carried with when it was measured
        tasks = {**{task: tasks.pop(task) if task in tasks
                    else {**settings, **entry, "measured": entry.get("measured") or when}
                    for task, entry in earlier["tasks"].items()}, **tasks}
        merged_from.append(f"{keep} (kept: {', '.join(kept) or 'none'})")
    return {"commit": commits.pop(), "dirty": False, "date": max(doc["date"] for _, doc in docs),
            "config": ", ".join(configs), "merged_from": merged_from, "tasks": tasks}


def main(argv: list[str] | None = None) -> int:
    from bertfactory.io import atomic_write_json
    from bertfactory.provenance import result_provenance
    from distillation.stage import load_distill_config
    from flows.distill_flow import run_distill_stage
    import json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="distill YAML (e.g. configs/distill-minilm.yaml)")
    parser.add_argument("--run-dir", help="base run directory: teacher/shards paths resolve here")
    parser.add_argument("--tasks", nargs="+")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--only-summary", action="store_true", help="summarise the pairs already run, train nothing")
    parser.add_argument("--as-of", type=Path, metavar="SUMMARY", help="with --only-summary: the summary.json that "
                        "the invocations which trained these pairs wrote (each overwrites it with its own pairs): "
                        "its commit, dirty flag and date label the new summary instead of this checkout's, after "
                        "checking it has the same config and --set list")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="SUMMARY", help="join these summary.json files "
                        "(one clean commit, disjoint tasks) into --out, training nothing")
    parser.add_argument("--out", type=Path, help="with --merge: the merged document")
    parser.add_argument("--keep", type=Path, metavar="EARLIER", help="with --merge: carry over the tasks of this "
                        "earlier merged document that the summaries do not measure again, each with its commit")
    parser.add_argument("--keep-pairs", type=Path, metavar="DIR", help="copy each finished pair's results, loss "
                        "lines, phases and stage stamp into DIR/<task>/seed-<seed>/ (e.g. benchmarks/studies/NAME, "
                        "committed), so the study's summary can be made again from DIR on another machine")
    args = parser.parse_args(argv)
    if args.merge:
        if args.out is None:
            parser.error("--merge needs --out")
        merged = merge(args.merge, args.keep)
        atomic_write_json(args.out, merged)
        print(render(merged["tasks"]))
        return 0
    missing = [flag for flag, value in (("--config", args.config), ("--run-dir", args.run_dir),
                                        ("--tasks", args.tasks), ("--seeds", args.seeds)) if not value]
    if missing:
        parser.error(f"{', '.join(missing)} required (or --merge)")
    # force: importing flows (Prefect) installed its own root handler, and the fine-tunings' epoch lines did not show
    if not args.only_summary:  # process-wide settings only for a run that trains (--only-summary reads files)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                            force=True)
        torch.set_num_threads(args.threads)
    base = Path(args.run_dir).resolve()
    provenance = result_provenance()  # at the start: the code the pairs below run
    if args.as_of is not None:
        # pairs trained in chunks, in parallel invocations, then summarised here: the code that trained them is the
        # chunks' (recorded when they started), not this checkout's
        if not args.only_summary:
            parser.error("--as-of goes with --only-summary: a run that trains records its own code")
        earlier = json.loads(args.as_of.read_text(encoding="utf-8"))
        if earlier.get("config") != args.config or earlier.get("overrides") != args.overrides:
            parser.error(f"--as-of {args.as_of}: its config and --set list ({earlier.get('config')}, "
                         f"{earlier.get('overrides')}) are not this invocation's")
        provenance = {key: earlier[key] for key in ("commit", "dirty", "date")}
    timer = None if args.only_summary else PhaseTimer.around_stage()
    results: dict[str, dict[int, dict]] = {}
    trained_by: dict[str, dict[int, dict | None]] = {}
    for task in args.tasks:
        for seed in args.seeds:
            cfg = load_distill_config(args.config, [*args.overrides, f"task={task}", f"seed={seed}"])
            # the per-pair directory sits two levels below RUN: resolve RUN-relative paths once, here
            teacher = cfg.teacher.model_copy(update={"checkpoint": str(base / cfg.teacher.checkpoint)}
                                             if cfg.teacher.checkpoint is not None else {})
            # one general-distillation cache for the whole study: the tasks (and, with general_seed pinned, the
            # seeds) start from the same general students; one teacher cache: a study rerun with other student
            # settings fine-tunes no teacher again
            cfg = cfg.model_copy(update={"teacher": teacher, "shards": str(base / cfg.shards),
                                         "general_cache": _under(base, cfg.general_cache),
                                         "teacher_cache": _under(base, cfg.teacher_cache)})
            pair_dir = base / task / f"seed-{seed}"
            if args.only_summary:
                path = pair_dir / "distill" / "results.json"
                if path.is_file():
                    results.setdefault(task, {})[seed] = json.loads(path.read_text(encoding="utf-8"))
                    trained_by.setdefault(task, {})[seed] = pair_provenance(pair_dir)
                    kept_dir = None if args.keep_pairs is None else args.keep_pairs / task / f"seed-{seed}"
                    if kept_dir is not None and kept_dir.resolve() != pair_dir.resolve():  # pairs run before
                        print(f"kept {', '.join(keep_pair(pair_dir, kept_dir))} in {kept_dir}", flush=True)
                continue
            timer.phases.clear()
            started, cpu_started = time.perf_counter(), time.process_time()
            outcome = run_distill_stage(cfg, pair_dir)
            wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
            print(f"{task} seed {seed}: {outcome['status']} in {wall_s:.0f} s wall, {cpu_s:.0f} s CPU", flush=True)
            if timer.phases:  # a pair reused from an earlier run trained nothing: keep its phases.json
                phases = timer.report(wall_s, cpu_s)
                atomic_write_json(pair_dir / "phases.json", phases)
                for p in phases["phases"]:
                    print(f"  {p['phase']}: {p['wall_s']:.1f} s wall, {p['cpu_s']:.1f} s CPU", flush=True)
            results.setdefault(task, {})[seed] = outcome["summary"]
            trained_by.setdefault(task, {})[seed] = pair_provenance(pair_dir)
            if args.keep_pairs is not None:
                kept = keep_pair(pair_dir, args.keep_pairs / task / f"seed-{seed}")
                print(f"  kept {', '.join(kept)} in {args.keep_pairs / task / f'seed-{seed}'}", flush=True)
    summary = summarise(results)
    for task, entry in summary.items():  # each seed's own code (a pair reused from an earlier session keeps its)
        if (groups := seeds_measured(trained_by.get(task, {}))) is not None:
            entry["measured_seeds"] = groups
    # commit, dirty, date: what scripts/readme_quality.py needs to quote this summary (benchmarks/distill_minilm.json)
    atomic_write_json(base / "summary.json", {**provenance, "config": args.config, "overrides": args.overrides,
                                              "tasks": summary})
    print(render(summary))
    print()
    print(render_seeds(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
