"""ModernBERT's settings and row, declared without torch: `ModernBertSettings` (the recipe's `model.modernbert`, which
loading a recipe validates through training/models/members.py without importing the model; model.py adds its fields
to the model's config) and `MEMBER`, ModernBERT's row (core/member.py: architecture, capabilities, objectives, FLOPs
terms, HF adapter), from which members.py builds the family's tables.

    from training.models.modernbert.settings import ModernBertSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..core.capabilities import FUSED_MLM_LOSS, STATIC_SHAPES, UNPAD
from ..core.flops_terms import lm_head, window_pairs
from ..core.member import MASKED_TEXT_FORMATS, HfRow, Member, ObjectiveInfo


@dataclass(frozen=True, config=RECIPE_SECTION)
class ModernBertSettings:
    """ModernBERT's attention pattern and rotary bases: the recipe's `model.modernbert` (the encoder is the rest of
    the `model` section), and the fields ModernBertConfig adds to BertConfig. Defaults are ModernBERT-base's
    (answerdotai/ModernBERT-base config.json, as transformers' ModernBertConfig).

        model:
          modernbert: {global_attn_every_n_layers: 3, local_attention: 128}"""

    global_attn_every_n_layers: int = Field(3, ge=1, description="layer i attends globally when i % this == 0 "
                                            "(layers 0, 3, 6, ...); the others attend in a sliding window")
    local_attention: int = Field(128, ge=2, description="width of the sliding window of the local layers: a token "
                                 "sees the tokens at most local_attention / 2 positions away on either side; even")
    global_rope_theta: float = Field(160_000.0, gt=0.0, description="rotary base of the global layers")
    local_rope_theta: float = Field(10_000.0, gt=0.0, description="rotary base of the local layers")

    @model_validator(mode="after")
    def _even_window(self) -> "ModernBertSettings":
        if self.local_attention % 2:
            raise ValueError(f"local_attention must be even (a window of local_attention / 2 on each side), got "
                             f"{self.local_attention}")
        return self


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("modernbert", ModernBertSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """Projections and the GeGLU block, global layers' S^2 attention, local layers' windowed pairs, the MLM head."""
    h = c.hidden_size
    global_layers = (c.num_layers - 1) // c.global_attn_every_n_layers + 1  # layers 0, n, 2n, ...
    local_layers = c.num_layers - global_layers
    projections = c.num_layers * 2 * s * (4 * h * h + 3 * h * c.intermediate_size)
    return [("projections + GeGLU feed-forward", projections, 2.0),
            (f"attention, {global_layers} global layer(s)", global_layers * 4 * s * s * h, 2.0),
            (f"attention, {local_layers} local layer(s) (window {c.local_attention})",
             local_layers * 4 * h * window_pairs(s, c.local_attention // 2), 2.0),
            ("LM head at the predicted positions", lm_head(c, f * s), 2.0)]


# ModernBERT runs BertForPreTraining's forward, hence BERT's unpad and static shapes; stacking is not ModernBERT's
# (its layer 0 has no attention norm, and a copied layer would change its global / local pattern)
MEMBER = Member(
    name="ModernBERT", architecture="ModernBertForMaskedLM", model="training.models.modernbert.model",
    supports=frozenset({UNPAD, STATIC_SHAPES, FUSED_MLM_LOSS}), settings=MODEL_SUBSECTION,
    # masked LM alone, as RoBERTa's `mlm`, on its own architecture (30 % masking is the recipe's
    # preprocess.masking.masked_lm_prob)
    objectives=(ObjectiveInfo(
        name="modernbert_mlm", architecture="ModernBertForMaskedLM", instance_formats=MASKED_TEXT_FORMATS,
        needs="masked tokens (shard fields mask_positions/mask_tokens)",
        description="ModernBERT: masked LM only (rotary, alternating global / sliding-window attention, GeGLU)",
        loss_function="mlm_only"),),
    flops=flops_terms,
    hf=HfRow(adapter="modernbert", reads="ModernBertForMaskedLM or ModernBertModel", export="export_modernbert_to_hf",
             exports=("ModernBertForMaskedLM",), layouts=("modernbert",),
             imports=(("modernbert", "import_modernbert_from_hf"),)),
)
