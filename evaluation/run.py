"""The evaluation stage: RUN/pretrain/final (or `evaluate.checkpoint`) + RUN/shards -> RUN/eval/{results.json,
report.md, *.png}.

    from evaluation.run import run_evaluate
    results = run_evaluate(recipe.evaluate, Path("runs/local"))
    # or: bertfactory evaluate configs/local.yaml --run-dir runs/local

Steps: (1) intrinsic MLM/NSP scores on the held-out shards (refused when the shards were built with another
tokenizer); (2) for each task, fine-tune the pretrained encoder, the same architecture from random weights with the
same budget, and score the train-majority class; (3) write the plots and report.md, then results.json last (so a
results.json on disk always belongs to a finished evaluation). Contract of results.json: docs/results.md.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from pathlib import Path

import torch

import bertfactory
from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from bertfactory.samples import resolve_input
from training.checkpoint import MODEL_FILE, load_pretrained

from .config import EvaluateConfig, FinetuneConfig
from .encode import TextEncoder
from .finetune import encode_split, finetune
from .intrinsic import evaluate_intrinsic
from .metrics import accuracy, binary_f1, majority_label, mcnemar
from .report import write_report
from .results import FORMAT as RESULTS_FORMAT
from .results import RESULTS_FILE, to_document, write_results
from .results import SCHEMA_VERSION as RESULTS_SCHEMA_VERSION
from .tasks.base import TaskData
from .tasks.movie_sentiment import load_movie_sentiment

logger = logging.getLogger(__name__)

TASK_LOADERS = {"movie_sentiment": load_movie_sentiment}


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


def majority_scores(data: TaskData) -> dict:
    label = majority_label([e.label for e in data.train])
    test = [e.label for e in data.test]
    return {
        "label": label,
        "label_name": data.label_names[label],
        "accuracy": accuracy(test, [label] * len(test)),
        "f1": binary_f1(test, [label] * len(test)) if len(data.label_names) == 2 else None,
        "dev_accuracy": accuracy([e.label for e in data.dev], [label] * len(data.dev)),
    }


def data_info(data: TaskData) -> dict:
    """Provenance, sizes and label counts of the splits as used (train already cut to max_train_examples)."""
    counts = {}
    for split in ("train", "dev", "test"):
        c = Counter(e.label for e in getattr(data, split))
        counts[split] = {name: c.get(i, 0) for i, name in enumerate(data.label_names)}
    return {"source_path": data.source["path"], "source_sha256": data.source["sha256"], "lines": data.source["lines"],
            "split_method": data.split_method, "sizes": data.sizes(), "label_names": list(data.label_names),
            "label_counts": counts, "dropped": dict(data.dropped)}


def evaluate_task(name: str, input_spec: str, checkpoint: Path, text_encoder: TextEncoder, ft: FinetuneConfig,
                  random_init: bool, device: torch.device, timings: dict) -> dict:
    data = TASK_LOADERS[name](resolve_input(input_spec))
    if ft.max_train_examples is not None and ft.max_train_examples < len(data.train):
        data = dataclasses.replace(data, train=data.train[: ft.max_train_examples])
    splits = {s: encode_split(text_encoder, getattr(data, s), ft.max_seq_len) for s in ("train", "dev", "test")}
    pad_id = text_encoder.special_ids["pad"]
    num_labels = len(data.label_names)
    logger.info("%s: %s examples (train/dev/test), dropped %s", name, data.sizes(), data.dropped)

    pretrained_model, _, _ = load_pretrained(checkpoint, device="cpu")
    out: dict = {"data": data_info(data)}
    backbone = pretrained_model.backbone()
    backbone_class, backbone_config = type(backbone), backbone.config
    result = finetune(backbone, splits["train"], splits["dev"], splits["test"], ft, device, pad_id,
                      num_labels, f"{name}/pretrained")
    out["pretrained"] = result.to_json()
    timings[f"{name}.pretrained"] = result.seconds
    pretrained_predictions = result.test_predictions
    del pretrained_model, backbone
    if random_init:
        torch.manual_seed(ft.seed)  # the random encoder depends only on the seed and the architecture
        result = finetune(backbone_class(backbone_config), splits["train"], splits["dev"], splits["test"], ft, device, pad_id,
                          num_labels, f"{name}/random_init")
        out["random_init"] = result.to_json()
        timings[f"{name}.random_init"] = result.seconds
        test = mcnemar(splits["test"].labels, pretrained_predictions, result.test_predictions)
        out["comparison"] = {
            "accuracy_difference": out["pretrained"]["accuracy"] - out["random_init"]["accuracy"],
            "pretrained_only_correct": test["a_only"],
            "random_init_only_correct": test["b_only"],
            "mcnemar_p_value": test["p_value"],
        }
    out["majority"] = majority_scores(data)
    return out


def run_evaluate(cfg: EvaluateConfig, run_dir: Path) -> dict:
    """Evaluate the checkpoint; writes RUN/eval and returns the results.json content."""
    threads_before = torch.get_num_threads()
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    try:
        return _evaluate(cfg, Path(run_dir))
    finally:  # in-process flows run other stages afterwards
        torch.set_num_threads(threads_before)


def _evaluate(cfg: EvaluateConfig, run_dir: Path) -> dict:
    started = time.perf_counter()
    device = resolve_device(cfg.device)
    checkpoint = cfg.checkpoint_path(run_dir)
    model, config, tokenizer_path = load_pretrained(checkpoint, device=device)
    positions = getattr(model.backbone().config, "max_position_embeddings", None)  # None: relative positions
    if positions is not None and cfg.finetune.max_seq_len > positions:
        raise ConfigError(f"evaluate.finetune.max_seq_len={cfg.finetune.max_seq_len} exceeds the checkpoint's "
                          f"max_position_embeddings={positions}")
    text_encoder = TextEncoder.from_file(tokenizer_path)
    logger.info("evaluating %s (%d parameters) on %s", checkpoint, sum(p.numel() for p in model.parameters()), device)
    timings: dict[str, float] = {}
    results: dict = {
        "format": RESULTS_FORMAT,
        "schema_version": RESULTS_SCHEMA_VERSION,
        "created_by": f"bertfactory {bertfactory.__version__} evaluation.run",
        "checkpoint": {
            "path": _display_path(checkpoint, run_dir),
            "model_sha256": sha256_file(checkpoint / MODEL_FILE),
            "tokenizer_sha256": text_encoder.sha256,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "model": config.to_dict(),
        },
        "config": cfg.model_dump(mode="json"),
        "tasks": {},
        "timings": timings,
    }
    if cfg.intrinsic.enabled:
        t = time.perf_counter()
        results["intrinsic"] = evaluate_intrinsic(model, run_dir / "shards", text_encoder.sha256, cfg.intrinsic, device)
        timings["intrinsic"] = time.perf_counter() - t
    del model
    for name in TASK_LOADERS:
        task_cfg = getattr(cfg.tasks, name)
        if task_cfg.enabled:
            results["tasks"][name] = evaluate_task(name, task_cfg.input, checkpoint, text_encoder, cfg.finetune,
                                                   cfg.random_init_baseline, device, timings)
    timings["total"] = time.perf_counter() - started
    results["timings"] = {k: round(v, 3) for k, v in timings.items()}
    out_dir = run_dir / "eval"
    doc = to_document(results, "the evaluation results")  # fail before writing anything if they break the contract
    write_report(doc, out_dir, run_dir / "pretrain" / "metrics.jsonl")
    doc = write_results(out_dir / RESULTS_FILE, doc)
    logger.info("wrote %s", out_dir / RESULTS_FILE)
    return doc
