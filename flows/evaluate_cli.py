"""The `bertfactory evaluate` and `bertfactory report` commands (parsers and handlers; flows/cli.py wires them in).

    bertfactory evaluate configs/local.yaml --run-dir runs/local          # the recipe's evaluate stage
    bertfactory evaluate runs/local                                        # a run directory's pretrain/final
    bertfactory evaluate runs/local/pretrain/checkpoints/step-400 --run-dir runs/step400-eval \\
        --task trec_coarse --task-file data/reviews.tsv --task-type classification \\
        --text-column sentence --label-column label --set evaluate.finetune.num_seeds=1
    bertfactory evaluate runs/local --task movie_sentiment --transfer-file data/de.tsv --transfer-language de \
        --compare-checkpoint models/minilm                 # zero-shot transfer; an imported HF model beside ours
    bertfactory report runs/local runs/other [--out comparison.md]

CHECKPOINT_OR_CONFIG is a recipe YAML (the evaluate stage of that recipe, through Prefect unless --no-prefect), a
run directory (its pretrain/final) or a model directory (config.json + model.safetensors). Without --run-dir a
model directory inside a run (RUN/pretrain/<name>, RUN/<stage>/checkpoints/<name>) is evaluated into RUN, on disk or
by URL (s3://b/runs/x/pretrain/final: into the run location s3://b/runs/x, docs/cluster.md); any other into
runs/eval-<name> here (a URL's says so in one line: its results are not in the bucket). For a checkpoint the
recipe is the defaults of `evaluate` (paper scale: every example, 5 seeds — use --set to shrink it), the stage
runs without Prefect, and the held-out intrinsic and objective scores are computed when the run directory has
shards (without them they are skipped, said in one line, and the tasks run). `--task NAME`
(repeatable) and `--task-file PATH` choose the tasks, replacing the recipe's list; the recipe's settings that name a
task no longer listed go with it, each said in one line (its feature-based comparison, e.g. on wnut16 in local and
demo; its cross-lingual targets of that task; a tapt recipe's tapt.tasks). The file's layout options are
those of evaluation.tasks.registry.load_task_file (docs/tasks.md). On a checkpoint, a --task-file's task tries
three learning rates scaled to the model's hidden size (evaluate.finetune.size_scaled_grid) unless --set gives one.
Separate calls on one run directory add up: each task's results are kept (RUN/eval/tasks/) and merged into
results.json (evaluation/parts.py). `--transfer-file PATH --transfer-language CODE`
(repeatable, in pairs) are zero-shot cross-lingual targets of `--transfer-task` (default: the only task named with
--task / --task-file) and replace the recipe's `evaluate.crosslingual`; `--compare-checkpoint DIR` (repeatable)
replaces `evaluate.compare_checkpoints` (model directories fine-tuned beside the checkpoint).

Every form holds the lock of the run directory it writes, as `bertfactory run` does (flows/lock.py; on object
storage also the run location's lease): a second evaluate or run of that run directory meanwhile is refused in one
line naming the holder. A model directory evaluated into --run-dir elsewhere locks that run directory, not its own.
A run directory with no pretrain/final yet (shards only, or a pretraining stopped before its final model) is refused
in one line saying so, naming its newest pretrain/checkpoints/step-N when there is one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertfactory.errors import ConfigError
from bertfactory.names import check_name


def add_evaluate_parser(sub) -> None:
    from evaluation.tasks.base import TASK_TYPES

    text = "fine-tuning evaluation of a recipe's checkpoint, a run directory or a model directory -> RUN/eval"
    p = sub.add_parser("evaluate", help=text, description=text + ". A checkpoint is evaluated with the `evaluate` "
                       "defaults (paper scale) plus --set overrides, without Prefect; --task / --task-file replace "
                       "the recipe's tasks (and switch off its feature-based comparison when its task is not among "
                       "them). The held-out intrinsic and objective scores read RUN/shards: "
                       "in a run directory without them they are skipped, said in one line, and the tasks run. See "
                       "docs/results.md and docs/tasks.md.")
    p.add_argument("target", metavar="CHECKPOINT_OR_CONFIG",
                   help="recipe YAML, run directory (its pretrain/final) or model directory")
    p.add_argument("--run-dir", help="run directory (recipe: default runs/<recipe name>; run directory: itself; "
                   "model directory: default the run it is in (RUN/pretrain/<name>, on disk or by URL), else "
                   "runs/eval-<directory name>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set evaluate.finetune.epochs=2 (repeatable)")
    p.add_argument("--no-prefect", action="store_true", help="run the stage directly, without Prefect")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="NAME",
                   help="a built-in task by name (movie_sentiment, movie_valence, uci_sentences, trec_coarse, "
                   "trec_fine, wnut16); repeatable; replaces the recipe's tasks")
    p.add_argument("--task-file", metavar="PATH", action="append", help="a user task: TSV/CSV/JSONL, CoNLL/BIO or "
                   "SQuAD JSON (one per call, described by the options below; evaluations of one run add up)")
    p.add_argument("--task-type", choices=TASK_TYPES, help="the task file's type (required with --task-file)")
    p.add_argument("--task-name", help="name of the file's task in results.json (default: the file name's stem)")
    p.add_argument("--text-column", help="column holding the text")
    p.add_argument("--text-b-column", help="column holding the second text (pair tasks)")
    p.add_argument("--label-column", help="column holding the label / target")
    p.add_argument("--label-names", help="comma-separated label set in id order (default: as found, sorted)")
    p.add_argument("--language", default="en", help="ISO 639 code of the file's text (default en)")
    p.add_argument("--dev-file", metavar="PATH", help="a separate dev split")
    p.add_argument("--test-file", metavar="PATH", help="a separate test split")
    p.add_argument("--transfer-file", dest="transfer_files", action="append", default=[], metavar="PATH",
                   help="zero-shot cross-lingual target: another language's labelled file of the source task "
                   "(same task type and label set; every example is scored, none trained on); repeatable")
    p.add_argument("--transfer-language", dest="transfer_languages", action="append", default=[], metavar="CODE",
                   help="ISO 639 code of each --transfer-file, in the same order")
    p.add_argument("--transfer-task", metavar="NAME", help="the source task of the transfer files (default: the "
                   "one task given with --task / --task-file)")
    p.add_argument("--transfer-text-column", help="text column of the transfer files (default: text)")
    p.add_argument("--transfer-label-column", help="label column of the transfer files (default: label)")
    p.add_argument("--compare-checkpoint", dest="compare_checkpoints", action="append", default=[], metavar="DIR",
                   help="another model directory (e.g. from `bertfactory import-hf`) fine-tuned with the same settings "
                   "on the same splits and reported beside the checkpoint; repeatable")


def add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="compare the evaluation results of runs side by side",
                       description="Read RUN/eval/results.json of each run (validated) and print one markdown table "
                       "per task: every metric of the pretrained model (mean ± std over seeds) and the baselines' "
                       "primary metric, one column per run, named after its run directory (its last path components, as few as "
                       "keep the runs apart).")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or their eval directories / results.json)")
    p.add_argument("--out", metavar="FILE", help="write the markdown here instead of printing it")


def is_url(location: str) -> bool:
    from bertfactory.storage import is_url as url

    return url(location)


def _file_task_name(args: argparse.Namespace) -> str:
    """The --task-file's task name (it names files in the run directory: checked here, naming the option)."""
    if args.task_name is not None:
        return check_name(args.task_name, "--task-name")
    return check_name(Path(args.task_file).stem,
                      f"--task-file {args.task_file}: its stem (the default task name; set one with --task-name)")


def _learning_rate_given(overrides: list[str]) -> bool:
    """Whether a --set names a fine-tuning learning rate (or the grid choice) for every task or one of them."""
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    return any(k.startswith("evaluate.") and (".finetune.learning_rate" in k or ".finetune.size_scaled_grid" in k)
               for k in keys)


# the options that describe a --task-file (argparse dest, option)
_FILE_OPTIONS = (("task_type", "--task-type"), ("task_name", "--task-name"), ("text_column", "--text-column"),
                 ("text_b_column", "--text-b-column"), ("label_column", "--label-column"),
                 ("label_names", "--label-names"), ("dev_file", "--dev-file"), ("test_file", "--test-file"))


def task_overrides(args: argparse.Namespace, scaled_grid: bool = False) -> list[str]:
    """--task / --task-file options -> an `evaluate.tasks=...` override (JSON is YAML), or none. `scaled_grid`: the
    file's task tries learning rates scaled to the model's size (evaluate.finetune.size_scaled_grid, docs/tasks.md)
    unless a --set gives a learning rate."""
    if not args.task_file:
        given = [option for key, option in _FILE_OPTIONS if getattr(args, key)]
        given += ["--language"] if args.language != "en" else []
        if given:  # else left out without a word, and the recipe's (or every default) task evaluated instead
            raise ConfigError(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} a --task-file, and none "
                              "was given: add --task-file PATH (a built-in --task has its own layout and splits)")
    if not args.tasks and not args.task_file:
        return []
    tasks: dict[str, dict] = {check_name(name, "--task"): {} for name in args.tasks}
    if args.task_file:
        if not args.task_type:
            raise ConfigError("--task-file needs --task-type (one of the task types; see bertfactory evaluate -h)")
        entry = {"input": str(Path(args.task_file).resolve()), "task_type": args.task_type, "language": args.language}
        for key in ("text_column", "text_b_column", "label_column"):
            if getattr(args, key):
                entry[key] = getattr(args, key)
        if args.label_names:
            entry["label_names"] = [n.strip() for n in args.label_names.split(",") if n.strip()]
        for key, value in (("dev_input", args.dev_file), ("test_input", args.test_file)):
            if value:
                entry[key] = str(Path(value).resolve())
        if scaled_grid and not _learning_rate_given(args.overrides):
            entry["finetune"] = {"size_scaled_grid": True}
        tasks[_file_task_name(args)] = entry
    return [f"evaluate.tasks={json.dumps(tasks)}"]


def _named_by_set(overrides: list[str], key: str) -> bool:
    """Whether a --set names `key` (e.g. evaluate.feature_based) or a setting inside it."""
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    return any(k == key or k.startswith(key + ".") for k in keys)


def replaced_task_overrides(args: argparse.Namespace, recipe: Path | None) -> list[str]:
    """--task / --task-file replace the recipe's tasks (`recipe`: its file; None = the `evaluate` defaults of a
    checkpoint): the recipe's settings that name one of its tasks no longer listed are switched off with them, each
    said in one line, so that the replacement validates — the feature-based comparison (feature_based.task), the
    cross-lingual targets of such a task (crosslingual[].task; --transfer-file replaces them anyway) and a tapt
    recipe's tapt.tasks (read by its tapt stage only). What a --set of this call names itself is left as given: the
    config's validation then names the task that is not there."""
    if not args.tasks and not args.task_file:
        return []
    from bertfactory.config import apply_overrides, load_yaml
    from evaluation.config import FeatureBasedConfig

    data = apply_overrides(load_yaml(recipe) if recipe is not None else {}, list(args.overrides))
    evaluate = data.get("evaluate")
    evaluate = evaluate if isinstance(evaluate, dict) else {}
    tasks = set(args.tasks) | ({_file_task_name(args)} if args.task_file else set())
    named = ", ".join(sorted(tasks))
    out = []
    feature = evaluate.get("feature_based")
    feature = feature if isinstance(feature, dict) else {}
    fields = FeatureBasedConfig.model_fields
    enabled, task = feature.get("enabled", fields["enabled"].default), feature.get("task", fields["task"].default)
    if enabled is True and task not in tasks and not _named_by_set(args.overrides, "evaluate.feature_based"):
        out.append("evaluate.feature_based.enabled=false")
        print(f"evaluate: the recipe's feature-based comparison on {task!r} is switched off: --task/--task-file "
              f"replace its tasks with {named}, and {task!r} is not among them (add --task {task} to keep it)")
    targets = evaluate.get("crosslingual")
    if isinstance(targets, list) and targets and not args.transfer_files and \
            not _named_by_set(args.overrides, "evaluate.crosslingual"):
        kept = [t for t in targets if not isinstance(t, dict) or t.get("task") in tasks]
        dropped = sorted({str(t.get("task")) for t in targets if isinstance(t, dict) and t.get("task") not in tasks})
        if dropped:
            out.append(f"evaluate.crosslingual={json.dumps(kept)}")
            print(f"evaluate: the recipe's cross-lingual targets of {', '.join(dropped)} are left out: --task/"
                  f"--task-file replace its tasks with {named}, and {'it is' if len(dropped) == 1 else 'they are'} "
                  "not among them")
    tapt = data.get("tapt")
    adapted = tapt.get("tasks") if isinstance(tapt, dict) else None
    if isinstance(adapted, list) and not set(adapted) <= tasks and not _named_by_set(args.overrides, "tapt"):
        # a tapt recipe's tasks are checked against evaluate.tasks; only its tapt stage reads them (the task
        # corpus it wrote), never the evaluate stage: narrowed to the tasks kept, or null (= evaluate.tasks)
        kept = [t for t in adapted if t in tasks] or None
        out.append(f"tapt.tasks={json.dumps(kept)}")
        print(f"evaluate: tapt.tasks {', '.join(map(str, adapted))} -> {', '.join(kept) if kept else 'null'} for this "
              f"evaluation (--task/--task-file replace the recipe's tasks with {named}; the adapted model is the one "
              "the tapt stage made)")
    return out


def transfer_overrides(args: argparse.Namespace) -> list[str]:
    """--transfer-* and --compare-checkpoint options -> `evaluate.crosslingual=...` / `evaluate.compare_checkpoints=...`
    overrides (replacing the recipe's lists, as --task replaces its tasks), or none."""
    out = []
    if args.transfer_files or args.transfer_languages:
        if len(args.transfer_files) != len(args.transfer_languages):
            raise ConfigError(f"{len(args.transfer_files)} --transfer-file but {len(args.transfer_languages)} "
                              "--transfer-language: give one language code per transfer file, in the same order")
        task = args.transfer_task
        if task is None:
            named = list(args.tasks) + ([_file_task_name(args)] if args.task_file else [])
            if len(named) != 1:
                raise ConfigError("--transfer-file needs --transfer-task NAME (the source task) unless exactly one "
                                  f"task is given with --task / --task-file (got {len(named)})")
            task = named[0]
        targets = []
        for path, language in zip(args.transfer_files, args.transfer_languages):
            entry = {"task": task, "input": str(Path(path).resolve()), "language": language}
            if args.transfer_text_column:
                entry["text_column"] = args.transfer_text_column
            if args.transfer_label_column:
                entry["label_column"] = args.transfer_label_column
            targets.append(entry)
        out.append(f"evaluate.crosslingual={json.dumps(targets)}")
    elif args.transfer_task or args.transfer_text_column or args.transfer_label_column:
        raise ConfigError("--transfer-task/--transfer-text-column/--transfer-label-column describe a --transfer-file; "
                          "none was given")
    if args.compare_checkpoints:
        from bertfactory.run_location import localize

        # a model directory on object storage: its files pulled into its working copy first
        compared = [str(localize(p)) if is_url(p) else str(Path(p).resolve()) for p in args.compare_checkpoints]
        out.append(f"evaluate.compare_checkpoints={json.dumps(compared)}")
    return out


def _recipe_file(target: Path) -> Path:
    """The recipe file `target` names: itself, or the bundled recipe of that name."""
    from .recipe import resolve_recipe

    return resolve_recipe(target)


def _run_of(model: Path) -> Path | None:
    """The run directory a model directory belongs to by its place: RUN/pretrain/<name> (final) or
    RUN/<stage>/checkpoints/<name>; None elsewhere."""
    parent = model.parent
    return {"pretrain": parent.parent, "checkpoints": parent.parent.parent}.get(parent.name)


def _checkpoint_of(target: Path) -> tuple[Path, Path | None]:
    """(model directory, the run directory it belongs to or None)."""
    if (target / "config.json").is_file():
        return target, _run_of(target)
    if (target / "pretrain" / "final" / "config.json").is_file():
        return target / "pretrain" / "final", target
    if (untrained := untrained_run(target, "evaluate")) is not None:
        raise ConfigError(untrained)
    raise ConfigError(f"{target} is neither a recipe YAML, a model directory (config.json) nor a run directory "
                      f"(pretrain/final/config.json)")


def untrained_run(target: Path, command: str) -> str | None:
    """The refusal of `command` (evaluate, export) for a run directory with no trained model yet (preprocessed but
    never pretrained, or a pretraining stopped before its final model), naming its newest checkpoint; None when
    `target` is no such directory."""
    from .stamps import is_run_directory

    if not is_run_directory(target) or (target / "pretrain" / "final" / "config.json").is_file():
        return None
    newest = _newest_checkpoint(target)
    if newest is None and (evaluated := _evaluated_model(target)) is not None:
        again = f" --run-dir {target}" if command == "evaluate" else ""  # evaluations of one run add up
        return (f"{target} holds an evaluation (eval/results.json) of the model directory {evaluated}, not a model of "
                f"its own: bertfactory {command} {evaluated}{again}")
    also = (f", or {command} its newest checkpoint directly: bertfactory {command} {newest}" if newest is not None
            else "")
    return (f"{target} is a run directory with no trained model yet (no {target / 'pretrain' / 'final'}/config.json): "
            f"run `bertfactory pretrain RECIPE --run-dir {target}` first{also}")


def _evaluated_model(run_dir: Path) -> str | None:
    """The model directory outside `run_dir` whose evaluation the run directory holds (`bertfactory evaluate MODEL
    --run-dir RUN` of an imported or exported model: RUN/eval only), from eval/results.json's checkpoint.path (an
    absolute path there; relative to the run for its own model); None when there is none or it cannot be read."""
    import json

    try:
        path = json.loads((run_dir / "eval" / "results.json").read_text(encoding="utf-8"))["checkpoint"]["path"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if isinstance(path, str) and (Path(path).is_absolute() or "://" in path) else None


def _newest_checkpoint(run_dir: Path) -> Path | None:
    """The run's newest pretraining checkpoint that is a model directory (RUN/pretrain/checkpoints/step-N with its
    config.json), or None."""
    steps = []
    for path in (run_dir / "pretrain" / "checkpoints").glob("step-*"):
        number = path.name[len("step-"):]
        if number.isdigit() and (path / "config.json").is_file():
            steps.append((int(number), path))
    return max(steps)[1] if steps else None


def _localize_target(url: str) -> Path:
    """A model or run directory given as a URL, pulled into a working copy. A model directory at a run's place
    (_run_of: s3://b/runs/x/pretrain/final) goes into the working copy of its run location, with the run's manifest
    and tokenizer, so that _checkpoint_of finds that run and the evaluation is the run location's (its lease, pulls
    and pushes), as RUN/pretrain/final on disk evaluates into RUN. Anything else: run_location.localize."""
    from bertfactory import storage
    from bertfactory.run_location import WorkingCopy, localize, resolve_run_dir, working_copy_of

    storage.check_location(url, "model directory")
    url = storage.normalize(url)
    work = working_copy_of(url)
    run = _run_of(work)
    if run is not None:
        rel = work.relative_to(run).as_posix()
        run_url = url[: -len(rel) - 1]  # working copies mirror the bucket's paths
        # no bucket left (s3://b/checkpoints/x): no run holds it; no config.json: a run directory, localize's case
        if storage.bucket_of(run_url) and storage.exists(storage.join(url, "config.json")):
            wc = WorkingCopy(resolve_run_dir(run_url, check=False), run_url)
            wc.pull_tree(rel)
            wc.pull(["shards/manifest.json", "tokenizer/tokenizer.json"])  # the held-out scores need them
            return wc.root / rel
    return localize(url)


def _one_task_file(args: argparse.Namespace) -> None:
    """--task-file given once -> args.task_file its path (or None). Given twice, the last one alone was evaluated,
    without a word; the layout options describe one file, so a second file is its own call (results add up)."""
    files = args.task_file if isinstance(args.task_file, list) else [args.task_file] if args.task_file else []
    if len(files) > 1:
        raise ConfigError(f"--task-file is given {len(files)} times ({', '.join(files)}); one task file per call, as "
                          "--task-type, --text-column, ... describe it: run `bertfactory evaluate` once per file "
                          "(the results of one run directory add up)")
    args.task_file = files[0] if files else None


def cmd_evaluate(args: argparse.Namespace, run_recipe_stage) -> int:
    """Recipe: the evaluate stage via `run_recipe_stage(args)` (flows.cli's stage runner, which locks the run
    directory). Checkpoint: here, under the run directory's lock."""
    from bertfactory.run_location import origin_of, resolve_run_dir
    from bertfactory.storage import is_url

    _one_task_file(args)
    # a model or run directory on object storage: checked, then its model files pulled into the working copy
    target = _localize_target(args.target) if is_url(args.target) else Path(args.target)
    from .recipe import bundled_recipe

    # a recipe file, or a bundled recipe's name (`bertfactory evaluate local`) that no path here shadows
    is_recipe = target.is_file() or (not target.exists() and bundled_recipe(target) is not None)
    # a recipe's fine-tuning settings apply as written; a checkpoint's are the paper-scale defaults (one learning
    # rate tuned for BERT-base), so its task file gets a grid scaled to the model's size
    # settings of the recipe that name a task the --task options replaced go with it (said in one line each),
    # before the --transfer-* ones, which replace `evaluate.crosslingual` themselves
    # the task list of --task/--task-file comes before this call's --set, so that a --set of a listed task
    # (evaluate.tasks.rev.finetune.epochs=1) applies to it: after it, the list replaced the task's --set, and the task
    # ran at the default epochs and BERT-base's learning rate without a word
    args.overrides = task_overrides(args, scaled_grid=not is_recipe) + list(args.overrides) + \
        replaced_task_overrides(args, _recipe_file(target) if is_recipe else None) + transfer_overrides(args)
    if is_recipe:
        args.config = str(target)
        return run_recipe_stage(args)
    checkpoint, own_run = _checkpoint_of(target)
    url_outside_run = is_url(args.target) and (own_run is None or origin_of(own_run) is None)
    if url_outside_run:  # a working copy's folder above the bucket (s3://b/checkpoints/x) is no run directory
        own_run = None
    run_dir = resolve_run_dir(args.run_dir) if args.run_dir else own_run or Path("runs") / f"eval-{checkpoint.name}"
    if url_outside_run and not args.run_dir:  # as a local model directory outside a run, but said: not in the bucket
        print(f"evaluate: {args.target} is not in a run directory (RUN/pretrain/<name>, RUN/<stage>/checkpoints/"
              f"<name>): the results go to {run_dir} on this machine only; give --run-dir URL to keep them in a "
              "run location")
    recipe, has_shards = _checkpoint_recipe(checkpoint, run_dir, args.overrides)  # refused before anything is locked
    from .lock import run_dir_lock

    # the lock `bertfactory run` holds (on object storage also the run location's lease, flows/lock.py), for the
    # whole evaluation: a second evaluate or run of this run directory, here or on another machine, would fine-tune
    # the same runs and race on eval/ and the bucket; it is refused at once, naming the holder
    with run_dir_lock(run_dir, "evaluate"):
        return _evaluate_checkpoint(recipe, run_dir, has_shards)


def _checkpoint_recipe(checkpoint: Path, run_dir: Path, overrides: list[str]):
    """(the recipe evaluating `checkpoint` into `run_dir`: the `evaluate` defaults plus `overrides`, whether
    run_dir has shards). Only reads: a --set asking for held-out scores without shards is refused here."""
    from bertfactory.config import apply_overrides, validate

    from .recipe import Recipe

    # the held-out scores (BERT's intrinsic MLM/NSP, every member's own objective) read RUN/shards: a fresh run
    # directory has none, so they are skipped, said in one line, and the tasks run
    has_shards = (run_dir / "shards" / "manifest.json").is_file()
    base = {"evaluate": {"checkpoint": str(checkpoint.resolve()),
                         "intrinsic": {"enabled": has_shards}, "objective": {"enabled": has_shards}}}
    recipe = validate(Recipe, apply_overrides(base, overrides), f"{checkpoint} with overrides {overrides}")
    from evaluation.run import refuse_hugging_face_directory

    # before the stage key, which would name a missing tokenizer.json, or the reader's "field 'format' is None"
    refuse_hugging_face_directory(checkpoint, "the checkpoint")
    for i, path in enumerate(recipe.evaluate.compared_paths(run_dir)):
        refuse_hugging_face_directory(path, f"evaluate.compare_checkpoints[{i}]")
    if not has_shards:
        asked = [f"evaluate.{part}.enabled=true" for part in ("intrinsic", "objective")
                 if getattr(recipe.evaluate, part).enabled]
        if asked:  # a --set asked for them: refused naming it, before anything runs
            raise ConfigError(f"--set {' and '.join(asked)} needs shards at {run_dir / 'shards'}, and there are none: "
                              "preprocess into this run directory first, or leave it unset (the held-out scores are "
                              "then skipped)")
    return recipe, has_shards


def _evaluate_checkpoint(recipe, run_dir: Path, has_shards: bool) -> int:
    """The evaluate stage of `recipe` into `run_dir` (its lock held by the caller), then its summary."""
    from .stage_runner import run_stage
    from .summary import summary_table

    run_dir.mkdir(parents=True, exist_ok=True)
    if not has_shards:
        print(f"evaluate: no shards at {run_dir / 'shards'}: the held-out intrinsic and objective scores are "
              "skipped (preprocess into this run directory to get them)")
    result = run_stage("evaluate", recipe, run_dir)
    print(f"\nevaluate    {result['status']:<11} {result['seconds']:>8.1f} s\n\nRun directory: {run_dir}\n")
    print(summary_table(run_dir))
    print(f"\nReport: {run_dir / 'eval' / 'report.md'}")
    return 0


def _localize_results(url: str) -> Path:
    """A run, eval directory or results.json on object storage, pulled into its working copy (docs/cluster.md)."""
    from bertfactory import storage
    from bertfactory.run_location import WorkingCopy, resolve_run_dir
    from evaluation.results import RESULTS_FILE

    storage.check_location(url, "run directory")
    url = storage.normalize(url)
    if url.endswith(f"/{RESULTS_FILE}"):
        url = url[: -len(RESULTS_FILE) - 1]
    wc = WorkingCopy(resolve_run_dir(url, check=False), url)
    if wc.pull([RESULTS_FILE]):
        return wc.root
    wc.pull([f"eval/{RESULTS_FILE}"])
    return wc.root / "eval"


def _run_parts(spec: str) -> tuple[str, ...]:
    """The path components of the run directory `spec` names: a run directory itself, its eval directory or its
    results.json (a local path or a URL)."""
    from evaluation.results import RESULTS_FILE

    if is_url(spec):
        parts = tuple(p for p in spec.split("://", 1)[1].split("/") if p)
    else:
        parts = Path(spec).resolve().parts
    if parts and parts[-1] == RESULTS_FILE:  # RUN/eval/results.json, or a results.json copied elsewhere
        parts = parts[:-1]
        return parts[:-1] if parts and parts[-1] == "eval" else parts
    if parts and parts[-1] == "eval" and (is_url(spec) or (Path(*parts) / RESULTS_FILE).is_file()):  # RUN/eval
        return parts[:-1]
    return parts


def run_labels(specs: list[str]) -> list[str]:
    """A column name per run of `bertfactory report`: the run directory's last path components, as few as keep the
    runs apart (`runs/a/eval` and `runs/b/eval/results.json` -> `a`, `b`; `x/run` and `y/run` -> `x/run`, `y/run`);
    a run given twice gets `#<position>`."""
    parts = [_run_parts(spec) or (spec,) for spec in specs]
    labels = []
    for i, own in enumerate(parts):
        for n in range(1, len(own) + 1):
            clash = any(other[-n:] == own[-n:] for j, other in enumerate(parts) if j != i)
            if not clash:
                break
        labels.append(f"{own[-1]}#{i + 1}" if clash else "/".join(own[-n:]))
    return labels


def cmd_report(args: argparse.Namespace) -> int:
    from bertfactory.io import atomic_write_text
    from evaluation.report import render_comparison
    from evaluation.results import RESULTS_FILE, read_results

    runs = []
    for spec, label in zip(args.runs, run_labels(args.runs)):
        path = _localize_results(spec) if is_url(spec) else Path(spec)
        if path.is_dir() and not (path / RESULTS_FILE).is_file():
            path = path / "eval"
        runs.append((label, read_results(path)))
    text = render_comparison(runs)
    if args.out:
        if Path(args.out).is_dir():
            raise ConfigError(f"--out {args.out} is a directory; give the report's file, e.g. "
                              f"{Path(args.out) / 'report.md'}")
        atomic_write_text(Path(args.out), text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0
