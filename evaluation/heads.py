"""Task heads on a pretrained encoder, one per task type, with their loss and the decoding of their outputs into
example-level predictions. Every encoder with the BertModel interface works (`encoder(input_ids, token_type_ids,
attention_mask) -> [B, T, H]`, `.pooler`, `.config.hidden_size`), i.e. every architecture's `backbone()`. With
`unpad=True` (evaluate.finetune.unpad) the encoder is called with `unpad=True` and computes the real tokens only
(training/models/core/varlen.py); an encoder whose forward has no such argument is refused.

| task type                  | head                                        | loss                      | prediction            |
|----------------------------|---------------------------------------------|---------------------------|-----------------------|
| classification, pair-class.| linear on the pooled [CLS] (pooler: dense+tanh) | cross-entropy          | argmax label          |
| regression                 | linear (1 output) on the pooled [CLS]        | mean squared error        | the value             |
| tagging                    | linear on every token                       | cross-entropy on each word's first sub-token | first sub-token's argmax tag |
| squad                      | linear (2) on every token: start/end logits | mean of start and end cross-entropy | n-best span / no answer |
| multiple-choice            | linear (1) on the pooled [CLS] of each (passage+question, option) row | cross-entropy over the softmax of the options | argmax option |

    model = TaskModel(encoder, "classification", num_labels=3, dropout=0.1)
    outputs = model(batch); loss = model.loss(outputs, batch)

SQuAD decoding (`decode_squad`, BERT's run_squad): per window, the n_best start and n_best end logits; a span is
valid when both ends are context tokens, start <= end, it is at most max_answer_len tokens long and its start is
scored in this window (max context). The best valid span over all windows of a question is the answer (its text
cut from the context by character offsets). The no-answer score is the lowest [CLS] start+end logit over the
windows; `na_prob` = sigmoid(no-answer score - best span score), which the SQuAD v2 metric thresholds (the
threshold that maximises dev F1 is then applied to test).
"""

from __future__ import annotations

import inspect
import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .inputs import IGNORE_INDEX, Features


def has_unpadded_path(encoder: nn.Module) -> bool:
    """Whether `encoder(..., unpad=True)` runs on the real tokens only (varlen.py)."""
    return "unpad" in inspect.signature(encoder.forward).parameters


def _linear(hidden: int, outputs: int, std: float) -> nn.Linear:
    layer = nn.Linear(hidden, outputs)
    nn.init.normal_(layer.weight, mean=0.0, std=std)
    nn.init.zeros_(layer.bias)
    return layer


class TaskModel(nn.Module):
    """encoder + the head of `task_type`. forward(batch) -> {'logits': ...} (tagging: per token; squad: [B, T, 2];
    multiple-choice: [B, options] with -inf for missing options)."""

    def __init__(self, encoder: nn.Module, task_type: str, num_labels: int, dropout: float, unpad: bool = False):
        super().__init__()
        if unpad and not has_unpadded_path(encoder):
            raise ValueError(f"evaluate.finetune.unpad: the {type(encoder).__name__} encoder has no unpadded path "
                             "(training/models/core/varlen.py); set unpad false for it")
        self.encoder = encoder
        self.unpad = unpad
        self.task_type = task_type
        hidden = encoder.config.hidden_size
        std = getattr(encoder.config, "initializer_range", 0.02)
        outputs = {"regression": 1, "squad": 2, "multiple-choice": 1}.get(task_type, num_labels)
        if outputs < 1:
            raise ValueError(f"{task_type} needs at least one label (got {num_labels})")
        self.dropout = nn.Dropout(dropout)
        self.head = _linear(hidden, outputs, std)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        # unpadded: the encoder computes the real tokens only and returns [B, T, H] with zeros on padding, which
        # every head below ignores (tagging and squad mask it, the others read [CLS])
        extra = {"unpad": True} if self.unpad else {}
        hidden = self.encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], **extra)
        if self.task_type in ("tagging", "squad"):
            return {"logits": self.head(self.dropout(hidden)).float()}
        scores = self.head(self.dropout(self.encoder.pooler(hidden))).float()
        if self.task_type == "multiple-choice":
            index = batch["choice_index"]
            flat = scores[:, 0]
            gathered = flat[index.clamp(min=0)]
            return {"logits": gathered.masked_fill(index < 0, float("-inf"))}
        if self.task_type == "regression":
            return {"logits": scores[:, 0]}
        return {"logits": scores}

    def loss(self, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = outputs["logits"]
        if self.task_type == "regression":
            return F.mse_loss(logits, batch["labels"].float())
        if self.task_type == "tagging":
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["token_labels"].reshape(-1),
                                   ignore_index=IGNORE_INDEX)
        if self.task_type == "squad":
            start, end = logits.unbind(-1)
            width = start.shape[1]
            # mask padding so a span is never predicted there
            pad = batch["attention_mask"] == 0
            start, end = start.masked_fill(pad, float("-inf")), end.masked_fill(pad, float("-inf"))
            return (F.cross_entropy(start, batch["start_positions"].clamp(0, width - 1)) +
                    F.cross_entropy(end, batch["end_positions"].clamp(0, width - 1))) / 2
        return F.cross_entropy(logits, batch["labels"])


def raw_outputs(task_type: str, outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> list:
    """Per feature, what decoding needs (moved to the CPU): a label id, a value, a row's per-token tag ids, a
    row's start/end logits, or an option id."""
    logits = outputs["logits"].detach()
    if task_type == "regression":
        return logits.cpu().tolist()
    if task_type == "tagging":
        tags = logits.argmax(-1).cpu().numpy()
        lengths = batch["attention_mask"].sum(1).cpu().numpy()
        return [tags[i, : lengths[i]] for i in range(len(tags))]
    if task_type == "squad":
        arr = logits.cpu().numpy()
        lengths = batch["attention_mask"].sum(1).cpu().numpy()
        return [arr[i, : lengths[i]] for i in range(len(arr))]
    return logits.argmax(-1).cpu().tolist()


def decode_tagging(features: Features, row_tags: Sequence[np.ndarray], outside: int) -> list[list[int]]:
    """Per sentence, the tag id of every word: its first sub-token's prediction, `outside` (the O tag) for a word
    without a token."""
    out = []
    for starts, tags in zip(features.word_starts, row_tags):
        out.append([int(tags[s]) if s >= 0 else outside for s in starts])
    return out


def decode_squad(features: Features, row_logits: Sequence[np.ndarray], contexts: Sequence[str], n_best: int,
                 max_answer_len: int) -> tuple[list[str], list[float]]:
    """-> (answer text per example, na_prob per example); see the module docstring."""
    best_score = [-math.inf] * features.num_examples
    best_text = [""] * features.num_examples
    null_score = [math.inf] * features.num_examples
    for row, logits in enumerate(row_logits):
        example = int(features.row_example[row])
        start, end = logits[:, 0], logits[:, 1]
        null_score[example] = min(null_score[example], float(start[0] + end[0]))
        spans, is_max = features.token_spans[row], features.max_context[row]
        starts = np.argsort(-start, kind="stable")[:n_best]
        ends = np.argsort(-end, kind="stable")[:n_best]
        for s in starts:
            if spans[s, 0] < 0 or not is_max[s]:
                continue
            for e in ends:
                if spans[e, 0] < 0 or e < s or e - s + 1 > max_answer_len:
                    continue
                score = float(start[s] + end[e])
                if score > best_score[example]:
                    best_score[example] = score
                    best_text[example] = contexts[example][spans[s, 0]: spans[e, 1]]
    probs = []
    for example in range(features.num_examples):
        if best_score[example] == -math.inf:  # no valid span anywhere: certainly no answer
            probs.append(1.0)
        else:
            diff = null_score[example] - best_score[example]
            probs.append(1.0 / (1.0 + math.exp(-max(-700.0, min(700.0, diff)))))
    return best_text, probs
