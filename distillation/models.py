"""Students built from a teacher, the learnable width projections, and the teacher/tokenizer checks.

    student = distilbert_student(teacher)                        # every other layer, weights copied
    student = first_layers_student(teacher, 3)                   # BERT-PKD: the teacher's first k layers
    student = narrow_student(teacher.config, hidden_size=192, num_layers=2, intermediate_size=768, seed=0)
    proj = Projections(student_width=192, teacher_width=384)      # TinyBERT W_h (hidden) and W_e (embeddings)

Students are `BertForPreTraining` (the MLM/NSP heads copied from the teacher for DistilBERT, fresh otherwise), so
every existing stage (fine-tuning, export) takes them as they are.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from bertfactory.errors import ConfigError, ContractError
from training.models.bert import BertConfig, BertForPreTraining

from .layer_map import every_other


def check_tokenizers(teacher_sha256: str, student_sha256: str, teacher_source: str, student_source: str) -> None:
    """Teacher and student must read the same token ids: refuse different tokenizers, naming both."""
    if teacher_sha256 != student_sha256:
        raise ContractError(f"teacher tokenizer {teacher_source} (sha256 {teacher_sha256}) differs from the student's "
                            f"{student_source} (sha256 {student_sha256}); distillation needs one vocabulary")


def _copy_layers(student: BertForPreTraining, teacher: BertForPreTraining, teacher_layers: list[int]) -> None:
    """Copy embeddings, pooler, heads and the listed teacher layers (1-based) into the student's layers 1..n."""
    if teacher.config.share_layers != "none":
        raise ConfigError("layer-copy students need a teacher without shared layers (share_layers: none)")
    t_state = teacher.state_dict()
    s_state = student.state_dict()
    new = {}
    for name in s_state:
        if ".encoder.layer." in name:
            prefix, rest = name.split(".encoder.layer.", 1)
            index, tail = rest.split(".", 1)
            source = f"{prefix}.encoder.layer.{teacher_layers[int(index)] - 1}.{tail}"
        else:
            source = name
        new[name] = t_state[source].detach().clone()
    student.load_state_dict(new, strict=True)


def distilbert_student(teacher: BertForPreTraining, teacher_layers: list[int] | None = None) -> BertForPreTraining:
    """DistilBERT: the teacher's width with every other layer (or `teacher_layers`, 1-based), weights copied."""
    layers = teacher_layers if teacher_layers is not None else every_other(teacher.config.num_layers)
    bad = [l for l in layers if not 1 <= l <= teacher.config.num_layers]
    if bad or not layers:
        raise ConfigError(f"student layers {layers}: teacher layers are 1..{teacher.config.num_layers}")
    student = BertForPreTraining(dataclasses.replace(teacher.config, num_layers=len(layers)))
    _copy_layers(student, teacher, list(layers))
    return student


def first_layers_student(teacher: BertForPreTraining, num_layers: int) -> BertForPreTraining:
    """BERT-PKD's student: the teacher's first `num_layers` layers (and embeddings), weights copied."""
    return distilbert_student(teacher, list(range(1, num_layers + 1)))


def narrow_student(teacher_config: BertConfig, hidden_size: int, num_layers: int, intermediate_size: int,
                   num_heads: int | None = None, seed: int = 0) -> BertForPreTraining:
    """TinyBERT's student: the teacher's vocabulary and positions, its own width/depth, randomly initialised from
    `seed` (the global RNG is left untouched). num_heads None = the teacher's (attention distillation needs it)."""
    config = dataclasses.replace(teacher_config, hidden_size=hidden_size, num_layers=num_layers,
                                 intermediate_size=intermediate_size, embedding_size=None, share_layers="none",
                                 num_layer_groups=1,
                                 num_heads=num_heads if num_heads is not None else teacher_config.num_heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BertForPreTraining(config)


class Projections(nn.Module):
    """TinyBERT's learnable W_e (embeddings) and W_h (hidden states) from the student's width to the teacher's;
    identity (no parameters) when the widths are equal."""

    def __init__(self, student_width: int, teacher_width: int, std: float = 0.02):
        super().__init__()
        self.needed = student_width != teacher_width
        if self.needed:
            self.embeddings = nn.Linear(student_width, teacher_width)
            self.hidden = nn.Linear(student_width, teacher_width)
            for layer in (self.embeddings, self.hidden):
                nn.init.normal_(layer.weight, std=std)
                nn.init.zeros_(layer.bias)

    def embedding(self) -> nn.Module | None:
        return self.embeddings if self.needed else None

    def layer(self) -> nn.Module | None:
        return self.hidden if self.needed else None


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
