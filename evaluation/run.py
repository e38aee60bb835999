"""The evaluation stage: RUN/pretrain/final (or `evaluate.checkpoint`) + RUN/shards -> RUN/eval/{results.json,
report.md, *.png}.

    from evaluation.run import run_evaluate
    results = run_evaluate(recipe.evaluate, Path("runs/local"))
    # or: bertfactory evaluate configs/local.yaml --run-dir runs/local

Steps: (1) intrinsic MLM/NSP scores on the held-out shards (refused when the shards were built with another
tokenizer); (2) for each task of `evaluate.tasks` (built-in by name or a user file): encode it once (cached in
RUN/cache/tasks), fine-tune the pretrained encoder and the same architecture from random weights with the same
fine-tuning settings (learning-rate grid x seeds), and score the non-neural baselines (tfidf_logreg, majority) on
the same splits; every `evaluate.compare_checkpoints` model directory is fine-tuned the same way on the same splits
(each with its own tokenizer: its encodings are cached apart, by tokenizer sha256), and the task's
`evaluate.crosslingual` targets (other languages' files) are scored by every fine-tuned model unchanged;
(3) optionally the feature-based comparison; (4) write the plots and report.md, then results.json last (so a
results.json on disk always belongs to a finished evaluation). Contract of results.json: docs/results.md.

Evaluations add up (evaluation/parts.py): every task's results, and the intrinsic / objective / feature-based
scores, are kept in their own file with the key of their inputs (checkpoint, settings, data files); a part whose key
is unchanged is reused as it is, and results.json merges every part of this checkpoint, so separate `evaluate`
calls on one run (built-in tasks, task files, compared checkpoints) live side by side. Within a task, each finished
fine-tuning run is kept until the task's part is written (evaluation/run_cache.py), so a stopped evaluation continues
from its finished runs; on object storage the runs and parts go to the run location as they are written, so it
continues on another machine too. Fine-tuning curves also go to TensorBoard (RUN/eval/tensorboard/<task>/<model>/
lr<lr>-seed<seed>; `evaluate.tracking`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import bertfactory
from bertfactory.errors import ConfigError
from bertfactory.io import apply_umask, atomic_write_json, content_hash, sha256_file
from bertfactory.names import check_name, path_inside
from bertfactory.run_location import publish_files
from bertfactory.samples import resolve_input, sample_path
from training.checkpoint import MODEL_FILE, load_pretrained, read_checkpoint_config

from .baselines import BaselineResult, majority, tfidf_logreg
from .cache import cache_key, load_or_build
from .config import EvaluateConfig, FinetuneConfig, TaskConfig, unknown_task_message
from .crosslingual import load_target, target_splits
from .encode import TextEncoder
from .finetune import ModelResult, PreparedTask, Split, limit_examples, prepare_task
from .inputs import CLASSIFICATION_TYPES, build_features
from .heldout import checkpoint_objective, evaluate_objective, without_empty_splits
from .intrinsic import evaluate_intrinsic
from .lr_grid import encoder_width
from .mdd import task_mdd
from .metrics import mcnemar, wilson_interval
from .parts import TASKS, EvalParts
from .run_cache import RunCache
from .run_pool import RunPool
from .report import write_report
from .results import FORMAT as RESULTS_FORMAT
from .results import RESULTS_FILE, to_document, write_results
from .results import SCHEMA_VERSION as RESULTS_SCHEMA_VERSION
from .scoring import gold
from .tasks.base import TaskData

logger = logging.getLogger(__name__)

CACHE_DIR = Path("cache") / "tasks"  # inside the run directory, beside eval/: encodings, not results
FINETUNED_DIR = "finetuned"
TENSORBOARD_DIR = "tensorboard"


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("evaluate.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    return torch.device(name)


def _display_path(path: Path, run_dir: Path) -> str:
    try:
        return path.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


# ------------------------------------------------------------------------------------------------ task data


def load_task(name: str, task: TaskConfig) -> TaskData:
    """A built-in task by name (its cached sample, or `input`), or a user task file (`input` + `task_type`)."""
    from .tasks.registry import BUILTIN_TASKS, load_task_file

    where = f"evaluate.tasks.{name}"
    if task.task_type is None:
        if name not in BUILTIN_TASKS:  # EvaluateConfig refuses it first; a config built without validation here
            raise ConfigError(unknown_task_message(name))
        return BUILTIN_TASKS[name](resolve_input(task.input) if task.input else None)
    if not task.input:
        raise ConfigError(f"{where}: a task with task_type {task.task_type!r} needs `input` (the data file)")
    return load_task_file(
        resolve_input(task.input), task.task_type, text_column=task.text_column, text_b_column=task.text_b_column,
        label_column=task.label_column, label_names=task.label_names, language=task.language, name=name,
        dev_path=resolve_input(task.dev_input) if task.dev_input else None,
        test_path=resolve_input(task.test_input) if task.test_input else None)


def task_input_files(cfg: EvaluateConfig, run_dir: Path | None = None) -> list[Path]:
    """The files the evaluation reads besides the checkpoint (for the stage key): the enabled tasks' inputs (or a
    built-in task's sample), the cross-lingual target files and, given the run directory (relative paths are
    inside it), the compared checkpoints' files."""
    paths: list[Path] = []
    for name, task in cfg.enabled_tasks().items():
        paths += _task_paths(name, task)
    paths += [resolve_input(t.input) for t in cfg.crosslingual]
    if run_dir is not None:
        paths += [p / n for p in cfg.compared_paths(run_dir) for n in (MODEL_FILE, "config.json", "tokenizer.json")]
    return _files_of(paths)


def _task_paths(name: str, task: TaskConfig) -> list[Path]:
    """The data files (or directories) one task reads: its inputs, or a built-in task's cached sample."""
    return [path for _, path in _task_roles(name, task)]


_INPUT_ROLES = ("input", "dev_input", "test_input")


def _task_roles(name: str, task: TaskConfig) -> list[tuple[str, Path]]:
    """(setting, path) of each data file or directory one task reads: `input`, `dev_input`, `test_input` as given,
    or a built-in task's cached sample as its `input`."""
    from .tasks.registry import BUILTIN_SAMPLES

    roles = [(role, resolve_input(getattr(task, role))) for role in _INPUT_ROLES if getattr(task, role)]
    if not roles and task.task_type is None and name in BUILTIN_SAMPLES:
        roles.append(("input", sample_path(BUILTIN_SAMPLES[name])))
    return roles


def _files_of(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return files


def _content_id(path: Path) -> list[list[str]]:
    """A data file or directory as the same content wherever it lies (another samples cache, checkout or working
    copy): [name, sha256] of each file, a directory's files named by their path inside it (sorted), a single
    file by its file name. The name is kept, not only the content, because it is part of what is read: the
    readers tell a table's layout by its extension (evaluation/tasks/tabular.py) and a directory's files by their
    names; a renamed file thus computes its task once more, a moved one never."""
    if path.is_dir():
        return sorted([f.relative_to(path).as_posix(), sha256_file(f)] for f in _files_of([path]))
    return [[path.name, sha256_file(path)]]


def task_key(name: str, task: TaskConfig, cfg: EvaluateConfig, main: "Checkpoint", compared: list["Checkpoint"],
             device: torch.device) -> str:
    """What a task's results depend on: the checkpoint(s), the task's settings and fine-tuning settings, the
    baselines asked for, its cross-lingual targets and the content of every file it reads. Equal keys -> the
    stored results are reused (evaluation/parts.py), and so are the finished runs (evaluation/run_cache.py).
    Nothing in it depends on where the files lie: the input settings (paths, often made absolute by the CLI)
    are replaced by the content and location-free name of what they point to (_content_id), so an evaluation
    continued on another machine, whose samples cache or checkout is elsewhere, reuses what the first one
    finished."""
    targets = [t for t in cfg.crosslingual if t.task == name]
    return content_hash({
        "bertfactory": bertfactory.__version__, "task": name,
        "settings": task.model_dump(mode="json", exclude=set(_INPUT_ROLES)),
        "finetune": task.finetune_config(cfg.finetune).model_dump(mode="json"),
        "random_init_baseline": cfg.random_init_baseline, "baselines": list(cfg.baselines), "save_best": cfg.save_best,
        "crosslingual": [{**t.model_dump(mode="json", exclude={"input"}), "input": _content_id(resolve_input(t.input))}
                         for t in targets],
        "checkpoint": [main.info["model_sha256"], main.info["tokenizer_sha256"]],
        "compared": {c.label: [c.info["model_sha256"], c.info["tokenizer_sha256"]] for c in compared},
        "inputs": {role: _content_id(path) for role, path in _task_roles(name, task)}, "device": device.type})


# ------------------------------------------------------------------------------------------------ checkpoints


@dataclass
class Checkpoint:
    """A model directory whose encoder is fine-tuned on every task, with its own tokenizer."""

    label: str
    path: Path
    template: nn.Module  # the backbone every run copies
    text_encoder: TextEncoder
    info: dict  # results.json's description of it (CheckpointInfo)


def refuse_hugging_face_directory(path: Path, where: str) -> None:
    """A Hugging Face model directory (its config.json has a `model_type` and no bertfactory `format`) is refused
    naming the command that converts it, instead of the checkpoint reader's "field 'format' is None"."""
    from training.checkpoint import CONFIG_FILE, hugging_face_kind

    config = Path(path) / CONFIG_FILE
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # missing or unreadable: the checkpoint reader says so
    if (kind := hugging_face_kind(doc)) is None:
        return
    raise ConfigError(f"{where}: {path} is a Hugging Face model directory ({kind}), not a bertfactory checkpoint; "
                      f"convert it first with `bertfactory import-hf {path} OUT` and give OUT instead")


def open_checkpoint(path: Path, run_dir: Path, label: str, longest: int, where: str,
                    encoder: bool = True) -> tuple[nn.Module, Checkpoint]:
    """-> (the whole pretraining model, the Checkpoint of its backbone); refuses max_seq_len beyond its positions.
    encoder=False (nothing to fine-tune): no backbone is taken (template None), so that a model without an encoder
    (a Transformer-XL causal LM) is still scored on its own objective."""
    refuse_hugging_face_directory(path, where)
    model, config, tokenizer_path = load_pretrained(path, device="cpu")
    template = model.backbone() if encoder else None
    positions = getattr(getattr(template, "config", None), "max_position_embeddings", None)  # None: relative / none
    if positions is not None and longest > positions:
        raise ConfigError(f"evaluate.finetune.max_seq_len={longest} exceeds {where}'s "
                          f"max_position_embeddings={positions} ({path})")
    text_encoder = TextEncoder.from_file(tokenizer_path)
    info = {"path": _display_path(path, run_dir), "model_sha256": sha256_file(path / MODEL_FILE),
            "tokenizer_sha256": text_encoder.sha256, "num_parameters": sum(p.numel() for p in model.parameters()),
            "model": config.to_dict()}
    return model, Checkpoint(label, path, template, text_encoder, info)


def checkpoint_labels(paths: list[Path]) -> list[str]:
    """A short unique label per path: its last components, as few as keep it apart from the others (and more than
    a bare `final`, which every run directory's pretrain/final would share)."""
    parts = [p.resolve().parts for p in paths]
    labels = []
    for i, own in enumerate(parts):
        for n in range(1, len(own) + 1):
            tail = own[-n:]
            clash = any(other[-n:] == tail for j, other in enumerate(parts) if j != i)
            if not clash and not (n == 1 and own[-1] == "final" and len(own) > 1):
                break
        labels.append("/".join(tail) if not clash else f"{'/'.join(tail)}#{i + 1}")
    return labels


def open_compared(cfg: EvaluateConfig, run_dir: Path, longest: int) -> list[Checkpoint]:
    paths = cfg.compared_paths(run_dir)
    out = []
    for i, (path, label) in enumerate(zip(paths, checkpoint_labels(paths))):
        where = f"evaluate.compare_checkpoints[{i}]"
        if not (path / "config.json").is_file():
            raise ConfigError(f"{where}: {path} is not a model directory (no config.json); give a directory written "
                              f"by pretraining (RUN/pretrain/final) or by `bertfactory import-hf`")
        model, checkpoint = open_checkpoint(path, run_dir, label, longest, where)
        del model  # only the backbone is fine-tuned; the pretraining heads are not needed
        out.append(checkpoint)
    return out


def data_info(data: TaskData, task: PreparedTask) -> dict:
    """Provenance, sizes and label counts of the splits as used (after max_train/eval_examples)."""
    source = data.source
    info = {"source_path": str(source.get("path", "")), "source_sha256": str(source.get("sha256", "")),
            "lines": int(source.get("lines", 0)), "split_method": data.split_method, "sizes": data.sizes(),
            "label_names": list(data.label_names), "dropped": dict(data.dropped),
            "suspicious_labels": dict(data.suspicious_labels) or None,
            "truncated": {s: getattr(task, s).features.truncated for s in ("train", "dev", "test")}}
    if data.task_type in CLASSIFICATION_TYPES or data.task_type == "tagging":
        counts = {}
        for split in ("train", "dev", "test"):
            examples = getattr(data, split)
            c = Counter(t for e in examples for t in e.tags) if data.task_type == "tagging" else \
                Counter(e.label for e in examples)
            counts[split] = {n: c.get(i, 0) for i, n in enumerate(data.label_names)}
        info["label_counts"] = counts
    return info


def _features(name: str, data: TaskData, text_encoder: TextEncoder, ft: FinetuneConfig, cache_dir: Path,
              use_cache: bool) -> dict:
    def build():
        return {s: build_features(data.task_type, getattr(data, s), text_encoder, ft) for s in ("train", "dev", "test")}

    if not use_cache:
        return build()
    settings = {k: getattr(ft, k) for k in ("max_seq_len", "doc_stride", "max_query_len")}
    # the examples as read, not only their ids: another text_column, label_column or label_names reads the same
    # file under the same ids into other texts or label ids, which the encodings hold
    examples = {s: content_hash([dataclasses.asdict(e) for e in getattr(data, s)]) for s in ("train", "dev", "test")}
    key = cache_key(name, str(data.source.get("sha256", "")), examples, {**settings, "task_type": data.task_type})
    return load_or_build(cache_dir, name, text_encoder.sha256, key, build)


# --------------------------------------------------------------------------------------------- results parts


def model_scores(result: ModelResult, task: PreparedTask) -> dict:
    runs = []
    for r in result.runs:
        record = {"seed": r.seed, "best_epoch": r.best_epoch, "steps": r.steps, "stopped_early": r.stopped_early,
                  "dev": r.dev_metrics, "test": r.test_metrics,
                  "epochs": [{k: v for k, v in e.items() if not (k == "dev_score" and v == float("-inf"))}
                             for e in r.epochs]}
        if task.spec.task_type in CLASSIFICATION_TYPES or task.spec.task_type == "multiple-choice":
            y = gold(task.spec, task.test.examples)
            correct = sum(int(p == t) for p, t in zip(r.test_predictions, y))
            record["accuracy_ci95"] = list(wilson_interval(correct, len(y)))
        runs.append(record)
    out = {**result.metrics(), "dev": result.dev_metrics(), "learning_rate": result.learning_rate,
           "lr_grid": [{k: v for k, v in g.items() if v is not None} for g in result.grid],
           "seeds": [r.seed for r in result.runs], "runs": runs}
    confusion = result.confusion()
    if confusion is not None:
        out["confusion_matrix"] = confusion
    return out


def baseline_scores(result: BaselineResult) -> dict:
    zeros = {f"{k}_std": 0.0 for k in result.test_metrics}
    return {**result.test_metrics, **zeros, "dev": result.dev_metrics, "details": result.details}


def comparison(task: PreparedTask, pretrained: ModelResult, random_init: ModelResult) -> dict:
    primary = task.spec.primary_metric
    out: dict = {"primary_metric": primary}
    ours, theirs = pretrained.metrics().get(primary), random_init.metrics().get(primary)
    if ours is not None and theirs is not None:  # absent when undefined for one of them
        out["difference"] = ours - theirs
    if task.spec.task_type in CLASSIFICATION_TYPES or task.spec.task_type == "multiple-choice":
        a, b = pretrained.runs[0], random_init.runs[0]
        test = mcnemar(gold(task.spec, task.test.examples), a.test_predictions, b.test_predictions)
        out.update(seed=a.seed, pretrained_only_correct=test["a_only"], random_init_only_correct=test["b_only"],
                   mcnemar_p_value=test["p_value"])
    return out


def detectable_differences(task: PreparedTask, out: dict) -> dict:
    """tasks.<task>.mdd: what this test set can tell apart (evaluation.mdd) - one model against the majority
    class's test accuracy (the majority baseline's, else the commonest test label's share) and, with a random-init
    run, the two models at the discordance their compared runs showed."""
    y = gold(task.spec, task.test.examples)
    reference = (out.get("majority") or {}).get("accuracy")
    if reference is None:
        reference = max(Counter(int(t) for t in y).values()) / len(y)
    cmp = out.get("comparison") or {}
    discordant = None
    if cmp.get("pretrained_only_correct") is not None:
        discordant = (cmp["pretrained_only_correct"] + cmp["random_init_only_correct"]) / len(y)
    return task_mdd(len(y), min(reference, 1.0 - 1e-9), discordant)


def save_finetuned(result: ModelResult, task: PreparedTask, directory: Path, tokenizer_sha256: str,
                   encoder_config: dict) -> None:
    """The task's best run (best dev score over grid and seeds): model.safetensors of the TaskModel (encoder.* +
    head.*) and head.json saying how to rebuild it."""
    from safetensors.torch import save_file

    if result.best_state is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous().clone() for k, v in result.best_state.items()}
    save_file(tensors, str(directory / "model.safetensors"))
    apply_umask(directory / "model.safetensors")
    best = max(result.runs, key=lambda r: r.dev_score(task.spec.primary_metric))
    atomic_write_json(directory / "head.json", {
        "task": task.name, "task_type": task.spec.task_type, "label_names": list(task.spec.label_names),
        "primary_metric": task.spec.primary_metric, "tokenizer_sha256": tokenizer_sha256, "encoder": encoder_config,
        "note": "TaskModel(encoder, task_type, num_labels=len(label_names), dropout) state dict; the best run "
                f"by dev {task.spec.primary_metric} (seed {best.seed} if from the reported grid point)"})


def zero_shot_scores(result: ModelResult, key: str) -> dict:
    """A target's metrics for one fine-tuned model (the runs of its chosen learning rate)."""
    return {**result.extra_metrics(key), "learning_rate": result.learning_rate,
            "runs": [{"seed": r.seed, "test": r.extra_metrics[key]} for r in result.runs]}


def target_info(target: TaskData, split: Split) -> dict:
    source = target.source
    return {"source_path": str(source.get("path", "")), "source_sha256": str(source.get("sha256", "")),
            "lines": int(source.get("lines", 0)), "examples": len(split.examples), "dropped": dict(target.dropped),
            "truncated": split.features.truncated}


# ------------------------------------------------------------------------------------------------ the stage


def load_and_prepare(name: str, task_cfg: TaskConfig, cfg: EvaluateConfig, checkpoint: Checkpoint, run_dir: Path,
                     data: TaskData | None = None, main: Checkpoint | None = None) -> tuple[TaskData, PreparedTask]:
    """A task's data (read and cut to max_train/eval_examples, unless given) encoded with `checkpoint`'s tokenizer
    (through the encodings cache; a checkpoint with another tokenizer than `main` keeps its encodings apart, since
    the main cache refuses them)."""
    ft = task_cfg.finetune_config(cfg.finetune)
    if data is None:
        data = limit_examples(load_task(name, task_cfg), ft)
    sha = checkpoint.text_encoder.sha256
    cache_dir = run_dir / CACHE_DIR if main is None or sha == main.text_encoder.sha256 else \
        run_dir / "cache" / f"tasks-{sha[:16]}"
    features = _features(name, data, checkpoint.text_encoder, ft, cache_dir, cfg.cache_encodings)
    return data, prepare_task(data, checkpoint.text_encoder, ft, task_cfg.primary_metric, features)


def evaluate_task(name: str, task_cfg: TaskConfig, cfg: EvaluateConfig, main: Checkpoint, device: torch.device,
                  run_dir: Path, timings: dict, compared: list[Checkpoint] = (), pool: RunPool | None = None,
                  runs: RunCache | None = None) -> tuple[dict, PreparedTask, TaskData, dict | None]:
    """Fine-tune every model on one task -> (tasks.<task> of results.json, the prepared task, its data, the task's
    crosslingual entry or None). `pool`: each model's runs in its worker processes (evaluate.workers). `runs`:
    the task's finished runs on disk, reused and added to (evaluation/run_cache.py)."""
    from .finetune import finetune_model

    check_name(name, "evaluate.tasks")  # the config checked it; a name reaching here otherwise must not escape
    data, task = load_and_prepare(name, task_cfg, cfg, main, run_dir)
    text_encoder, template = main.text_encoder, main.template
    # each checkpoint's own learning-rate grid when the settings ask for one scaled to the encoder's width
    ft = task_cfg.finetune_config(cfg.finetune).for_encoder(encoder_width(template))
    board = path_inside(run_dir / "eval" / TENSORBOARD_DIR, name, f"evaluate.tasks.{name}")
    if board.is_dir():  # curves of this task's earlier evaluation: moved aside beside it, not mixed (issue 35)
        from bertfactory.replaced import move_aside

        move_aside(board, "earlier")
    tracking = cfg.tracking.target(board, f"{run_dir.resolve().name}/eval/{name}")

    def prepared(checkpoint: Checkpoint) -> PreparedTask:
        return load_and_prepare(name, task_cfg, cfg, checkpoint, run_dir, data, main)[1]

    spec = task.spec
    targets = {t.key: load_target(t, data) for t in cfg.crosslingual if t.task == name}
    splits = target_splits(targets, text_encoder, ft)
    logger.info("%s (%s): %s examples (train/dev/test), dropped %s", name, spec.task_type, data.sizes(), data.dropped)
    for split in ("train", "dev", "test"):
        unaligned = getattr(task, split).features.notes.get("answers_without_tokens", 0)
        if unaligned:  # the reader checked the characters; the tokenizer left no token on them (e.g. only spaces)
            logger.warning("%s %s: %d gold answers cover no token; their windows are trained as 'no answer'",
                           name, split, unaligned)
    out: dict = {"task_type": spec.task_type, "primary_metric": spec.primary_metric, "language": data.language,
                 "data": data_info(data, task), "settings": ft.model_dump(mode="json")}
    pad_id = text_encoder.pad_id

    def pretrained_encoder(seed: int) -> torch.nn.Module:
        return copy.deepcopy(template)

    def random_encoder(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)  # the random encoder depends only on the seed and the architecture
        return type(template)(template.config)

    pretrained = finetune_model(pretrained_encoder, task, ft, device, pad_id, f"{name}/pretrained", splits,
                                tracking.child("pretrained"), pool, runs)
    out["pretrained"] = model_scores(pretrained, task)
    timings[f"{name}.pretrained"] = pretrained.seconds
    if cfg.save_best:
        config = template.config.to_dict() if hasattr(template.config, "to_dict") else {}
        directory = path_inside(run_dir / "eval" / FINETUNED_DIR, name, f"evaluate.tasks.{name}")
        save_finetuned(pretrained, task, directory, text_encoder.sha256, config)
    pretrained.best_state = None
    random_init = None
    if cfg.random_init_baseline:
        random_init = finetune_model(random_encoder, task, ft, device, pad_id, f"{name}/random_init", splits,
                                     tracking.child("random_init"), pool, runs)
        random_init.best_state = None
        out["random_init"] = model_scores(random_init, task)
        timings[f"{name}.random_init"] = random_init.seconds
        out["comparison"] = comparison(task, pretrained, random_init)
    others: dict[str, ModelResult] = {}
    for checkpoint in compared:
        other_task = prepared(checkpoint)
        other_splits = target_splits(targets, checkpoint.text_encoder, ft)
        other_ft = task_cfg.finetune_config(cfg.finetune).for_encoder(encoder_width(checkpoint.template))
        result = finetune_model(lambda seed, c=checkpoint: copy.deepcopy(c.template), other_task, other_ft, device,
                                checkpoint.text_encoder.pad_id, f"{name}/{checkpoint.label}", other_splits,
                                tracking.child(checkpoint.label), pool, runs)
        result.best_state = None
        out.setdefault("compared", {})[checkpoint.label] = {
            **model_scores(result, other_task),
            "truncated": {s: getattr(other_task, s).features.truncated for s in ("train", "dev", "test")}}
        timings[f"{name}.compared.{checkpoint.label}"] = result.seconds
        others[checkpoint.label] = result
    started = time.perf_counter()
    if "tfidf_logreg" in cfg.baselines:
        baseline = tfidf_logreg(data, spec)
        if baseline is not None:
            out["tfidf_logreg"] = baseline_scores(baseline)
    if "majority" in cfg.baselines:
        out["majority"] = baseline_scores(majority(data, spec))
    timings[f"{name}.baselines"] = time.perf_counter() - started
    if spec.task_type in CLASSIFICATION_TYPES or spec.task_type == "multiple-choice":
        out["mdd"] = detectable_differences(task, out)
    transfer = None
    if targets:
        transfer = {"task_type": spec.task_type, "primary_metric": spec.primary_metric,
                    "source_language": data.language, "targets": {}}
        for key, target in targets.items():
            entry = {"language": target.language, "data": target_info(target, splits[key]),
                     "pretrained": zero_shot_scores(pretrained, key)}
            if random_init is not None:
                entry["random_init"] = zero_shot_scores(random_init, key)
            if others:
                entry["compared"] = {label: zero_shot_scores(r, key) for label, r in others.items()}
            transfer["targets"][key] = entry
            logger.info("%s -> %s (%s, zero-shot): pretrained test %s %.4f", name, key, target.language,
                        spec.primary_metric, entry["pretrained"].get(spec.primary_metric, float("nan")))
    return out, task, data, transfer


def run_evaluate(cfg: EvaluateConfig, run_dir: Path) -> dict:
    """Evaluate the checkpoint; writes RUN/eval and returns the results.json content."""
    threads_before = torch.get_num_threads()
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    try:
        return _evaluate(cfg, Path(run_dir))
    finally:  # in-process flows run other stages afterwards
        torch.set_num_threads(threads_before)


def _part(parts: EvalParts, name: str, key_inputs: dict, compute) -> None:
    """A top-level part (intrinsic, objective, feature_based): reused when its key is unchanged, else computed and
    stored with its timing."""
    key = content_hash({"bertfactory": bertfactory.__version__, "part": name, **key_inputs})
    if parts.fresh("top", name, key) is not None:
        return
    started = time.perf_counter()
    value = compute()
    parts.write("top", name, key, {"value": value, "timings": {name: round(time.perf_counter() - started, 3)}})
    publish_files([parts.path("top", name)])  # on object storage: kept if the evaluation stops before its end


def _shards_id(run_dir: Path) -> str | None:
    manifest = run_dir / "shards" / "manifest.json"
    return sha256_file(manifest) if manifest.is_file() else None


def _evaluate(cfg: EvaluateConfig, run_dir: Path) -> dict:
    started = time.perf_counter()
    device = resolve_device(cfg.device)
    checkpoint = cfg.checkpoint_path(run_dir)
    longest = max([cfg.finetune.max_seq_len] + [t.finetune_config(cfg.finetune).max_seq_len for t in cfg.enabled_tasks().values()])
    fine_tunes = bool(cfg.enabled_tasks()) or cfg.feature_based.enabled or bool(cfg.compare_checkpoints)
    model, main = open_checkpoint(checkpoint, run_dir, "pretrained", longest, "the checkpoint", encoder=fine_tunes)
    template, text_encoder = main.template, main.text_encoder
    compared = open_compared(cfg, run_dir, longest)
    logger.info("evaluating %s (%d parameters) on %s", checkpoint, main.info["num_parameters"], device)
    config_doc = read_checkpoint_config(checkpoint)
    # a held-out split without instances (a small corpus): those scores off, as without shards; the tasks still run
    cfg = without_empty_splits(cfg, run_dir / "shards", intrinsic=type(model).__name__ == "BertForPreTraining",
                               objective=checkpoint_objective(config_doc) is not None)
    out_dir = run_dir / "eval"
    parts = EvalParts(out_dir, main.info)
    parts.adopt(out_dir / RESULTS_FILE)  # an evaluation written before parts existed keeps its results
    header: dict = {
        "format": RESULTS_FORMAT,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "created_by": f"bertfactory {bertfactory.__version__} evaluation.run",
        "checkpoint": main.info,
        "config": cfg.model_dump(mode="json"),
    }
    checkpoint_id = [main.info["model_sha256"], main.info["tokenizer_sha256"], device.type]

    def on_device(score):
        def compute():
            model.to(device)
            try:
                return score()
            finally:
                model.to("cpu")
        return compute

    if cfg.intrinsic.enabled and type(model).__name__ != "BertForPreTraining":
        # its MLM/NSP heads are BERT's; every other member is scored by its own objective (evaluate.objective)
        logger.info("intrinsic: skipped for a %s (the held-out objective score applies)", type(model).__name__)
    elif cfg.intrinsic.enabled:
        # "values": the part's value gained nsp_label_counts (results v5), so a part stored before is scored again once
        _part(parts, "intrinsic", {"config": cfg.intrinsic.model_dump(mode="json"), "checkpoint": checkpoint_id,
                                   "shards": _shards_id(run_dir), "values": ["nsp_label_counts"]},
              on_device(lambda: evaluate_intrinsic(model, run_dir / "shards", text_encoder.sha256, cfg.intrinsic,
                                                   device)))
    if cfg.objective.enabled and checkpoint_objective(config_doc) is not None:  # every member's held-out metric
        _part(parts, "objective", {"config": cfg.objective.model_dump(mode="json"), "checkpoint": checkpoint_id,
                                   "shards": _shards_id(run_dir)},
              on_device(lambda: evaluate_objective(model, config_doc, run_dir / "shards", text_encoder.sha256,
                                                   cfg.objective, device)))
    prepared: dict[str, PreparedTask] = {}
    pool = RunPool.for_settings(cfg.workers, cfg.worker_threads, cfg.num_threads) if device.type == "cpu" else None
    if cfg.workers > 1 and pool is None:
        logger.warning("evaluate.workers=%d: fine-tuning on %s runs one run at a time", cfg.workers, device)
    try:
        for name, task_cfg in cfg.enabled_tasks().items():
            key = task_key(name, task_cfg, cfg, main, compared, device)
            if parts.fresh(TASKS, name, key) is not None:
                continue
            timings: dict[str, float] = {}
            # a run at another thread count rounds differently: only runs made at this one are reused
            threads = pool.threads if pool is not None else torch.get_num_threads()
            runs = RunCache(path_inside(out_dir / "parts" / "runs", name, f"evaluate.tasks.{name}"),
                            content_hash({"task": key, "threads_per_run": threads}), keep_states=cfg.save_best)
            entry, task, _, transfer = evaluate_task(name, task_cfg, cfg, main, device, run_dir, timings, compared,
                                                     pool, runs)
            prepared[name] = task
            parts.write(TASKS, name, key, {
                "value": entry, "crosslingual": transfer, "timings": {k: round(v, 3) for k, v in timings.items()},
                "compared_checkpoints": {c.label: c.info for c in compared}})
            # on object storage the part reaches the run location before its runs leave it: a stop in between
            # loses neither (a local run: nothing to send)
            publish_files([parts.path(TASKS, name)])
            runs.clear()
        if cfg.feature_based.enabled:
            from .features import compare_options

            fb = cfg.feature_based
            fb_task = cfg.tasks[fb.task]

            def feature_based() -> dict:
                task = prepared.get(fb.task) or load_and_prepare(fb.task, fb_task, cfg, main, run_dir)[1]
                return compare_options(template, task, fb, device, text_encoder.pad_id, seed=cfg.finetune.seed,
                                       pool=pool)

            _part(parts, "feature_based", {
                "config": fb.model_dump(mode="json"), "checkpoint": checkpoint_id, "seed": cfg.finetune.seed,
                "task": task_key(fb.task, fb_task, cfg, main, [], device)}, feature_based)
    finally:
        if pool is not None:
            pool.close()
    del model, template, main, compared
    header["timings"] = {"total": round(time.perf_counter() - started, 3)}
    results = parts.merge(header)
    doc = to_document(results, "the evaluation results")  # fail before writing anything if they break the contract
    write_report(doc, out_dir, run_dir / "pretrain" / "metrics.jsonl")
    doc = write_results(out_dir / RESULTS_FILE, doc)
    logger.info("wrote %s (%d tasks: %s)", out_dir / RESULTS_FILE, len(doc["tasks"]), ", ".join(doc["tasks"]))
    return doc
