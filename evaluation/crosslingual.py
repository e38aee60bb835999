"""Zero-shot cross-lingual transfer (XNLI-style): fine-tune on one language's task (train/dev of `source`), then
score the fine-tuned model, unchanged, on labelled data of the same task in other languages (any TaskData with the
same task type and label set, e.g. a TSV/JSONL/CoNLL file read by `load_target`).

Every (learning rate, seed) of the fine-tuning settings is one run; the learning rate with the best mean *source*
dev score is reported (target data never influences a choice, not even the epoch), each language's metrics as mean
and std over its seeds. In the evaluate stage the targets ride along with the source task's own fine-tuning
(`evaluate.crosslingual`, see evaluation.run); `zero_shot_transfer` is the same thing on its own.

    out = zero_shot_transfer(lambda seed: fresh_encoder(seed), english, [german, french], text_encoder, cfg, device)
    out["targets"]["de"]["accuracy"], out["source"]["accuracy"]

    german = load_target(CrosslingualTarget(task="movie_sentiment", input="de.tsv", language="de"), english)
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from bertfactory.errors import ContractError
from bertfactory.samples import resolve_input

from .config import CrosslingualTarget, FinetuneConfig
from .encode import TextEncoder
from .finetune import Split, finetune_model, prepare_task, subsample
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


def load_target(target: CrosslingualTarget, source: TaskData) -> TaskData:
    """`target.input` read as the source's task type with the source's label set (a label outside it is an error
    naming the file, line and value). Every example of the file is a test example (the file is not split, so a
    small file is not refused for a split left empty), since nothing of the target language is trained on or
    chosen by."""
    from .tasks.registry import load_task_file

    data = load_task_file(resolve_input(target.input), source.task_type, text_column=target.text_column,
                          text_b_column=target.text_b_column, label_column=target.label_column,
                          label_names=list(source.label_names) or None, language=target.language,
                          name=f"{source.name}:{target.key}", test_only=True)
    _check_compatible(source, data)
    return data


def target_splits(targets: dict[str, TaskData], text_encoder: TextEncoder, cfg: FinetuneConfig) -> dict[str, Split]:
    """Each target's test examples (at most max_eval_examples, a seeded subset) encoded for `text_encoder`."""
    splits = {}
    for key, target in targets.items():
        examples = subsample(tuple(target.test), cfg.max_eval_examples)
        splits[key] = Split(examples, build_features(target.task_type, examples, text_encoder, cfg))
    return splits


def zero_shot_transfer(make_encoder: Callable[[int], nn.Module], source: TaskData, targets: Sequence[TaskData],
                       text_encoder: TextEncoder, cfg: FinetuneConfig, device: torch.device) -> dict:
    for target in targets:
        _check_compatible(source, target)
    task = prepare_task(source, text_encoder, cfg)
    taken: set[str] = set()
    splits = target_splits({_target_key(t, taken): t for t in targets}, text_encoder, cfg)
    result = finetune_model(make_encoder, task, cfg, device, text_encoder.pad_id, f"{source.name} -> zero-shot",
                            extra_splits=splits)
    return {
        "task": source.name, "task_type": source.task_type, "primary_metric": task.spec.primary_metric,
        "source_language": source.language, "learning_rate": result.learning_rate,
        "seeds": [r.seed for r in result.runs], "source": result.metrics(),
        "targets": {key: result.extra_metrics(key) for key in splits},
    }
