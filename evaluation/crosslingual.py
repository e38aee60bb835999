"""Zero-shot cross-lingual transfer (XNLI-style): fine-tune on one language's task (train/dev of `source`), then
score the fine-tuned model, unchanged, on the test split of the same task in other languages (`targets`, any
TaskData with the same task type and label set — e.g. read with load_task_file(..., language="de")).

Every (learning rate, seed) of the recipe is one run; the learning rate with the best mean *source* dev score is
reported (target data never influences a choice), each language's metrics as mean and std over its seeds.

    out = zero_shot_transfer(lambda seed: fresh_encoder(seed), english, [german, french], text_encoder, cfg, device)
    out["targets"]["de"]["accuracy"], out["source"]["accuracy"]
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from bertfactory.errors import ContractError

from .config import FinetuneConfig
from .encode import TextEncoder
from .finetune import Split, aggregate, finetune_run, predict, prepare_task, subsample
from .heads import TaskModel
from .inputs import build_features
from .tasks.base import TaskData


def _check_compatible(source: TaskData, target: TaskData) -> None:
    if target.task_type != source.task_type:
        raise ContractError(f"cross-lingual target {target.name} ({target.language}) is a {target.task_type} task but "
                            f"the source {source.name} ({source.language}) is {source.task_type}")
    if tuple(target.label_names) != tuple(source.label_names):
        raise ContractError(f"cross-lingual target {target.name} ({target.language}) has labels "
                            f"{list(target.label_names)} but the source {source.name} ({source.language}) has "
                            f"{list(source.label_names)}; zero-shot transfer needs the same label set in the same order")
    if not target.test:
        raise ContractError(f"cross-lingual target {target.name} ({target.language}) has no test examples")


def _target_key(target: TaskData, taken: set[str]) -> str:
    key = target.language if target.language not in taken else f"{target.language}:{target.name}"
    taken.add(key)
    return key


def zero_shot_transfer(make_encoder: Callable[[int], nn.Module], source: TaskData, targets: Sequence[TaskData],
                       text_encoder: TextEncoder, cfg: FinetuneConfig, device: torch.device) -> dict:
    for target in targets:
        _check_compatible(source, target)
    task = prepare_task(source, text_encoder, cfg)
    target_splits = {}
    taken: set[str] = set()
    for target in targets:
        examples = subsample(tuple(target.test), cfg.max_eval_examples)
        target_splits[_target_key(target, taken)] = Split(examples, build_features(
            target.task_type, examples, text_encoder, cfg))
    primary = task.spec.primary_metric
    by_lr: dict[float, list[dict]] = {}
    for lr in cfg.grid():
        for seed in cfg.seeds():
            encoder = make_encoder(seed)
            run = finetune_run(encoder, task, cfg, lr, seed, device, text_encoder.pad_id,
                               f"{source.name} -> zero-shot lr={lr:g} seed={seed}")
            model = TaskModel(encoder, task.spec.task_type, task.num_labels, cfg.classifier_dropout).to(device)
            model.load_state_dict(run.best_state)  # the restored best-dev epoch (finetune_run already loaded it)
            scores = {key: predict(model, task, split, cfg, device, text_encoder.pad_id,
                                   run.dev_metrics.get("na_threshold"))[1] for key, split in target_splits.items()}
            by_lr.setdefault(lr, []).append({"seed": seed, "dev": run.dev_metrics.get(primary, -math.inf),
                                             "source": run.test_metrics, "targets": scores})
    chosen = max(by_lr, key=lambda lr: float(np.mean([r["dev"] for r in by_lr[lr]])))
    runs = by_lr[chosen]
    return {
        "task": source.name, "task_type": source.task_type, "primary_metric": primary,
        "source_language": source.language, "learning_rate": chosen, "seeds": [r["seed"] for r in runs],
        "source": aggregate([r["source"] for r in runs]),
        "targets": {key: aggregate([r["targets"][key] for r in runs]) for key in target_splits},
    }
