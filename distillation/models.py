"""Students built from a teacher, the learnable width projections, and the teacher/tokenizer checks.

    student = distilbert_student(teacher)                        # every other layer, weights copied
    student = first_layers_student(teacher, 3)                   # BERT-PKD: the teacher's first k layers
    student = narrow_student(teacher.config, hidden_size=192, num_layers=2, intermediate_size=768, seed=0)
    proj = Projections(student_width=192, teacher_width=384)      # TinyBERT W_h (hidden) and W_e (embeddings)

Students are `BertForPreTraining` (the MLM/NSP heads copied from the teacher for DistilBERT, fresh otherwise), so
every existing stage (fine-tuning, export) takes them as they are. A ModernBERT teacher (ModernBertForMaskedLM, a
BertForPreTraining) gives ModernBERT students: layer-copied ones keep each copied layer's attention kind (the
student's global_attn_every_n_layers is chosen to reproduce them, layer_map.global_every_for), narrow ones the
teacher's pattern; `narrow_student(..., architecture="bert")` makes a BERT student of a ModernBERT teacher instead
(its vocabulary, maximum length, dropout and norm epsilon; learned positions, all layers global).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from bertfactory.errors import ConfigError, ContractError
from training.models.bert.model import BertConfig, BertForPreTraining
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM

from .layer_map import attention_kinds, every_other, global_every_for

STUDENT_ARCHITECTURES = ("teacher", "bert")  # narrow_student: the teacher's own member, or BERT


def check_tokenizers(teacher_sha256: str, student_sha256: str, teacher_source: str, student_source: str) -> None:
    """Teacher and student must read the same token ids: refuse different tokenizers, naming both."""
    if teacher_sha256 != student_sha256:
        raise ContractError(f"teacher tokenizer {teacher_source} (sha256 {teacher_sha256}) differs from the student's "
                            f"{student_source} (sha256 {student_sha256}); distillation needs one vocabulary")


def _student_class(config: BertConfig) -> type[BertForPreTraining]:
    return ModernBertForMaskedLM if isinstance(config, ModernBertConfig) else BertForPreTraining


def _layer_tails(state: dict, prefix: str, index: int) -> set[str]:
    return {name.split(f"{prefix}{index}.", 1)[1] for name in state if name.startswith(f"{prefix}{index}.")}


def _check_same_layer_parameters(s_state: dict, t_state: dict, teacher_layers: list[int]) -> None:
    """Refuse a copy whose student slot has other parameters than its teacher layer (ModernBERT's first layer has
    no attention norm, so only teacher layer 1 fits student layer 1 and no other slot)."""
    prefix = next(n for n in s_state if ".encoder.layer." in n).split(".encoder.layer.", 1)[0] + ".encoder.layer."
    for index, source in enumerate(teacher_layers):
        ours, theirs = _layer_tails(s_state, prefix, index), _layer_tails(t_state, prefix, source - 1)
        if ours != theirs:
            raise ConfigError(f"student layer {index + 1} cannot take teacher layer {source}: their parameters differ "
                              f"(only the student's: {sorted(ours - theirs)}, only the teacher's: "
                              f"{sorted(theirs - ours)}; a ModernBERT's first layer has no attention norm, so its "
                              "student's first layer must be the teacher's first)")


def _copy_layers(student: BertForPreTraining, teacher: BertForPreTraining, teacher_layers: list[int]) -> None:
    """Copy embeddings, pooler, heads and the listed teacher layers (1-based) into the student's layers 1..n."""
    if teacher.config.share_layers != "none":
        raise ConfigError("layer-copy students need a teacher without shared layers (share_layers: none)")
    t_state = teacher.state_dict()
    s_state = student.state_dict()
    _check_same_layer_parameters(s_state, t_state, teacher_layers)
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


def layer_copy_config(teacher_config: BertConfig,
                      teacher_layers: list[int] | None = None) -> tuple[BertConfig, list[int]]:
    """(the config, the teacher layers) of a student copying `teacher_layers` (1-based; None = every other) of a
    teacher of `teacher_config`; ConfigError when they do not fit it. Builds nothing (checked before any training)."""
    layers = teacher_layers if teacher_layers is not None else every_other(teacher_config.num_layers)
    bad = [l for l in layers if not 1 <= l <= teacher_config.num_layers]
    if bad or not layers:
        raise ConfigError(f"student layers {layers}: teacher layers are 1..{teacher_config.num_layers}")
    config = dataclasses.replace(teacher_config, num_layers=len(layers))
    if isinstance(config, ModernBertConfig):  # each copied layer keeps its kind, rotary base and window
        kinds = attention_kinds(teacher_config)
        every = global_every_for([kinds[l - 1] for l in layers], teacher_config.global_attn_every_n_layers)
        config = dataclasses.replace(config, global_attn_every_n_layers=every)
    return config, list(layers)


def distilbert_student(teacher: BertForPreTraining, teacher_layers: list[int] | None = None) -> BertForPreTraining:
    """DistilBERT: the teacher's width with every other layer (or `teacher_layers`, 1-based), weights copied."""
    config, layers = layer_copy_config(teacher.config, teacher_layers)
    student = _student_class(config)(config)
    _copy_layers(student, teacher, layers)
    return student


def first_layers_student(teacher: BertForPreTraining, num_layers: int) -> BertForPreTraining:
    """BERT-PKD's student: the teacher's first `num_layers` layers (and embeddings), weights copied."""
    return distilbert_student(teacher, list(range(1, num_layers + 1)))


def _bert_config_of(teacher_config: BertConfig) -> BertConfig:
    """A BERT config with a (ModernBERT) teacher's encoder fields: vocabulary, maximum length, segments, dropout,
    norm epsilon, initialisation range, padding id."""
    if type(teacher_config) is BertConfig:
        return teacher_config
    shared = ("vocab_size", "max_position_embeddings", "type_vocab_size", "hidden_dropout", "attention_dropout",
              "layer_norm_eps", "initializer_range", "pad_token_id")
    return BertConfig(hidden_size=teacher_config.hidden_size, num_layers=teacher_config.num_layers,
                      num_heads=teacher_config.num_heads, intermediate_size=teacher_config.intermediate_size,
                      **{name: getattr(teacher_config, name) for name in shared})


def narrow_student(teacher_config: BertConfig, hidden_size: int, num_layers: int, intermediate_size: int,
                   num_heads: int | None = None, seed: int = 0, architecture: str = "teacher") -> BertForPreTraining:
    """TinyBERT's student: the teacher's vocabulary and positions, its own width/depth, randomly initialised from
    `seed` (the global RNG is left untouched). num_heads None = the teacher's (attention distillation needs it).
    architecture: "teacher" = the teacher's member (a ModernBERT teacher's attention pattern, window and rotary
    bases), "bert" = a BERT student (the teacher's vocabulary, length, dropout; learned positions)."""
    config = narrow_student_config(teacher_config, hidden_size, num_layers, intermediate_size, num_heads, architecture)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _student_class(config)(config)


def narrow_student_config(teacher_config: BertConfig, hidden_size: int, num_layers: int, intermediate_size: int,
                          num_heads: int | None = None, architecture: str = "teacher") -> BertConfig:
    """The config of `narrow_student`'s student; ConfigError when the shape is not a valid model. Builds nothing
    (checked before any training)."""
    if architecture not in STUDENT_ARCHITECTURES:
        raise ConfigError(f"student architecture must be one of {', '.join(STUDENT_ARCHITECTURES)} (got "
                          f"{architecture!r})")
    base = _bert_config_of(teacher_config) if architecture == "bert" else teacher_config
    heads = num_heads if num_heads is not None else teacher_config.num_heads
    if hidden_size % heads:
        source = "tinybert.num_heads" if num_heads is not None else "the teacher's, tinybert.num_heads null"
        hint = " (attention distillation needs the teacher's head count)" if num_heads is None else ""
        raise ConfigError(f"tinybert.hidden_size {hidden_size} is not divisible by the student's {heads} attention "
                          f"heads ({source}); choose a multiple of {heads}{hint}")
    try:
        config = dataclasses.replace(base, hidden_size=hidden_size, num_layers=num_layers,
                                     intermediate_size=intermediate_size, embedding_size=None, share_layers="none",
                                     num_layer_groups=1, num_heads=heads)
    except ValueError as err:  # pydantic's ValidationError: the student's shape, in one line
        problems = "; ".join(e.get("msg", str(e)) for e in err.errors()) if hasattr(err, "errors") else str(err)
        raise ConfigError(f"tinybert: the student {hidden_size} wide, {num_layers} layers, {heads} heads is not a "
                          f"valid model: {problems}") from None
    return config


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
