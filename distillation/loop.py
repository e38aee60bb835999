"""The one distillation loop: a student (+ TinyBERT's projections) trained by training.trainer.Trainer on an
objective that runs the frozen teacher and combines pluggable losses (losses.py). The objectives:

- `DistilBertObjective` (general, pretraining shards): w_ce * T^2 KL on the MLM logits + w_mlm * MLM loss +
  w_cos * cosine on the last hidden states (defaults 5 / 2 / 1, T = 2). Needs a teacher with a trained MLM head.
- `TinyBertIntermediateObjective` (general on shards, or task-level on task inputs): embedding, pre-softmax
  attention and hidden-state MSE through the layer map g(m) and the projections W_e / W_h; the scores are compared
  on the pairs both mapped layers attend (a ModernBERT local layer's window).
- `TinyBertPredictionObjective` (task): soft cross-entropy of the student's task logits against the teacher's (T).
- `PkdObjective` (task): alpha T^2 KL + (1 - alpha) CE + beta * patient loss on the mapped layers' [CLS].

    model = DistillModel(student, Projections(192, 384))
    records = run_distillation(model, TinyBertIntermediateObjective(teacher, g), batches, steps=100, ...)

Batches: training.data.PretrainBatches (shards) or `TaskBatches` (a task's encoded features); both are
deterministic in (seed, step). Every objective returns `loss` and its parts as `*_loss` (metrics.jsonl).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertfactory.errors import ConfigError
from training.data import Position
from training.models.bert.model import BertForPreTraining, gather_masked
from training.optim import build_optimizer, build_scheduler
from training.trainer import Trainer
from training.tracking import TrackingTarget
from training.trainer_settings import TrainerSettings

from . import losses
from .layer_map import check_map
from .models import Projections
from .outputs import attended_pairs, encoder_outputs


@dataclass
class Teacher:
    """A frozen teacher: the model (BertForPreTraining, or evaluation.heads.TaskModel once fine-tuned), whether its
    MLM head was trained (an HF BertModel such as MiniLM imports with a fresh, untrained one), its tokenizer."""

    model: nn.Module
    has_mlm_head: bool
    tokenizer_sha256: str
    source: str

    def __post_init__(self) -> None:
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    def require_mlm_head(self, method: str) -> None:
        if not self.has_mlm_head:
            raise ConfigError(f"{method} distils MLM logits, but the teacher {self.source} has no trained MLM head "
                              "(an HF BertModel such as MiniLM); use hidden-state/attention distillation instead "
                              "(method tinybert with stage intermediate, or DistilBERT's cosine loss alone)")


class DistillModel(nn.Module):
    """What the optimiser trains: the student and (TinyBERT) the projections to the teacher's width."""

    def __init__(self, student: nn.Module, projections: Projections | None = None):
        super().__init__()
        self.student = student
        self.projections = projections if projections is not None else Projections(1, 1)

    def untrained_parameter_names(self) -> list[str]:
        """None frozen (training/models/registry.py): a part the distillation loss does not read (the student's
        pooler in general distillation) gets no gradient and no update either way; distillation runs in one
        process, so no DDP wrapper needs the set."""
        return []


def _backbone(model: nn.Module) -> nn.Module:
    """The encoder of a BertForPreTraining or of a TaskModel."""
    return model.bert if isinstance(model, BertForPreTraining) else model.encoder


class DistilBertObjective:
    def __init__(self, teacher: Teacher, temperature: float = 2.0, alpha_ce: float = 5.0, alpha_mlm: float = 2.0,
                 alpha_cos: float = 1.0):
        if alpha_ce:
            teacher.require_mlm_head("DistilBERT's soft cross-entropy (alpha_ce > 0)")
        self.teacher, self.temperature = teacher, temperature
        self.alpha_ce, self.alpha_mlm, self.alpha_cos = alpha_ce, alpha_mlm, alpha_cos

    @staticmethod
    def _mlm(model: BertForPreTraining, batch: dict[str, torch.Tensor]):
        hidden = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        masked, labels = gather_masked(hidden, batch["masked_positions"], batch["masked_labels"])
        return hidden, model.mlm_head(masked, model.bert.embeddings.word_embeddings.weight), labels

    def __call__(self, model: DistillModel, batch: dict[str, torch.Tensor]) -> dict:
        with torch.no_grad():
            t_hidden, t_logits, _ = self._mlm(self.teacher.model, batch)
        s_hidden, s_logits, labels = self._mlm(model.student, batch)
        ce = losses.soft_kl(s_logits, t_logits, self.temperature)
        mlm = F.cross_entropy(s_logits.float(), labels)
        cos = losses.hidden_cosine(s_hidden, t_hidden, batch["attention_mask"])
        loss = self.alpha_ce * ce + self.alpha_mlm * mlm + self.alpha_cos * cos
        with torch.no_grad():
            correct = (s_logits.argmax(-1) == labels).sum()
        return {"loss": loss, "ce_loss": ce, "mlm_loss": mlm, "cos_loss": cos, "mlm_correct": correct,
                "mlm_count": torch.tensor(labels.numel())}


class TinyBertIntermediateObjective:
    """Sum over m = 1..M of attention MSE(student layer m, teacher layer g(m)) and hidden MSE(W_h s_m, t_g(m)),
    plus embedding MSE(W_e s_0, t_0) when g maps 0 -> 0. `attention` False = hidden states only (e.g. teachers
    with another number of heads)."""

    def __init__(self, teacher: Teacher, layer_map: dict[int, int], attention: bool = True):
        self.teacher, self.attention = teacher, attention
        self.layer_map = layer_map

    def __call__(self, model: DistillModel, batch: dict[str, torch.Tensor]) -> dict:
        t_backbone, s_backbone = _backbone(self.teacher.model), _backbone(model.student)
        check_map(self.layer_map, t_backbone.config.num_layers, s_backbone.config.num_layers, "TinyBERT layer map")
        if self.attention and t_backbone.config.num_heads != s_backbone.config.num_heads:
            raise ConfigError(f"attention distillation needs the teacher's number of heads "
                              f"({t_backbone.config.num_heads}) in the student (has {s_backbone.config.num_heads}); "
                              "set the student's num_heads or distil hidden states only (attention: false)")
        with torch.no_grad():
            t_states, t_scores = encoder_outputs(t_backbone, batch, self.attention)
        s_states, s_scores = encoder_outputs(s_backbone, batch, self.attention)
        mask = batch["attention_mask"]
        if self.attention:  # the pairs each layer attends (a ModernBERT local layer: its window only)
            t_pairs = attended_pairs(t_backbone.config, mask)
            s_pairs = attended_pairs(s_backbone.config, mask)
        zero = s_states[0].new_zeros(())
        emb, hid, att = zero, zero, zero
        for m, g in self.layer_map.items():
            if m == 0:
                emb = emb + losses.hidden_mse(s_states[0], t_states[g], model.projections.embedding(), mask)
                continue
            hid = hid + losses.hidden_mse(s_states[m], t_states[g], model.projections.layer(), mask)
            if self.attention and g > 0:
                att = att + losses.attention_mse(s_scores[m - 1], t_scores[g - 1], mask,
                                                 t_pairs[g - 1] & s_pairs[m - 1])
        return {"loss": emb + hid + att, "emb_loss": emb, "hidden_loss": hid, "attn_loss": att}


def task_forward(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """A sequence-classification TaskModel's logits and every hidden state (for the patient loss); a TaskModel made
    with `unpad` (evaluate.finetune.unpad) computes the real tokens only, its states zero on padding."""
    extra = {"unpad": True} if getattr(model, "unpad", False) else {}
    last, states = model.encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                 output_hidden_states=True, **extra)
    return model.head(model.dropout(model.encoder.pooler(last))).float(), states


class TinyBertPredictionObjective:
    def __init__(self, teacher: Teacher, temperature: float = 1.0):
        self.teacher, self.temperature = teacher, temperature

    def __call__(self, model: DistillModel, batch: dict[str, torch.Tensor]) -> dict:
        with torch.no_grad():
            t_logits, _ = task_forward(self.teacher.model, batch)
        s_logits, _ = task_forward(model.student, batch)
        loss = losses.soft_cross_entropy(s_logits, t_logits, self.temperature)
        with torch.no_grad():
            correct = (s_logits.argmax(-1) == batch["labels"]).sum()
        return {"loss": loss, "pred_loss": loss, "task_correct": correct, "task_count": torch.tensor(len(s_logits))}


class PkdObjective:
    def __init__(self, teacher: Teacher, layer_map: dict[int, int], alpha: float = 0.5, temperature: float = 10.0,
                 beta: float = 100.0):
        self.teacher, self.layer_map = teacher, layer_map
        self.alpha, self.temperature, self.beta = alpha, temperature, beta

    def __call__(self, model: DistillModel, batch: dict[str, torch.Tensor]) -> dict:
        with torch.no_grad():
            t_logits, t_states = task_forward(self.teacher.model, batch)
        s_logits, s_states = task_forward(model.student, batch)
        check_map(self.layer_map, len(t_states) - 1, len(s_states) - 1, "PKD layer map")
        pairs = sorted(self.layer_map.items())
        out = losses.pkd_loss(s_logits, t_logits, batch["labels"], self.alpha, self.temperature, self.beta,
                              [s_states[j][:, 0] for j, _ in pairs], [t_states[i][:, 0] for _, i in pairs])
        with torch.no_grad():
            out["task_correct"] = (s_logits.argmax(-1) == batch["labels"]).sum()
            out["task_count"] = torch.tensor(len(s_logits))
        return out


class TaskBatches:
    """Batches of a task's encoded features (evaluation.inputs) with the interface Trainer reads from
    PretrainBatches: epoch e visits the features in numpy default_rng([seed, e]).permutation order."""

    def __init__(self, features, batch_size: int, seed: int, pad_id: int):
        from evaluation.inputs import collate

        if len(features) < batch_size:
            raise ConfigError(f"{len(features)} task examples are fewer than one batch (batch_size {batch_size})")
        self.features, self.batch_size, self.seed, self.pad_id = features, batch_size, seed, pad_id
        self.steps_per_epoch = len(features) // batch_size
        self._collate = collate

    def position(self, step: int) -> Position:
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        return Position(step, epoch, in_epoch, 0)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        pos = self.position(step)
        order = np.random.default_rng([self.seed, pos.epoch]).permutation(len(self.features))
        rows = order[pos.batch_in_epoch * self.batch_size:(pos.batch_in_epoch + 1) * self.batch_size]
        return self._collate(self.features, rows, self.pad_id)


def run_distillation(model: DistillModel, objective, batches, steps: int, learning_rate: float, metrics_path: Path,
                     device: torch.device | str = "cpu", warmup_steps: int = 0, weight_decay: float = 0.01,
                     log_every: int = 10, max_grad_norm: float = 1.0,
                     tracking: TrackingTarget | None = None) -> list[dict]:
    """Train `model` for `steps` steps with AdamW + warmup/linear decay through training.trainer.Trainer; returns
    the metrics records it wrote to `metrics_path` (one per `log_every` steps), which also go to `tracking`."""
    if steps < 1:
        raise ConfigError(f"distillation steps must be >= 1 (got {steps})")
    device = torch.device(device)
    model.to(device)
    optimizer = build_optimizer(model, learning_rate, weight_decay, (0.9, 0.999), 1e-6)
    scheduler = build_scheduler(optimizer, warmup_steps, steps)
    metrics_path = Path(metrics_path)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    start = metrics_path.stat().st_size if metrics_path.exists() else 0
    settings = TrainerSettings(max_steps=steps, metrics_path=metrics_path, max_grad_norm=max_grad_norm,
                               log_every=log_every, tracking=tracking)
    trainer = Trainer(model, optimizer, scheduler, batches, objective, device, settings)
    trainer.train()
    with open(metrics_path, encoding="utf-8") as f:
        f.seek(start)
        records = [json.loads(line) for line in f if line.strip()]
    if any(not math.isfinite(r.get("loss", math.nan)) for r in records):
        raise FloatingPointError(f"distillation loss is not finite (see {metrics_path})")
    return records
