"""The README's "How good are the models?" paragraph, regenerated from result files (never typed by hand).

    .venv/bin/python scripts/readme_quality.py            # rewrite README.md's paragraph from the result files
    .venv/bin/python scripts/readme_quality.py --check    # exit 1 when README.md's paragraph is not theirs

The paragraph is the block between the two `quality` markers in README.md: one sentence or two per measurement of
issue 32 — fine-tuning parity with transformers' Trainer (benchmarks/finetune_parity.json, written by
benchmarks/finetune_parity.py at its full size), TAPT of MiniLM against un-adapted MiniLM (--tapt, default
benchmarks/tapt_minilm.json: a committed copy of benchmarks/tapt_minilm.py's RUNS/summary.json) and distillation
from the real MiniLM teacher (--distill, default benchmarks/distill_minilm.json: a committed copy of
benchmarks/distill_seeds.py's RUN/summary.json), and that distillation with general distillation on the corpus
against the same students without it (--general, default benchmarks/distill_minilm_general.json, the same kind of
file). A file that is absent gives "not measured yet" and the command that
measures it. A file that does not record its `commit`, its `date` and `dirty: false` is refused: its figures could
not be traced to a commit. The defaults are committed files, so tests/test_readme_quality.py checks the README
against them and a stale figure fails the tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import readme_block  # noqa: E402

BEGIN = "<!-- quality:begin (scripts/readme_quality.py writes this block from result files; do not edit) -->"
END = "<!-- quality:end -->"
PARITY = REPO / "benchmarks" / "finetune_parity.json"
TAPT = REPO / "benchmarks" / "tapt_minilm.json"
DISTILL = REPO / "benchmarks" / "distill_minilm.json"
GENERAL = REPO / "benchmarks" / "distill_minilm_general.json"
COMMANDS = {
    "parity": ".venv/bin/python benchmarks/finetune_parity.py",
    "tapt": ".venv/bin/python benchmarks/tapt_minilm.py",
    "distill": ".venv/bin/python benchmarks/distill_seeds.py --config configs/distill-minilm.yaml --run-dir "
               "runs/distill-minilm --tasks movie_sentiment trec_coarse --seeds 1 2 3",
    "general": ".venv/bin/python benchmarks/distill_seeds.py --config configs/distill-minilm.yaml --run-dir "
               "runs/distill-gd --tasks trec_coarse --seeds 1 2 3 --set general_seed=1 --set tinybert.ablations=true "
               "and the movie sentences' run (benchmarks/RESULTS.md, \"General distillation on the corpus\" and "
               "\"General distillation on the movie sentences\")",
}
TITLES = {"parity": "Fine-tuning parity with transformers' Trainer",
          "tapt": "Task-adaptive pretraining (TAPT) vs un-adapted MiniLM",
          "distill": "Distillation from the real MiniLM teacher",
          "general": "General distillation on the corpus"}


class QualityError(Exception):
    """A result file cannot be quoted (no clean commit recorded, unreadable), or README has no block."""


def provenance(doc: dict, path: Path) -> str:
    """'commit C, DATE' of a result document, or QualityError when it cannot be traced to a clean commit."""
    missing = [key for key in ("commit", "date", "dirty") if doc.get(key) in (None, "")]
    if missing:
        raise QualityError(f"{path}: records no {', '.join(missing)}; its writer must record the commit, the date "
                           "and whether the tree was dirty (as benchmarks/finetune_parity.py does), then rerun it")
    if doc["dirty"] is not False:
        changed = f": {', '.join(doc['changed'])}" if doc.get("changed") else ""
        raise QualityError(f"{path}: measured from a tree with uncommitted changes (commit {doc['commit']}{changed}); "
                           "commit, then rerun it")
    return f"commit {str(doc['commit'])[:7]}, {str(doc['date'])[:10]}"


def _ms(mean: float, std: float) -> str:
    return f"{mean:.3f} ± {std:.3f}"


def parity_sentences(doc: dict, path: Path) -> str:
    prov, hp = provenance(doc, path), doc["hyperparameters"]
    tasks = doc["tasks"]
    sizes = ", ".join(f"{t['files']['sizes']['train']:,} ({name})" for name, t in tasks.items())
    parts, ratios = [], []
    for name, t in tasks.items():
        s = t["summary"]
        verdict = "within 1 point" if s["within_1_point"] else "more than 1 point below"
        checks = "" if s.get("hyperparameters_equal", True) and s.get("selection_ok", True) else \
            "; checks failed, see the JSON"
        parts.append(f"{name} {_ms(s['ours']['accuracy_mean'], s['ours']['accuracy_std'])} ours vs "
                     f"{_ms(s['peer']['accuracy_mean'], s['peer']['accuracy_std'])} Trainer "
                     f"({100 * s['difference']:+.2f} points, {verdict}{checks})")
        ratios.append(f"{s['finetune_cpu_ratio']:.2f}x ({name})")
    return (f"**{TITLES['parity']}** (MiniLM imported with `bertfactory import-hf` vs its own "
            f"AutoModelForSequenceClassification + Trainer, same files and hyperparameters; training examples "
            f"{sizes}, {hp['epochs']} epochs, {len(doc['seeds'])} seeds, max length {hp['max_seq_len']}; {prov}, "
            f"`{doc.get('command') or COMMANDS['parity']}`): test accuracy, mean ± std over the seeds, "
            f"{'; '.join(parts)}. Fine-tuning CPU-seconds ours / Trainer: {', '.join(ratios)}.")


def tapt_sentences(doc: dict, path: Path) -> str:
    prov, size = provenance(doc, path), doc["size"]
    # a task carried from an earlier summary (tapt_minilm.py --keep) names the commit it was measured at
    per_task = {t["task"]: provenance(t["measured"], path) for t in doc["tasks"] if t.get("measured")}
    if per_task and len(set(per_task.values())) > 1:
        prov = "; ".join(f"{task} at {where}" for task, where in per_task.items())
    elif per_task:
        prov = next(iter(per_task.values()))
    parts = []
    for t in doc["tasks"]:
        def ms(xs: list[float]) -> str:
            return _ms(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)
        seen = {True: "detected", False: "not detected", None: "no spread to judge by"}[t.get("detected")]
        detectable = "" if t.get("detectable") is None else f" vs {t['detectable']:.3f} detectable by the seeds"
        parts.append(f"{t['task']} {ms(t['unadapted'])} un-adapted vs {ms(t['adapted'])} adapted "
                     f"({t['difference']:+.3f}{detectable}: {seen})")
    ft = size["finetune"]
    return (f"**{TITLES['tapt']}** (head warm-up {size['head_warmup']} steps, {size['epochs']:g} epochs of each task's "
            f"training text, then fine-tuning {ft['epochs']} epochs at max length {ft['max_seq_len']}, "
            f"{size['seeds']} seeds; {prov}): test accuracy {'; '.join(parts)}.")


STUDENTS = {"distilbert": "DistilBERT-style 3 layers", "pkd_skip": "BERT-PKD 3 layers", "pkd_last": "BERT-PKD 3 layers",
            "tinybert": "TinyBERT 4 x 312"}
GOAL_RETENTION, GOAL_SPEEDUP = 0.97, 1.8  # issue 32: >= 97 % of the teacher's test score at >= 1.8x its CPU speed


def _size(entry: dict) -> str:
    """' (all training examples, max length 32, 3 epochs)' from a merged summary's fine-tuning settings, else ''."""
    ft = entry.get("finetune")
    if not ft:
        return ""
    train = "all" if ft["max_train_examples"] is None else f"{ft['max_train_examples']:,}"
    return f" ({train} training examples, max length {ft['max_seq_len']}, {ft['epochs']} epochs)"


def _seeds_provenance(entry: dict, path: Path) -> str | None:
    """Where a task's figures come from: the code that trained each group of seeds (distill_seeds.py's
    `measured_seeds`, from the pairs' stamps), else the commit it was measured at (`measured`), else None."""
    groups = entry.get("measured_seeds")
    if groups:
        if len(groups) == 1:
            return f"at {provenance(groups[0], path)}"
        return " and ".join(f"seed{'s' if len(g['seeds']) > 1 else ''} {', '.join(map(str, g['seeds']))} at "
                            f"{provenance(g, path)}" for g in groups)
    return f"at {provenance(entry['measured'], path)}" if entry.get("measured") else None


def _tasks_provenance(doc: dict, path: Path) -> str:
    """The document's commit, or per task where a task was carried from an earlier document (distill_seeds.py
    --merge --keep) or its seeds ran at other commits: each names the commit(s) it was measured at."""
    prov = provenance(doc, path)
    per_task = {task: where for task, entry in doc["tasks"].items()
                if (where := _seeds_provenance(entry, path)) is not None}
    if len(set(per_task.values())) > 1 or any(where != f"at {prov}" for where in per_task.values()):
        prov = "; ".join(f"{task} {where}" for task, where in per_task.items())
    return prov


def distill_sentences(doc: dict, path: Path) -> str:
    prov, parts, met = _tasks_provenance(doc, path), [], []
    for task, entry in doc["tasks"].items():
        methods = entry["methods"]
        teacher = next(iter(methods.values()))["teacher"]
        students = []
        for name, m in methods.items():
            label = STUDENTS.get(name, name)
            students.append(f"{label} {_ms(m['student']['mean'], m['student']['std'])} ({m['retention']['mean']:.1%} "
                            f"retained, {m['speedup']['mean']:.1f}x faster)")
            if m["retention"]["mean"] >= GOAL_RETENTION and m["speedup"]["mean"] >= GOAL_SPEEDUP:
                met.append(f"{label} on {task}")
        seeds = max(len(m["seeds"]) for m in methods.values())
        parts.append(f"{task}{_size(entry)} teacher {_ms(teacher['mean'], teacher['std'])}, {', '.join(students)} "
                     f"over {seeds} seeds")
    verdict = f"met by {', '.join(met)}" if met else "not met"
    goal = f"Goal (>= {GOAL_RETENTION:.0%} retained at >= {GOAL_SPEEDUP}x): {verdict}."
    return f"**{TITLES['distill']}** ({doc.get('config', '?')}; {prov}): test score {'; '.join(parts)}. {goal}"


def _override(doc: dict, key: str) -> str | None:
    values = [o.split("=", 1)[1] for o in doc.get("overrides", []) if o.split("=", 1)[0] == key]
    return values[-1] if values else None


def _shards(doc: dict) -> str:
    """'shards `PATH`' the general students distilled on, per task when the tasks' runs named different ones (a merged
    document keeps each task's overrides); a path inside this repository is shown relative to it."""
    def shown(value: str | None) -> str:
        if value is None:
            return "the config's shards"
        path = Path(value)
        return f"`{path.relative_to(REPO) if path.is_absolute() and path.is_relative_to(REPO) else value}`"

    per_task = {task: shown(_override(entry, "shards") if entry.get("overrides") else _override(doc, "shards"))
                for task, entry in doc["tasks"].items()}
    if len(set(per_task.values())) <= 1:
        return f"shards {next(iter(per_task.values()), shown(_override(doc, 'shards')))}"
    return "shards " + ", ".join(f"{where} ({task})" for task, where in per_task.items())


def _same_seeds(stats: dict, seeds: list[int], source: list[int]) -> dict | None:
    """`stats` (mean, std, values over the seeds `source`) restricted to `seeds`; None unless it has all of them."""
    values = stats.get("values")
    if not values or len(values) != len(source) or not set(seeds) <= set(source):
        return None
    kept = [values[source.index(seed)] for seed in seeds]
    return {"mean": statistics.fmean(kept), "std": statistics.stdev(kept) if len(kept) > 1 else 0.0}


def general_sentences(doc: dict, path: Path, without_doc: dict | None = None) -> str:
    """With vs without general distillation, per task and student: TinyBERT's in-run `no_gd` ablation, else the
    same student in `without_doc` (the distillation run without general distillation: the --distill file) over the
    same seeds; the DistilBERT-style student's direct twin (the same layer copy fine-tuned without general
    distillation)."""
    prov, parts = _tasks_provenance(doc, path), []
    for task, entry in doc["tasks"].items():
        for name, m in entry["methods"].items():
            general = m.get("general_distillation")
            if not general:
                continue
            without, source = (m.get("ablations") or {}).get("no_gd"), ""
            if without is None and name.startswith("distilbert"):
                without = m["direct"]
            if without is None and without_doc is not None:
                other = ((without_doc.get("tasks") or {}).get(task) or {}).get("methods", {}).get(name)
                if other and not other.get("general_distillation"):
                    without = _same_seeds(other["student"], m["seeds"], other["seeds"])
                    source = " in the run without general distillation, same seeds"
            if without is None:
                continue
            steps = "/".join(str(s) for s in general["steps"])
            diff = m["student"]["mean"] - without["mean"]
            parts.append(f"{STUDENTS.get(name, name)} on {task} {_ms(m['student']['mean'], m['student']['std'])} after "
                         f"{steps} general steps vs {_ms(without['mean'], without['std'])} without{source} "
                         f"({diff:+.3f}; "
                         f"{m['retention']['mean']:.1%} of the teacher retained, {len(m['seeds'])} seeds, "
                         f"{len(general['entries'])} general student)")
    return (f"**{TITLES['general']}** ({_shards(doc)}, one general student per student shape shared by the seeds; "
            f"{prov}): test score {'; '.join(parts) or 'no student with general distillation in the file'}.")


def block(parity: Path = PARITY, tapt: Path = TAPT, distill: Path = DISTILL, general: Path = GENERAL) -> str:
    """The whole block, markers included: one paragraph, a sentence or two per source."""
    sentences = []
    def general_against_distill(doc: dict, path: Path) -> str:  # compared with the run without general distillation
        without = json.loads(distill.read_text(encoding="utf-8")) if distill.is_file() else None
        return general_sentences(doc, path, without)

    for key, path, render in (("parity", parity, parity_sentences), ("tapt", tapt, tapt_sentences),
                              ("distill", distill, distill_sentences), ("general", general, general_against_distill)):
        if not path.is_file():
            sentences.append(f"**{TITLES[key]}**: not measured yet: `{COMMANDS[key]}`.")
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            sentences.append(render(doc, path))
        except (ValueError, KeyError, TypeError) as err:
            raise QualityError(f"{path}: not a result file of {COMMANDS[key].split()[1]} ({err!r})") from err
    return "\n".join([BEGIN, "\n".join(sentences), END])


def replace_block(readme: str, text: str) -> str:
    return readme_block.replace_block(readme, BEGIN, END, text, QualityError, "quality")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parity", type=Path, default=PARITY, help="benchmarks/finetune_parity.py's results JSON")
    parser.add_argument("--tapt", type=Path, default=TAPT, help="benchmarks/tapt_minilm.py's summary.json")
    parser.add_argument("--distill", type=Path, default=DISTILL, help="benchmarks/distill_seeds.py's summary.json")
    parser.add_argument("--general", type=Path, default=GENERAL,
                        help="benchmarks/distill_seeds.py's summary.json of a run with general distillation")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the README differs")
    args = parser.parse_args(argv)
    try:
        readme = args.readme.read_text(encoding="utf-8")
        updated = replace_block(readme, block(args.parity, args.tapt, args.distill, args.general))
    except QualityError as err:
        print(f"readme_quality: {err}", file=sys.stderr)
        return 2
    return readme_block.write_or_check(
        args.readme, readme, updated, args.check, "readme_quality",
        stale=f"{args.readme}'s quality paragraph is not the result files'; regenerate it with "
              "`python scripts/readme_quality.py`",
        checked=f"{args.readme} quotes the result files",
        written=f"{args.readme}'s quality paragraph is the result files'")


if __name__ == "__main__":
    sys.exit(main())
