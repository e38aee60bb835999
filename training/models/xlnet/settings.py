"""XLNet's settings and row, declared without torch: `XLNetSettings` (the recipe's `model.xlnet`, which loading a recipe
validates through training/models/members.py without importing the model; model.py adds its fields to the model's
config) and `MEMBER`, XLNet's row (core/member.py: architecture, capabilities, objectives, FLOPs terms, HF adapter),
from which members.py builds the family's tables.

    from training.models.xlnet.settings import XLNetSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..core.flops_terms import relative_stream
from ..core.member import HfRow, Member, ObjectiveInfo


@dataclass(frozen=True, config=RECIPE_SECTION)
class XLNetSettings:
    """XLNet's permutation language modelling: the recipe's `model.xlnet` (read with the shared `model` fields,
    relative_config.py) and the fields XLNetConfig adds to RelativeConfig.

        model:
          hidden_size: 768
          xlnet: {predict_fraction: 6, mem_len: 0}

    Defaults: partial prediction K = 6 (Yang et al. 2019, Section 2.3, "K = 6, 7 in our experiments") with no
    memory (the recipes set mem_len with `clm` shards and pretrain.stream_batches, which carry it across batches:
    training/streams.py)."""

    predict_fraction: int = Field(6, ge=1, description="K of partial prediction: only the last 1/K of each "
                                  "factorisation order is predicted")
    mem_len: int = Field(0, ge=0, description="content-stream states per layer `forward` returns as `new_mems` for "
                         "the next segment (0 = none); carried across batches with pretrain.stream_batches")


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("xlnet", XLNetSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """The content stream over memory + row, the query stream at the S / K targets, their logits, and the distance
    table's projection once per batch (training/flops.py)."""
    h, p = c.hidden_size, s / c.predict_fraction
    m = c.mem_len if carried else 0
    k, r = m + s, m + 2 * s
    layers = c.num_layers * (4 * k * h * h + relative_stream(c, s, k, r, True))
    query = c.num_layers * relative_stream(c, p, k, r, True)
    parts = [("content stream", layers, 2.0), ("query stream (targets only)", query, 2.0),
             ("logits at the targets", 2 * p * h * c.vocab_size, 2.0)]
    if rows:
        parts.append(("distance-table projection", c.num_layers * 2 * r * h * h / rows, 1.0))
    return parts


# XLNet undoes the stored masks and reads the text itself; a NotNext B segment of nsp-pairs is another document's
# text, which the loss does not predict across (see training/objectives/txl.py)
MEMBER = Member(
    name="XLNet", architecture="XLNetForPreTraining", model="training.models.xlnet.model",
    settings=MODEL_SUBSECTION, former_names=("XLNetForPretraining",),
    objectives=(ObjectiveInfo(
        name="plm", architecture="XLNetForPreTraining",
        instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
        needs="text (shard field input_ids; the stored masks are undone)",
        description="XLNet: permutation LM, two-stream attention, the last 1/K of each factorisation order "
                    "predicted", loss_function="permutation_lm"),),
    flops=flops_terms,
    hf=HfRow(adapter="xlnet", reads="XLNetLMHeadModel or XLNetModel", export="export_xlnet_to_hf",
             exports=("XLNetLMHeadModel",), layouts=("xlnet",), imports=(("xlnet", "import_xlnet_from_hf"),)),
)
