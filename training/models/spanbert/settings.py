"""SpanBERT's settings and row, declared without torch: `SpanBertSettings` (the recipe's `model.spanbert`, which loading
a recipe validates through training/models/members.py without importing the model; model.py adds its fields to the
model's config) and `MEMBER`, SpanBERT's row (core/member.py: architecture, capabilities, objectives, FLOPs terms, HF
adapter), from which members.py builds the family's tables.

    from training.models.spanbert.settings import SpanBertSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..bert.settings import bert_flops_terms
from ..core.capabilities import STACKING
from ..core.member import HfRow, Member, ObjectiveInfo


@dataclass(frozen=True, config=RECIPE_SECTION)
class SpanBertSettings:
    """The recipe's `model.spanbert`: the span boundary objective's head (the encoder is the rest of the `model`
    section), stored in checkpoints as SpanBertConfig's sbo_* fields. Defaults are those of SpanBERT's released
    pretraining command (facebookresearch/SpanBERT pretraining/README.md: --max-pair-targets 15
    --pair-positional-embedding-size 200). Span masking itself is a preprocessing setting
    (preprocess.masking.policy: span).

        model:
          spanbert: {max_span_tokens: 15, position_size: 200}"""

    max_span_tokens: int = Field(15, ge=1, description="relative positions the SBO head embeds: the first this "
                                 "many tokens of a masked span get an SBO target (the rest only the MLM loss)")
    position_size: int = Field(200, ge=1, description="width of the SBO head's relative position embeddings")


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("spanbert", SpanBertSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """BERT's encoder and MLM head, and the SBO head at every masked token (training/flops.py)."""
    h, e = c.hidden_size, c.embedding_width
    sbo = f * s * (2 * (2 * h + c.sbo_position_size) * h + 2 * h * e + 2 * e * c.vocab_size)
    return bert_flops_terms(info, c, s, f * s) + [("span boundary head", sbo, 2.0)]


MEMBER = Member(
    name="SpanBERT", architecture="SpanBertForPreTraining", model="training.models.spanbert.model",
    supports=frozenset({STACKING}), settings=MODEL_SUBSECTION,
    # SpanBERT trains single segments; any format of contiguous real text feeds MLM + SBO, whose targets are the
    # masked spans (best built with preprocess.masking.policy span). nsp-pairs are accepted because the loss never
    # reads nsp_label and the [SEP] between A and B only bounds spans;
    # sop-pairs are not: half their rows put B before A, text order no loss here accounts for.
    objectives=(ObjectiveInfo(
        name="mlm_sbo", architecture="SpanBertForPreTraining",
        instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs"),
        needs="masked spans (shard fields mask_positions/mask_tokens; preprocess.masking.policy span)",
        description="SpanBERT: masked LM + span boundary objective, no NSP", loss_function="mlm_sbo"),),
    flops=flops_terms,
    # no transformers class: exported in BERT's layout as a masked LM (the SBO head has no place there)
    hf=HfRow(adapter="bert", export="export_bert_to_hf", exports=("BertForMaskedLM",)),
)
