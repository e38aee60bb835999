"""`bertfactory distill CONFIG --run-dir RUN`: distil the run's teacher (or an HF teacher) into students with
DistilBERT, BERT-PKD and TinyBERT, score teacher and students on a real task side by side, and write
RUN/distill/results.json and RUN/distill/report.md.

Per method: the teacher fine-tuned on the task (once, shared by every method), the distilled student, and the same
student shape trained on the task directly without task distillation (`student_direct`: the ablation). Scores are
the task's primary metric on its test split; `speedup` = teacher / student inference seconds over the test inputs
(median of `speed_repeats` passes, same batches, same device, the two models taking turns).

    from distillation.stage import run_distill
    results = run_distill(load_distill_config("configs/distill-local.yaml"), Path("runs/local"))
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bertfactory.config import apply_overrides, load_yaml, validate
from bertfactory.io import sha256_file
from bertfactory.errors import ConfigError
from bertfactory.samples import resolve_input
from evaluation.encode import TextEncoder
from evaluation.finetune import PreparedTask, finetune_run, predict, prepare_task
from evaluation.heads import TaskModel
from evaluation.inputs import collate
from evaluation.tasks.registry import BUILTIN_TASKS
from training.checkpoint import load_pretrained, read_checkpoint_config
from training.models.bert.model import BertForPreTraining
from training.tracking import TENSORBOARD_DIR, NumberedTargets

from .augment import Augmenter, augment_features
from .config import DistillConfig
from .general_cache import GeneralDistillation
from .layer_map import check_map, pkd_map, tinybert_map
from .loop import (DistilBertObjective, DistillModel, PkdObjective, TaskBatches, Teacher,
                   TinyBertIntermediateObjective, TinyBertPredictionObjective, run_distillation)
from .models import (Projections, check_tokenizers, distilbert_student, first_layers_student, layer_copy_config,
                     narrow_student, narrow_student_config, num_parameters)
from .state_cache import RngState, StateCache, arrays_digest, resolve_cache, state_digest
from .weight_selection import select_from_teacher

logger = logging.getLogger(__name__)

# teachers with BertForPreTraining's interface (encoder `bert`, MLM head, encoder hidden states and scores)
TEACHER_ARCHITECTURES = ("BertForPreTraining", "ModernBertForMaskedLM")


def load_distill_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> DistillConfig:
    """Validate a distill YAML with `a.b=value` overrides (errors name the field and the file)."""
    source = str(path) + (f" with overrides {list(overrides)}" if overrides else "")
    data = load_yaml(path)
    if data and not set(data) & set(DistillConfig.model_fields):  # not a list of unknown keys, one per section
        raise ConfigError(f"{path} holds no distillation setting (its keys {', '.join(data)} are none of a distillation "
                          f"config's: {', '.join(DistillConfig.model_fields)}); a pipeline recipe runs with "
                          "`bertfactory run`, a distillation config (kind `distill` in `bertfactory recipes list`, "
                          "e.g. distill-local) with `bertfactory distill`")
    return validate(DistillConfig, apply_overrides(data, list(overrides)), source=source)


def load_teacher(cfg: DistillConfig, run_dir: Path, out_dir: Path) -> tuple[Teacher, Path]:
    """-> (the frozen teacher, its tokenizer.json). An HF teacher is imported into out_dir/teacher; whether its MLM
    head was trained is what import_from_hf reports (a BertModel such as MiniLM has none); its tokenizer is the
    copy preprocess.tokenizer adopts from the same file (out_dir/teacher-tokenizer)."""
    if cfg.teacher.hf is not None:
        from training.hf import import_from_hf

        imported = import_from_hf(resolve_input(cfg.teacher.hf), out_dir / "teacher", seed=cfg.seed, overwrite=True)
        directory, has_mlm, source = imported.path, "MLM head" not in imported.initialised, cfg.teacher.hf
    else:
        directory = run_dir / cfg.teacher.checkpoint
        has_mlm, source = True, str(directory)
    doc = read_checkpoint_config(directory)
    if doc["architecture"] not in TEACHER_ARCHITECTURES:
        raise ConfigError(f"teacher {directory}: architecture {doc['architecture']} is not supported for distillation "
                          "(BertForPreTraining checkpoints: BERT, RoBERTa, imported HF BERT; ModernBertForMaskedLM)")
    model, _, tokenizer_path = load_pretrained(directory)
    tokenizer_sha256 = doc["tokenizer"]["sha256"]
    if cfg.teacher.hf is not None:
        # the teacher reads the tokenizer as preprocess.tokenizer adopts the model's file (MiniLM's padding /
        # truncation settings dropped, ids unchanged), so shards built from that file pass the one-vocabulary check
        from preprocessing.tokenizer import adopt_tokenizer

        tokenizer_path = out_dir / "teacher-tokenizer" / "tokenizer.json"
        adopt_tokenizer(directory / "tokenizer.json", tokenizer_path)
        tokenizer_sha256 = sha256_file(tokenizer_path)
    return Teacher(model, has_mlm, tokenizer_sha256, source), tokenizer_path


def _shard_batches(cfg: DistillConfig, run_dir: Path, teacher: Teacher, batch_size: int, seed: int):
    from training.data import PretrainBatches

    shard_dir = run_dir / cfg.shards
    if not (shard_dir / "manifest.json").is_file():  # another run's output (distill-minilm: tapt-minilm's shards)
        from bertfactory.errors import ContractError

        raise ContractError(f"distill needs {shard_dir / 'manifest.json'} (shards: {cfg.shards}, relative to the run "
                            f"directory), which does not exist; run `bertfactory preprocess` (or `bertfactory run` of "
                            f"the recipe that writes them) into {shard_dir.parent} first")
    manifest = json.loads((shard_dir / "manifest.json").read_text(encoding="utf-8"))
    check_tokenizers(teacher.tokenizer_sha256, manifest["tokenizer"]["sha256"], f"teacher {teacher.source}",
                     f"shards {shard_dir}")
    return PretrainBatches.open(shard_dir, teacher.tokenizer_sha256, batch_size, seed)


def _students_fit(cfg: DistillConfig, teacher: Teacher) -> None:
    """Refuse a student that does not fit the teacher (more layers than it has, a PKD-Skip depth that does not divide
    it, a TinyBERT width its heads do not divide, a layer map out of range), naming its settings and the teacher's
    shape; nothing is built. Each was refused only when its method's turn came, after the teacher's fine-tuning and
    the earlier methods' training."""
    config = teacher.model.config
    n = config.num_layers
    d, p, t = cfg.distilbert, cfg.pkd, cfg.tinybert
    checks = []
    if d.enabled and (d.general_steps or not cfg.general_only):
        checks.append((f"distilbert.teacher_layers {d.teacher_layers if d.teacher_layers is not None else 'null'}",
                       lambda: layer_copy_config(config, d.teacher_layers)))
    if p.enabled and not cfg.general_only:
        checks.append((f"pkd.student_layers {p.student_layers} (strategy {p.strategy})", lambda: (
            pkd_map(n, p.student_layers, p.strategy), layer_copy_config(config, list(range(1, p.student_layers + 1))))))
    def tinybert() -> None:
        layer_map = _tinybert_layer_map(cfg, n)
        narrow_student_config(config, t.hidden_size, t.num_layers, t.intermediate_size, t.num_heads, t.student)
        if t.init == "teacher":  # weight selection's own checks (BERT layouts, head count, widths): a small student
            _tinybert_student(cfg, teacher.model, layer_map, cfg.seed)

    if t.enabled and (t.general_steps or not cfg.general_only):
        checks.append((f"tinybert's student (num_layers {t.num_layers}, hidden_size {t.hidden_size}, num_heads "
                       f"{t.num_heads if t.num_heads is not None else 'null'}, init {t.init})", tinybert))
    for what, check in checks:
        try:
            check()
        except ConfigError as err:
            raise ConfigError(f"{what} does not fit the teacher {teacher.source} ({n} layers, hidden "
                              f"{config.hidden_size}, {config.num_heads} heads): {err}") from None


def _preflight(cfg: DistillConfig, run_dir: Path, teacher: Teacher) -> None:
    """Refuse bad input before any training: students that do not fit the teacher, logit distillation from a teacher
    without an MLM head, shards of another tokenizer."""
    _students_fit(cfg, teacher)
    d, t = cfg.distilbert, cfg.tinybert
    if d.enabled and d.general_steps and d.alpha_ce:
        teacher.require_mlm_head("distilbert.alpha_ce > 0 (soft cross-entropy on MLM logits)")
    batches = {name: size for name, size, on in (("distilbert.batch_size", d.batch_size, d.enabled and d.general_steps),
                                                  ("tinybert.general_batch_size", t.general_batch_size,
                                                   t.enabled and t.general_steps)) if on}
    if batches:
        rows = len(_shard_batches(cfg, run_dir, teacher, 1, cfg.seed).shards)
        for name, size in batches.items():
            if rows < size:  # named here: the loader's own refusal would name pretrain.batch_size
                raise ConfigError(f"the 'train' split of {run_dir / cfg.shards} has {rows} instances, fewer than one "
                                  f"general-distillation batch ({name}={size}); lower {name} or preprocess more text")


def _general(cfg: DistillConfig, run_dir: Path, method: str, trained: dict, teacher_modules: dict, settings: dict,
             train) -> dict:
    """One method's general distillation through the cache (distillation/general_cache.py) -> its record."""
    cache = StateCache(*resolve_cache(cfg.general_cache, run_dir, "general_cache"))
    return GeneralDistillation(cache, method, cfg.general_seed_or_seed, torch.device(cfg.device)).run(
        trained, teacher_modules, run_dir / cfg.shards, settings, train)


def _distilbert_general(cfg: DistillConfig, run_dir: Path, teacher: Teacher, student: BertForPreTraining, metrics,
                        device, boards: NumberedTargets) -> dict:
    """DistilBERT's general distillation of the layer-copied `student` on the shards (in place)."""
    d = cfg.distilbert
    objective = DistilBertObjective(teacher, d.temperature, d.alpha_ce, d.alpha_mlm, d.alpha_cos)
    # only the encoder leaves this phase (the task phases read student.bert); the MLM heads count only when a loss
    # reads them
    trained = {"student": student if (d.alpha_ce or d.alpha_mlm) else student.bert}
    teacher_modules = {"encoder": teacher.model.bert, **({"mlm_head": teacher.model.mlm_head} if d.alpha_ce else {})}
    settings = {"steps": d.general_steps, **d.model_dump(mode="json", exclude={"enabled", "general_steps"})}
    board = boards.next("distilbert-general")  # numbered on a cache hit too: the later phases keep their numbers
    return _general(cfg, run_dir, "distilbert", trained, teacher_modules, settings, lambda: run_distillation(
        DistillModel(student), objective,
        _shard_batches(cfg, run_dir, teacher, d.batch_size, cfg.general_seed_or_seed), d.general_steps,
        d.learning_rate, metrics, device, tracking=board))


def _tinybert_layer_map(cfg: DistillConfig, n_teacher: int) -> dict[int, int]:
    t = cfg.tinybert
    return (check_map(t.layer_map, n_teacher, t.num_layers, "tinybert.layer_map") if t.layer_map is not None
            else tinybert_map(n_teacher, t.num_layers, t.mapping))


def _tinybert_student(cfg: DistillConfig, pretrainer: BertForPreTraining, layer_map: dict[int, int],
                      seed: int) -> BertForPreTraining:
    """The narrow student, random (seeded) or weight-selected from the teacher (`tinybert.init`)."""
    t = cfg.tinybert
    built = narrow_student(pretrainer.config, t.hidden_size, t.num_layers, t.intermediate_size, t.num_heads, seed,
                           t.student)
    if t.init == "teacher":
        select_from_teacher(built, pretrainer, layer_map)
    return built


def _tinybert_general(cfg: DistillConfig, run_dir: Path, teacher: Teacher, layer_map: dict[int, int], metrics,
                      device, boards: NumberedTargets) -> tuple[BertForPreTraining, Projections, dict]:
    """TinyBERT's general distillation -> (student, projections W_e / W_h, record). Student and projections are
    drawn from the general seed alone, so the seeds of a study with `general_seed` pinned share one entry."""
    t = cfg.tinybert
    seed = cfg.general_seed_or_seed
    student = _tinybert_student(cfg, teacher.model, layer_map, seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        projections = Projections(t.hidden_size, teacher.model.config.hidden_size)
    settings = {"steps": t.general_steps, "batch_size": t.general_batch_size, "learning_rate": t.learning_rate,
                "attention": t.attention, "layer_map": {str(k): v for k, v in layer_map.items()}}
    board = boards.next("tinybert-general")  # numbered on a cache hit too: the later phases keep their numbers
    record = _general(cfg, run_dir, "tinybert", {"student": student.bert, "projections": projections},
                      {"encoder": teacher.model.bert}, settings, lambda: run_distillation(
                          DistillModel(student, projections), TinyBertIntermediateObjective(teacher, layer_map, t.attention),
                          _shard_batches(cfg, run_dir, teacher, t.general_batch_size, seed), t.general_steps,
                          t.learning_rate, metrics, device, tracking=board))
    return student, projections, record


def _general_only(cfg: DistillConfig, run_dir: Path, teacher: Teacher, metrics, device,
                  boards: NumberedTargets) -> dict:
    """`general_only`: the general students of the enabled methods into the cache, nothing else."""
    methods: dict = {}
    if cfg.distilbert.enabled and cfg.distilbert.general_steps:
        student = distilbert_student(teacher.model, cfg.distilbert.teacher_layers)
        methods["distilbert"] = {"general_distillation": _distilbert_general(cfg, run_dir, teacher, student, metrics,
                                                                            device, boards)}
    if cfg.tinybert.enabled and cfg.tinybert.general_steps:
        layer_map = _tinybert_layer_map(cfg, teacher.model.config.num_layers)
        methods["tinybert"] = {"general_distillation": _tinybert_general(cfg, run_dir, teacher, layer_map, metrics,
                                                                        device, boards)[2]}
    if not methods:
        raise ConfigError("general_only: no enabled DistilBERT or TinyBERT student has general_steps > 0")
    return {"general_only": True, "teacher_source": teacher.source, "device": str(device), "methods": methods}


def _task_model(encoder: torch.nn.Module, task: PreparedTask, cfg: DistillConfig, seed: int) -> TaskModel:
    torch.manual_seed(seed)
    return TaskModel(encoder, task.spec.task_type, task.num_labels, cfg.finetune.classifier_dropout, cfg.finetune.unpad)


def _score(model: TaskModel, task: PreparedTask, cfg: DistillConfig, pad_id: int) -> float:
    _, metrics, _ = predict(model, task, task.test, cfg.finetune, torch.device(cfg.device), pad_id)
    return float(metrics[task.spec.primary_metric])


def inference_clock(device: torch.device):
    """The clock inference is timed with: on a CPU with one intra-op thread the ops run in the calling thread, so its
    CPU time (`time.thread_time`) measures the work without the time the thread waited for a core another process
    held (on a shared machine wall-clock ratios swung 1.7-2.6x between runs of the same two models); elsewhere
    (several threads, CUDA) wall-clock time."""
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time, "thread CPU time (1 intra-op thread)"
    return time.perf_counter, "wall-clock time"


@torch.no_grad()
def inference_seconds(models: list[TaskModel], task: PreparedTask, cfg: DistillConfig, pad_id: int) -> list[float]:
    """Per model, the median over `speed_repeats` of the seconds one pass over the test inputs takes (after one
    warm-up pass), on `inference_clock`'s clock. The models take turns inside every repeat, so a busy shared machine
    slows them alike."""
    device = torch.device(cfg.device)
    clock, _ = inference_clock(device)
    features, size = task.test.features, cfg.finetune.eval_batch_size
    batches = [{k: v.to(device) for k, v in collate(features, list(range(s, min(len(features), s + size))), pad_id).items()}
               for s in range(0, len(features), size)]
    times: list[list[float]] = [[] for _ in models]
    for model in models:
        model.eval()
    for repeat in range(cfg.speed_repeats + 1):
        for model, model_times in zip(models, times):
            started = clock()
            for batch in batches:
                model(batch)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if repeat:
                model_times.append(clock() - started)
    return [statistics.median(t) for t in times]


def majority_accuracy(task: PreparedTask) -> float:
    """Test accuracy of always answering the most frequent training label: the floor a score (and a retention) is
    read against, since a student stuck on one class keeps ~100 % of a teacher that is barely above it."""
    majority = np.bincount(np.asarray(task.train.features.labels)).argmax()
    return float(np.mean(np.asarray(task.test.features.labels) == majority))


def _finetune(encoder, task, cfg: DistillConfig, pad_id: int, name: str) -> TaskModel:
    """Fine-tune `encoder` on the task with the config's fine-tuning settings; -> the TaskModel at its best dev
    epoch."""
    ft = cfg.finetune
    for p in encoder.parameters():  # a copy of the frozen teacher's encoder comes with requires_grad False
        p.requires_grad_(True)
    run = finetune_run(encoder, task, ft, ft.grid()[0], cfg.seed, torch.device(cfg.device), pad_id, name)
    model = TaskModel(encoder, task.spec.task_type, task.num_labels, ft.classifier_dropout, ft.unpad)
    model.load_state_dict(run.best_state)
    return model


def _fine_tuned_teacher(cfg: DistillConfig, run_dir: Path, pretrainer: BertForPreTraining, task: PreparedTask,
                        pad_id: int) -> tuple[TaskModel, dict]:
    """The teacher fine-tuned on the task, through the teacher cache (`teacher_cache`): the runs of a study that
    share the teacher, the task's encoded train and dev inputs, the fine-tuning settings and the seed (its students,
    with and without general distillation, its ablations) fine-tune it once. -> (the model, its record)."""
    with torch.random.fork_rng(devices=[]):  # a holder the result is loaded into: its initial weights do not count
        model = TaskModel(copy.deepcopy(pretrainer.bert), task.spec.task_type, task.num_labels,
                          cfg.finetune.classifier_dropout, cfg.finetune.unpad)
    for p in model.parameters():  # as _finetune leaves its model
        p.requires_grad_(True)
    rng = RngState(torch.device(cfg.device))

    def train() -> list[dict]:
        # the holder's own encoder copy is fine-tuned (same weights as the teacher's): no second copy of the teacher
        model.load_state_dict(_finetune(model.encoder, task, cfg, pad_id, "teacher").state_dict())
        rng.capture()
        return []

    inputs = {split: arrays_digest({f.name: getattr(getattr(task, split).features, f.name)
                                    for f in dataclasses.fields(getattr(task, split).features)})
              for split in ("train", "dev")}
    key_doc = {"kind": "fine-tuned teacher", "task": cfg.task, "teacher": state_digest({"encoder": pretrainer.bert}),
               "task_inputs": inputs, "pad_id": pad_id, "finetune": cfg.finetune.model_dump(mode="json"),
               "seed": cfg.seed, "device": torch.device(cfg.device).type, "threads": torch.get_num_threads(),
               "torch": torch.__version__}
    cache = StateCache(*resolve_cache(cfg.teacher_cache, run_dir, "teacher_cache"))
    record = cache.run(f"teacher-{cfg.task}", key_doc, {"model": model, "rng": rng}, train,
                       f"{cfg.task} teacher fine-tuning")
    rng.restore()  # a reused entry leaves the generator where training it would have
    return model.to(torch.device(cfg.device)), {k: v for k, v in record.items() if k != "final_loss"}


def _task_steps(features, cfg: DistillConfig, epochs: int, pad_id: int) -> tuple[TaskBatches, int]:
    batches = TaskBatches(features, cfg.finetune.batch_size, cfg.seed, pad_id)
    return batches, batches.steps_per_epoch * epochs


def _record(teacher_score, teacher_params, teacher_model, student, student_score, task, cfg, pad_id, **extra) -> dict:
    teacher_seconds, seconds = inference_seconds([teacher_model, student], task, cfg, pad_id)
    return {"teacher": {"score": teacher_score, "params": teacher_params, "seconds": teacher_seconds},
            "student": {"score": student_score, "params": num_parameters(student), "seconds": seconds},
            "retention": student_score / teacher_score if teacher_score else None,
            "speedup": teacher_seconds / seconds if seconds > 0 else None, **extra}


def run_distill(cfg: DistillConfig, run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    out_dir = run_dir / "distill"
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device(cfg.device)
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    teacher, tokenizer_path = load_teacher(cfg, run_dir, out_dir)
    _preflight(cfg, run_dir, teacher)
    metrics = out_dir / "metrics.jsonl"
    boards = NumberedTargets(cfg.tracking.target(out_dir / TENSORBOARD_DIR, f"{run_dir.resolve().name}/distill"))
    if cfg.general_only:
        return _write_results(out_dir, _general_only(cfg, run_dir, teacher, metrics, device, boards),
                              render_general_report)
    text_encoder = TextEncoder.from_file(tokenizer_path)
    pad_id = text_encoder.pad_id
    pretrainer: BertForPreTraining = teacher.model
    task = prepare_task(BUILTIN_TASKS[cfg.task](None), text_encoder, cfg.finetune)
    if task.spec.task_type not in ("classification", "pair-classification"):
        raise ConfigError(f"task {cfg.task}: task distillation supports classification tasks (got {task.spec.task_type})")

    teacher_task, teacher_record = _fine_tuned_teacher(cfg, run_dir, pretrainer, task, pad_id)
    teacher_score = _score(teacher_task, task, cfg, pad_id)
    teacher_params = num_parameters(teacher_task)
    task_teacher = Teacher(teacher_task, False, teacher.tokenizer_sha256, f"{teacher.source} fine-tuned on {cfg.task}")
    common = (teacher_score, teacher_params, teacher_task)
    results: dict = {"task": cfg.task, "primary_metric": task.spec.primary_metric, "teacher_source": teacher.source,
                     "teacher_has_mlm_head": teacher.has_mlm_head, "device": str(device),
                     "speed_clock": inference_clock(device)[1],
                     "majority_accuracy": majority_accuracy(task), "teacher_fine_tuning": teacher_record,
                     "methods": {}}
    n_teacher = pretrainer.config.num_layers

    if cfg.distilbert.enabled:
        d = cfg.distilbert
        student = distilbert_student(pretrainer, d.teacher_layers)
        general = None
        if d.general_steps:
            direct = _finetune(copy.deepcopy(student.bert), task, cfg, pad_id, "distilbert direct")
            general = _distilbert_general(cfg, run_dir, teacher, student, metrics, device, boards)
        tuned = _finetune(student.bert, task, cfg, pad_id, "distilbert")
        score = _score(tuned, task, cfg, pad_id)
        # without general distillation the direct twin is the same student fine-tuned the same way (byte-identical
        # by determinism), so it is not trained a second time
        direct_score = _score(direct, task, cfg, pad_id) if general is not None else score
        results["methods"]["distilbert"] = _record(
            *common, tuned, score, task, cfg, pad_id,
            student_direct={"score": direct_score, "note": "the same layer-copied student fine-tuned without "
                            "general distillation" + ("" if general is not None else " (general_steps 0: the "
                                                      "student itself)")},
            student_layers=student.config.num_layers, general_steps=d.general_steps, general_distillation=general)

    if cfg.pkd.enabled:
        p = cfg.pkd
        layer_map = pkd_map(n_teacher, p.student_layers, p.strategy)
        init = first_layers_student(pretrainer, p.student_layers)
        best = None
        for alpha in p.alphas:
            for temperature in p.temperatures:
                student = _task_model(copy.deepcopy(init.bert), task, cfg, cfg.seed)
                batches, steps = _task_steps(task.train.features, cfg, p.epochs, pad_id)
                run_distillation(DistillModel(student), PkdObjective(task_teacher, layer_map, alpha, temperature, p.beta),
                                 batches, steps, p.learning_rate, metrics, device,
                                 tracking=boards.next(f"pkd-alpha{alpha:g}-t{temperature:g}"))
                dev = predict(student, task, task.dev, cfg.finetune, device, pad_id)[1][task.spec.primary_metric]
                if best is None or dev > best[0]:
                    best = (dev, alpha, temperature, student)
        _, alpha, temperature, student = best
        direct = _finetune(copy.deepcopy(init.bert), task, cfg, pad_id, "pkd direct")
        results["methods"][f"pkd_{p.strategy}"] = _record(
            *common, student, _score(student, task, cfg, pad_id), task, cfg, pad_id,
            student_direct={"score": _score(direct, task, cfg, pad_id), "note": "the same first-k-layers student "
                            "fine-tuned without distillation"},
            student_layers=p.student_layers, layer_map=layer_map, chosen={"alpha": alpha, "temperature": temperature,
                                                                          "by": "dev " + task.spec.primary_metric})

    if cfg.tinybert.enabled:
        results["methods"]["tinybert"] = _tinybert(cfg, run_dir, teacher, task_teacher, task, text_encoder, common,
                                                   metrics, device, pad_id, boards)

    return _write_results(out_dir, results, render_report)


def _write_results(out_dir: Path, results: dict, render) -> dict:
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render(results), encoding="utf-8")
    return results


def _tinybert(cfg, run_dir, teacher, task_teacher, task, text_encoder, common, metrics, device, pad_id,
              boards: NumberedTargets) -> dict:
    t = cfg.tinybert
    pretrainer = teacher.model
    n_teacher = pretrainer.config.num_layers
    layer_map = _tinybert_layer_map(cfg, n_teacher)
    general = None
    if t.general_steps:
        student, projections, general = _tinybert_general(cfg, run_dir, teacher, layer_map, metrics, device, boards)
    else:
        student = _tinybert_student(cfg, pretrainer, layer_map, cfg.seed)
        projections = Projections(t.hidden_size, pretrainer.config.hidden_size)
    direct = _finetune(copy.deepcopy(student.bert), task, cfg, pad_id, "tinybert direct")
    train = task.train.features
    augmented = 0
    if t.augment.enabled:
        subset = train if t.augment.max_examples is None else dataclasses.replace(
            train, ids=train.ids[:t.augment.max_examples], segments=train.segments[:t.augment.max_examples],
            labels=train.labels[:t.augment.max_examples], num_examples=min(len(train), t.augment.max_examples))
        augmenter = Augmenter(pretrainer, text_encoder.tokenizer, teacher.has_mlm_head, t.augment.p,
                              t.augment.n_candidates, t.augment.copies, cfg.seed)
        extra = augment_features(subset, augmenter)
        augmented = len(extra.ids) - len(subset.ids)
        train = dataclasses.replace(train, ids=list(train.ids) + extra.ids[len(subset.ids):],
                                    segments=list(train.segments) + extra.segments[len(subset.ids):],
                                    labels=np.concatenate([train.labels, extra.labels[len(subset.ids):]]),
                                    num_examples=len(train.ids) + augmented)
    def task_distil(encoder, projections: Projections, features) -> TaskModel:
        """TinyBERT's task distillation: intermediate layers, then the prediction layer."""
        model = _task_model(encoder, task, cfg, cfg.seed)
        if t.intermediate_epochs:
            batches, steps = _task_steps(features, cfg, t.intermediate_epochs, pad_id)
            run_distillation(DistillModel(model, projections),
                             TinyBertIntermediateObjective(task_teacher, layer_map, t.attention),
                             batches, steps, t.learning_rate, metrics, device,
                             tracking=boards.next("tinybert-intermediate"))
        batches, steps = _task_steps(features, cfg, t.prediction_epochs, pad_id)
        run_distillation(DistillModel(model), TinyBertPredictionObjective(task_teacher, t.temperature), batches, steps,
                         t.learning_rate, metrics, device, tracking=boards.next("tinybert-prediction"))
        return model

    ablations = {"no_td": _score(direct, task, cfg, pad_id)}
    if t.ablations and augmented:
        no_da = task_distil(copy.deepcopy(student.bert), copy.deepcopy(projections), task.train.features)
        ablations["no_da"] = _score(no_da, task, cfg, pad_id)
    if t.ablations and t.general_steps:
        no_gd = task_distil(_tinybert_student(cfg, pretrainer, layer_map, cfg.general_seed_or_seed).bert,
                            Projections(t.hidden_size, pretrainer.config.hidden_size), train)
        ablations["no_gd"] = _score(no_gd, task, cfg, pad_id)
    model = task_distil(student.bert, projections, train)
    return _record(*common, model, _score(model, task, cfg, pad_id), task, cfg, pad_id,
                   student_direct={"score": ablations["no_td"], "note": "the same student (after general "
                                   "distillation when general_steps > 0) fine-tuned without task distillation"},
                   ablations=ablations,
                   student_shape={"layers": t.num_layers, "hidden": t.hidden_size, "heads": student.config.num_heads,
                                  "architecture": type(student).__name__},
                   layer_map=layer_map, attention_maps="pre-softmax scores" if t.attention else "not distilled",
                   augmented_examples=augmented, general_steps=t.general_steps, init=t.init,
                   general_distillation=general)


def render_general_report(results: dict) -> str:
    lines = [f"# General distillation only (teacher {results['teacher_source']}, device {results['device']})", "",
             "| student | steps | final loss | entry | reused | CPU-s where trained |", "|---|---|---|---|---|---|"]
    for name, m in results["methods"].items():
        g = m["general_distillation"]
        loss = f"{g['final_loss']:.4f}" if g["final_loss"] is not None else "—"
        lines.append(f"| {name} | {g['steps']} | {loss} | {g['cache']} | {'yes' if g['reused'] else 'no'} | "
                     f"{_cpu_seconds(g)} |")
    lines += ["", "A distill run of the same teacher, shards, students, settings, general seed and thread count starts "
              "task distillation from these entries.", ""]
    return "\n".join(lines)


def _cpu_seconds(record: dict) -> str:
    cost = record.get("cost")
    return f"{cost['cpu_s']:,.1f}" if cost else "—"


def _cached_phase_lines(results: dict) -> list[str]:
    """The phases kept in the caches (distillation/state_cache.py): where each came from, and what it cost."""
    phases = [("teacher fine-tuning", results.get("teacher_fine_tuning"))]
    phases += [(f"{name} general distillation", m.get("general_distillation")) for name, m in results["methods"].items()]
    rows = [(label, r) for label, r in phases if r]
    if not rows:
        return []
    lines = ["", "Phases trained once and reused by key (docs/distill.md):", "",
             "| phase | entry | reused | CPU-s where trained |", "|---|---|---|---|"]
    return lines + [f"| {label} | {r['cache'] or '— (no cache)'} | {'yes' if r['reused'] else 'no'} | "
                    f"{_cpu_seconds(r)} |" for label, r in rows]


def render_report(results: dict) -> str:
    lines = [f"# Distillation on {results['task']} ({results['primary_metric']}, test split)", "",
             f"Teacher: {results['teacher_source']} (MLM head trained: {results['teacher_has_mlm_head']}); "
             f"device {results['device']}. Always answering the most frequent training label scores "
             f"{results['majority_accuracy']:.4f} accuracy on the same test split.", "",
             "| method | teacher score | student score | retention | student without distillation | teacher params | "
             "student params | speed-up |", "|---|---|---|---|---|---|---|---|"]
    for name, r in results["methods"].items():
        retention = f"{r['retention']:.1%}" if r["retention"] is not None else "—"
        speed = f"{r['speedup']:.2f}×" if r["speedup"] is not None else "—"
        lines.append(f"| {name} | {r['teacher']['score']:.4f} | {r['student']['score']:.4f} | {retention} | "
                     f"{r['student_direct']['score']:.4f} | {r['teacher']['params']:,} | {r['student']['params']:,} | {speed} |")
    ablations = results["methods"].get("tinybert", {}).get("ablations")
    if ablations:
        names = {"no_gd": "no general distillation", "no_td": "no task distillation (fine-tuned directly)",
                 "no_da": "no data augmentation"}
        lines += ["", "TinyBERT ablations (student score):", "", "| variant | score |", "|---|---|",
                  f"| full | {results['methods']['tinybert']['student']['score']:.4f} |"]
        lines += [f"| {names[k]} | {v:.4f} |" for k, v in ablations.items()]
    lines += _cached_phase_lines(results)
    lines += ["", "Retention = student / teacher score; speed-up = teacher / student inference time over the test "
              "inputs (median of repeated passes, same batches; " + results.get("speed_clock", "wall-clock time") + "). Attention maps are distilled pre-softmax "
              "(TinyBERT). Multi-piece words are augmented with teacher-embedding neighbours (no GloVe here).", ""]
    return "\n".join(lines)
