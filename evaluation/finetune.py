"""Fine-tuning for sequence classification: a linear classifier on the encoder's pooled [CLS] vector (the
encoder's own pooler, dense + tanh, pretrained by next-sentence prediction when the encoder comes from a
checkpoint), trained end to end with AdamW and linear warmup/decay; after every epoch the dev split is scored
and the epoch with the best dev accuracy is the one scored on test.

    result = finetune(encoder, train, dev, test, cfg.finetune, device, pad_id=0, num_labels=2, name="pretrained")
    result.test_accuracy, result.epochs   # per-epoch train loss and dev accuracy

Deterministic on CPU: the classifier init and dropout follow torch.manual_seed(cfg.seed), the example order of
epoch e is numpy default_rng([seed, e]).permutation — so the same encoder weights, data and config give the same
curve. The caller seeds a random-init encoder itself (see evaluation.run).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from training.models.bert import BertModel
from training.optim import build_optimizer, build_scheduler, clip_gradients

from .config import FinetuneConfig
from .encode import pad_batch
from .metrics import accuracy, binary_f1, wilson_interval

logger = logging.getLogger(__name__)

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6


class SequenceClassifier(nn.Module):
    """encoder -> pooler([CLS]) -> dropout -> linear -> logits [B, num_labels]."""

    def __init__(self, encoder: BertModel, num_labels: int, dropout: float):
        super().__init__()
        self.bert = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, mean=0.0, std=encoder.config.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        return self.classifier(self.dropout(self.bert.pooler(hidden)))


@dataclass
class LabelledSet:
    """Encoded examples of one split: token id arrays and their labels."""

    sequences: list[np.ndarray]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.sequences)


@dataclass
class FinetuneResult:
    name: str
    best_epoch: int  # 1-based
    dev_accuracy: float
    test_accuracy: float
    test_f1: float | None  # binary tasks only
    epochs: list[dict] = field(default_factory=list)  # epoch, train_loss, dev_accuracy, lr_end
    step_losses: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    test_accuracy_ci95: tuple[float, float] | None = None
    test_predictions: np.ndarray | None = None  # for paired comparisons between models; not written out

    def to_json(self) -> dict:
        ci = list(self.test_accuracy_ci95) if self.test_accuracy_ci95 else None
        return {"accuracy": self.test_accuracy, "accuracy_ci95": ci, "f1": self.test_f1,
                "dev_accuracy": self.dev_accuracy, "best_epoch": self.best_epoch, "steps": self.steps,
                "epochs": self.epochs}


@torch.no_grad()
def predict(model: nn.Module, data: LabelledSet, batch_size: int, pad_id: int, device: torch.device) -> np.ndarray:
    model.eval()
    out = []
    for start in range(0, len(data), batch_size):
        batch = {k: v.to(device) for k, v in pad_batch(data.sequences[start : start + batch_size], pad_id).items()}
        out.append(model(**batch).argmax(-1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def finetune(encoder: BertModel, train: LabelledSet, dev: LabelledSet, test: LabelledSet, cfg: FinetuneConfig,
             device: torch.device, pad_id: int, num_labels: int, name: str) -> FinetuneResult:
    """Fine-tune `encoder` (modified in place) with a fresh classifier; returns dev/test scores of the best epoch."""
    if len(train) == 0 or len(dev) == 0 or len(test) == 0:
        raise ValueError(f"{name}: fine-tuning needs non-empty train/dev/test (got {len(train)}/{len(dev)}/{len(test)})")
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = SequenceClassifier(encoder, num_labels, cfg.classifier_dropout).to(device)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = build_optimizer(model, cfg.learning_rate, cfg.weight_decay, ADAM_BETAS, ADAM_EPS)
    scheduler = build_scheduler(optimizer, round(cfg.warmup_ratio * total_steps), total_steps)
    labels = torch.from_numpy(train.labels.astype(np.int64))

    result = FinetuneResult(name, best_epoch=0, dev_accuracy=-1.0, test_accuracy=math.nan, test_f1=None)
    best_state: dict[str, torch.Tensor] | None = None
    progress = tqdm(total=total_steps, desc=f"fine-tune {name}", unit="step", disable=None, leave=False)
    for epoch in range(cfg.epochs):
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train))
        model.train()
        epoch_losses = []
        for b in range(steps_per_epoch):
            rows = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            batch = {k: v.to(device) for k, v in pad_batch([train.sequences[r] for r in rows], pad_id).items()}
            logits = model(**batch)
            loss = F.cross_entropy(logits.float(), labels[rows].to(device))
            loss.backward()
            clip_gradients(model, cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            epoch_losses.append(float(loss.detach()))
            progress.update(1)
        dev_acc = accuracy(dev.labels, predict(model, dev, cfg.eval_batch_size, pad_id, device))
        mean_loss = float(np.mean(epoch_losses))
        result.epochs.append({"epoch": epoch + 1, "train_loss": mean_loss, "dev_accuracy": dev_acc,
                              "lr_end": scheduler.get_last_lr()[0]})
        result.step_losses += epoch_losses
        logger.info("%s epoch %d/%d: train loss %.4f, dev accuracy %.4f", name, epoch + 1, cfg.epochs, mean_loss, dev_acc)
        if dev_acc > result.dev_accuracy:  # strict: ties keep the earlier epoch
            result.dev_accuracy, result.best_epoch = dev_acc, epoch + 1
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    progress.close()
    assert best_state is not None
    model.load_state_dict(best_state)
    test_pred = predict(model, test, cfg.eval_batch_size, pad_id, device)
    result.test_accuracy = accuracy(test.labels, test_pred)
    result.test_predictions = test_pred
    result.test_accuracy_ci95 = wilson_interval(int((test_pred == test.labels).sum()), len(test))
    result.test_f1 = binary_f1(test.labels, test_pred) if num_labels == 2 else None  # results.json: f1 absent
    result.steps = total_steps
    result.seconds = time.perf_counter() - started
    logger.info("%s: best dev accuracy %.4f at epoch %d, test accuracy %.4f (%.1f s)", name, result.dev_accuracy,
                result.best_epoch, result.test_accuracy, result.seconds)
    return result


def encode_split(encoder, examples: Sequence, max_seq_len: int) -> LabelledSet:
    """Examples with .text and .label -> LabelledSet, using an evaluation.encode.TextEncoder."""
    return LabelledSet(encoder.encode([e.text for e in examples], max_seq_len),
                       np.array([e.label for e in examples], dtype=np.int64))
