"""Transformer-XL's settings and row, declared without torch: `TransformerXLSettings` (the recipe's
`model.transformer_xl`, which loading a recipe validates through training/models/members.py without importing the
model; model.py adds its fields to the model's config) and `MEMBER`, Transformer-XL's row (core/member.py:
architecture, capabilities, objectives, FLOPs terms, HF adapter), from which members.py builds the family's tables.

    from training.models.transformer_xl.settings import TransformerXLSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..core.flops_terms import relative_stream
from ..core.member import Member, ObjectiveInfo


@dataclass(frozen=True, config=RECIPE_SECTION)
class TransformerXLSettings:
    """Transformer-XL's segment-level recurrence: the recipe's `model.transformer_xl` (read with the shared `model`
    fields, relative_config.py) and the fields TransformerXLConfig adds to RelativeConfig. Defaults: a memory of
    64 states per layer and 2 segments per row (the recipes use one segment per row and carry the memory across
    batches with pretrain.stream_batches: training/streams.py)."""

    mem_len: int = Field(64, ge=0, description="hidden states per layer cached from the previous segment "
                         "(stop-gradient) and attended to by the next: each query attends to at most mem_len + "
                         "its segment's earlier tokens")
    train_segments: int = Field(2, ge=1, description="equal consecutive segments `forward` cuts each training row "
                                "into (the txl_clm objective); the memory carries from one to the next (and, with "
                                "pretrain.stream_batches, to the next batch)")


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("transformer_xl", TransformerXLSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """train_segments segments over their memory, logits at every token, the distance tables once per batch."""
    h, n = c.hidden_size, c.train_segments
    seg = s / n
    layers = table = 0.0
    for index in range(n):
        memory = 0.0 if c.mem_len <= 0 else c.mem_len if carried else min(c.mem_len, index * seg)
        k = memory + seg
        layers += c.num_layers * (4 * k * h * h + relative_stream(c, seg, k, k + 1, False))
        table += c.num_layers * 2 * (k + 1) * h * h
    parts = [("layers over memory + segment", layers, 2.0),
             ("logits at every token", 2 * s * h * c.vocab_size, 2.0)]
    if rows:
        parts.append(("distance-table projection", table / rows, 1.0))
    return parts


MEMBER = Member(
    name="Transformer-XL", architecture="TransformerXLLM", model="training.models.transformer_xl.model",
    settings=MODEL_SUBSECTION,
    objectives=(ObjectiveInfo(
        name="txl_clm", architecture="TransformerXLLM",
        instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
        needs="text in order (shard field input_ids; the stored masks are undone)",
        description="Transformer-XL: causal LM over consecutive segments of each instance with a carried memory",
        loss_function="recurrent_clm"),),
    flops=flops_terms,
    no_hf="transformers 5 has no Transformer-XL",
)
