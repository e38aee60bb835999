"""The one fine-tuning loop, for every task type: an encoder + the task type's head (evaluation.heads), trained end
to end with AdamW, its loss and decoding chosen by the head, scored with the task type's metrics
(evaluation.scoring). The fine-tuning settings (evaluation.config.FinetuneConfig) decide the rest:

- learning-rate grid x seeds: every (lr, seed) is one run from a fresh encoder; the lr with the best mean dev
  score (primary metric) over seeds is the one reported, as the mean and std (sample std, ddof 1; 0 for one seed)
  of each test metric over its seeds;
- per run: warmup + linear decay or slanted triangular lr, layer-wise lr decay, gradual unfreezing; the dev split
  is scored after every epoch, the epoch with the best dev score (first on ties) is restored and scored on test,
  and training stops after `early_stopping_patience` epochs without a better dev score;
- the best run of the task (best dev score) keeps its weights in memory (`ModelResult.best_state`), to be saved
  by the caller when asked;
- `extra_splits` (e.g. another language's test set, evaluation.crosslingual) are scored by the same restored model
  as test, never used for a choice: `RunResult.extra_metrics[key]`, `ModelResult.extra_metrics(key)`.

    task = prepare_task(data, text_encoder, cfg)                 # encode once, reuse for every model and seed
    result = finetune_model(lambda seed: fresh_encoder(seed), task, cfg, device, name="pretrained")
    result.metrics()   # {"accuracy": mean, "accuracy_std": std, ...}

Deterministic on CPU: the head init and dropout follow torch.manual_seed(seed), the example order of epoch e is
numpy default_rng([seed, e]).permutation; the caller seeds a random-init encoder with the same seed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm

from training.optim import clip_gradients
from training.tracking import TrackingTarget, log_records

from .config import FinetuneConfig
from .encode import TextEncoder
from .heads import TaskModel, decode_squad, decode_tagging, raw_outputs
from .inputs import CLASSIFICATION_TYPES, Features, build_features, collate
from .finetune_schedule import layerwise_groups, schedule_rule, unfreeze
from .scoring import TaskSpec, confusion_matrix, gold, score
from .tasks.base import TaskData

logger = logging.getLogger(__name__)

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6


@dataclass
class Split:
    examples: tuple
    features: Features


@dataclass
class PreparedTask:
    """A task ready to fine-tune on: its spec and the encoded train/dev/test splits."""

    name: str
    spec: TaskSpec
    train: Split
    dev: Split
    test: Split

    @property
    def num_labels(self) -> int:
        return len(self.spec.label_names)


def task_spec(data: TaskData, primary: str | None = None) -> TaskSpec:
    v2 = data.task_type == "squad" and any(e.is_impossible for s in (data.train, data.dev, data.test) for e in s)
    return TaskSpec(data.task_type, tuple(data.label_names), v2, primary or "")


def prepare_task(data: TaskData, encoder: TextEncoder, cfg: FinetuneConfig, primary: str | None = None,
                 features: dict[str, Features] | None = None) -> PreparedTask:
    """Cut train to max_train_examples and dev/test to max_eval_examples, then encode (or take `features`)."""
    for split in ("train", "dev", "test"):
        if not getattr(data, split):
            raise ValueError(f"{data.name}: fine-tuning needs non-empty train/dev/test (got {data.sizes()})")
    if data.task_type == "tagging" and "O" not in data.label_names:
        raise ValueError(f"{data.name}: a tagging task needs an 'O' tag (tags: {', '.join(data.label_names)})")
    data = limit_examples(data, cfg)
    spec = task_spec(data, primary)
    splits = {}
    for split in ("train", "dev", "test"):
        examples = getattr(data, split)
        feats = features[split] if features else build_features(data.task_type, examples, encoder, cfg)
        splits[split] = Split(tuple(examples), feats)
    return PreparedTask(data.name, spec, splits["train"], splits["dev"], splits["test"])


def subsample(examples: tuple, limit: int | None) -> tuple:
    """At most `limit` examples: a random subset fixed by numpy default_rng(0), kept in split order (a prefix
    would be biased: several sources list one class first)."""
    if limit is None or limit >= len(examples):
        return examples
    keep = np.sort(np.random.default_rng(0).choice(len(examples), size=limit, replace=False))
    return tuple(examples[i] for i in keep)


def limit_examples(data: TaskData, cfg: FinetuneConfig) -> TaskData:
    """train cut to max_train_examples, dev and test to max_eval_examples (see `subsample`)."""
    cut = {"train": subsample(data.train, cfg.max_train_examples)}
    for split in ("dev", "test"):
        cut[split] = subsample(getattr(data, split), cfg.max_eval_examples)
    return dataclasses.replace(data, **cut)


@dataclass
class RunResult:
    """One fine-tuning run (one learning rate, one seed)."""

    seed: int
    learning_rate: float
    best_epoch: int  # 1-based
    dev_metrics: dict[str, float]
    test_metrics: dict[str, float]
    epochs: list[dict] = field(default_factory=list)  # epoch, train_loss, dev_score, lr_end, trained_depths
    steps: int = 0
    seconds: float = 0.0
    stopped_early: bool = False
    test_predictions: list | None = None
    confusion: list[list[int]] | None = None  # classification: gold x predicted on test
    best_state: dict[str, torch.Tensor] | None = None
    extra_metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # extra split key -> its metrics

    def dev_score(self, primary: str) -> float:
        return self.dev_metrics.get(primary, -math.inf)


@dataclass
class ModelResult:
    """All runs of one model on one task; `runs` are those of the chosen learning rate."""

    name: str
    primary: str
    learning_rate: float
    runs: list[RunResult]
    grid: list[dict]  # learning_rate, dev_mean, dev_std per grid point
    best_state: dict[str, torch.Tensor] | None = None
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        """Each test metric's mean over seeds under its own name, and `<metric>_std`. A metric missing in some
        run (e.g. a correlation of a constant prediction) is averaged over the runs that have it."""
        return aggregate([r.test_metrics for r in self.runs])

    def dev_metrics(self) -> dict[str, float]:
        return aggregate([r.dev_metrics for r in self.runs])

    def extra_metrics(self, key: str) -> dict[str, float]:
        """An extra split's metrics (see finetune_run), mean and std over the runs like `metrics`."""
        return aggregate([r.extra_metrics[key] for r in self.runs])

    def confusion(self) -> list[list[int]] | None:
        matrices = [np.asarray(r.confusion) for r in self.runs if r.confusion is not None]
        return np.sum(matrices, axis=0).tolist() if matrices else None


def aggregate(records: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in dict.fromkeys(k for r in records for k in r):
        values = [r[name] for r in records if name in r]
        out[name] = float(np.mean(values))
        out[f"{name}_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return out


@torch.no_grad()
def predict(model: TaskModel, task: PreparedTask, split: Split, cfg: FinetuneConfig, device: torch.device,
            pad_id: int, na_threshold: float | None = None) -> tuple[list, dict[str, float], list[float] | None]:
    """Decode the model's predictions for `split` and score them -> (predictions, metrics, na_probs)."""
    model.eval()
    features = split.features
    outputs: list = []
    # eval_batch_size counts model inputs; multiple-choice features hold several
    per_batch = max(1, cfg.eval_batch_size // max(1, _rows_per_feature(features)))
    for start in range(0, len(features), per_batch):
        indices = list(range(start, min(len(features), start + per_batch)))
        batch = {k: v.to(device) for k, v in collate(features, indices, pad_id).items()}
        outputs += raw_outputs(task.spec.task_type, model(batch), batch)
    t = task.spec.task_type
    na_probs = None
    if t == "tagging":
        predictions = decode_tagging(features, outputs, task.spec.label_names.index("O"))
    elif t == "squad":
        predictions, na_probs = decode_squad(features, outputs, [e.context for e in split.examples], cfg.n_best,
                                             cfg.max_answer_len)
    else:
        predictions = outputs
    metrics = score(task.spec, split.examples, predictions, na_probs, na_threshold)
    return predictions, metrics, na_probs


def _rows_per_feature(features: Features) -> int:
    return max((len(r) for r in features.feature_rows), default=1) if features.feature_rows is not None else 1


def fused_adamw(model: nn.Module) -> bool:
    """torch's fused AdamW runs on floating-point CPU and CUDA parameters; anything else takes the per-tensor loop."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in model.parameters())


def finetune_run(encoder: nn.Module, task: PreparedTask, cfg: FinetuneConfig, learning_rate: float, seed: int,
                 device: torch.device, pad_id: int, name: str, keep_state: bool = True,
                 extra_splits: Mapping[str, Split] | None = None) -> RunResult:
    """One run: fresh head on `encoder` (trained in place), the best dev epoch restored and scored on test and
    on each of `extra_splits` (encoded like the task's splits; SQuAD v2 uses the dev-tuned threshold there too)."""
    started = time.perf_counter()
    spec = task.spec
    torch.manual_seed(seed)
    model = TaskModel(encoder, spec.task_type, task.num_labels, cfg.classifier_dropout, cfg.unpad).to(device)
    train = task.train.features
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    # fused: one kernel per step for all parameters instead of a dozen ops per tensor (what transformers' Trainer
    # runs, adamw_torch_fused); on the demo's 1.5 M-parameter encoder the per-tensor loop was ~9 % of a step
    optimizer = torch.optim.AdamW(layerwise_groups(model, learning_rate, cfg.layerwise_lr_decay, cfg.weight_decay),
                                  lr=learning_rate, betas=ADAM_BETAS, eps=ADAM_EPS, fused=fused_adamw(model))
    scheduler = LambdaLR(optimizer, schedule_rule(cfg, total_steps))
    primary = spec.primary_metric

    result = RunResult(seed, learning_rate, best_epoch=0, dev_metrics={}, test_metrics={})
    best_score, best_state, stale = -math.inf, None, 0
    progress = tqdm(total=total_steps, desc=f"fine-tune {name}", unit="step", disable=None, leave=False)
    for epoch in range(cfg.epochs):
        depths = unfreeze(model, epoch) if cfg.gradual_unfreezing else None
        order = np.random.default_rng([seed, epoch]).permutation(len(train))
        model.train()
        losses = []
        for b in range(steps_per_epoch):
            indices = order[b * cfg.batch_size: (b + 1) * cfg.batch_size]
            batch = {k: v.to(device) for k, v in collate(train, indices, pad_id).items()}
            loss = model.loss(model(batch), batch)
            loss.backward()
            clip_gradients(model, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
            progress.update(1)
        result.steps += len(losses)
        _, dev_metrics, _ = predict(model, task, task.dev, cfg, device, pad_id)
        dev_score = dev_metrics.get(primary, -math.inf)
        record = {"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "dev_score": dev_score,
                  "lr_end": scheduler.get_last_lr()[-1]}
        if depths is not None:
            record["trained_depths"] = depths
        result.epochs.append(record)
        logger.info("%s epoch %d/%d: train loss %.4f, dev %s %.4f", name, epoch + 1, cfg.epochs, record["train_loss"],
                    primary, dev_score)
        if dev_score > best_score or best_state is None:  # strict: ties keep the earlier epoch
            best_score, stale = dev_score, 0
            result.best_epoch, result.dev_metrics = epoch + 1, dev_metrics
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            stale += 1
            if cfg.early_stopping_patience is not None and stale >= cfg.early_stopping_patience:
                result.stopped_early = epoch + 1 < cfg.epochs
                break
    progress.close()
    for p in model.parameters():
        p.requires_grad_(True)
    model.load_state_dict(best_state)
    threshold = result.dev_metrics.get("na_threshold") if spec.squad_v2 else None
    predictions, result.test_metrics, _ = predict(model, task, task.test, cfg, device, pad_id, threshold)
    result.test_predictions = predictions
    for key, split in (extra_splits or {}).items():
        result.extra_metrics[key] = predict(model, task, split, cfg, device, pad_id, threshold)[1]
    if spec.task_type in CLASSIFICATION_TYPES:
        result.confusion = confusion_matrix(gold(spec, task.test.examples), predictions, task.num_labels)
    result.best_state = best_state if keep_state else None
    result.seconds = time.perf_counter() - started
    logger.info("%s (lr %g, seed %d): best dev %s %.4f at epoch %d; test %s", name, learning_rate, seed, primary,
                best_score, result.best_epoch, {k: round(v, 4) for k, v in result.test_metrics.items()})
    return result


def finetune_model(make_encoder: Callable[[int], nn.Module], task: PreparedTask, cfg: FinetuneConfig,
                   device: torch.device, pad_id: int, name: str,
                   extra_splits: Mapping[str, Split] | None = None,
                   tracking: TrackingTarget | None = None, pool=None, cache=None) -> ModelResult:
    """Every (learning rate, seed) of the settings from a fresh `make_encoder(seed)`; see the module docstring.
    `tracking`: each run's epochs (train loss, dev score, lr) also go to `<target>/lr<lr>-seed<seed>`. `pool`
    (an evaluation.run_pool.RunPool, CPU only; not imported here: it imports this module): the runs in its worker
    processes at once, chosen among exactly as here. `cache` (an evaluation.run_cache.RunCache): runs it holds are
    reused, each new one is written to it as soon as it ends, so a stopped evaluation continues from them."""
    started = time.perf_counter()
    primary = task.spec.primary_metric
    grid = [(lr, seed) for lr in cfg.grid() for seed in cfg.seeds()]
    if pool is not None and device.type != "cpu":
        raise ValueError(f"{name}: fine-tuning worker processes run on the CPU only, not on {device}")
    reused = {(lr, seed): cache.get(name, lr, seed) for lr, seed in grid} if cache is not None else {}
    todo = [(lr, seed) for lr, seed in grid if reused.get((lr, seed)) is None]
    by_lr: dict[float, list[RunResult]] = {}
    best: list = []  # [run, (lr, seed)] of the best dev score so far
    ready: dict[tuple[float, int], RunResult] = {}
    position = 0  # runs are chosen among in grid order (ties keep the earlier), whichever finished first

    def take(lr: float, seed: int, run: RunResult) -> None:
        nonlocal position
        if cache is not None and reused.get((lr, seed)) is None:
            cache.put(name, lr, seed, run)
        ready[(lr, seed)] = run
        while position < len(grid) and grid[position] in ready:
            point = grid[position]
            run = ready.pop(point)
            position += 1
            log_records(tracking.child(f"lr{point[0]:g}-seed{point[1]}") if tracking else None, run.epochs, "epoch")
            if not best or run.dev_score(primary) > best[0].dev_score(primary):
                if best:
                    best[0].best_state = None
                best[:] = [run, point]
            else:
                run.best_state = None  # only the task's best run keeps its weights
            by_lr.setdefault(point[0], []).append(run)

    for point, run in reused.items():
        if run is not None:
            take(*point, run)
    if pool is None:  # one at a time, each encoder made when its run starts
        for lr, seed in todo:
            take(lr, seed, finetune_run(make_encoder(seed), task, cfg, lr, seed, device, pad_id,
                                        f"{name} lr={lr:g} seed={seed}", extra_splits=extra_splits))
    else:
        pool.run([dict(encoder=make_encoder(seed), task=task, cfg=cfg, learning_rate=lr, seed=seed, pad_id=pad_id,
                       name=f"{name} lr={lr:g} seed={seed}", extra_splits=extra_splits) for lr, seed in todo],
                 on_result=lambda i, run: take(*todo[i], run))
    best_run = best[0] if best else None
    if best_run is not None and best_run.best_state is None and cache is not None and cache.keep_states:
        best_run.best_state = cache.state(name, *best[1])  # a reused run: its weights wait on disk until needed
    summary = []
    for lr, runs in by_lr.items():
        scores = [r.dev_score(primary) for r in runs]
        finite = [s for s in scores if math.isfinite(s)]
        summary.append({"learning_rate": lr, "dev_mean": float(np.mean(finite)) if finite else None,
                        "dev_std": float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0})
    # max keeps the first of equal means; a rate whose runs have no dev score at all ranks last
    chosen = max(summary, key=lambda g: -math.inf if g["dev_mean"] is None else g["dev_mean"])["learning_rate"]
    return ModelResult(name, primary, chosen, by_lr[chosen], summary, best_run.best_state if best_run else None,
                       time.perf_counter() - started)
