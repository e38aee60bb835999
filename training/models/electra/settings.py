"""ELECTRA's settings and row, declared without torch: `ElectraSettings` (the recipe's `model.electra`, which loading a
recipe validates through training/models/members.py without importing the model; model.py adds its fields to the
model's config) and `MEMBER`, ELECTRA's row (core/member.py: architecture, capabilities, objectives, FLOPs terms, HF
adapter), from which members.py builds the family's tables.

    from training.models.electra.settings import ElectraSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..core.flops_terms import bert_encoder, lm_head
from ..core.member import MASKED_TEXT_FORMATS, HfRow, Member, ObjectiveInfo


@dataclass(frozen=True, config=RECIPE_SECTION)
class ElectraSettings:
    """ELECTRA's generator and loss weighting: the recipe's `model.electra` (the discriminator is the rest of the
    `model` section), and the fields ElectraConfig adds to the discriminator's BertConfig.

        model:
          hidden_size: 256        # the discriminator (ELECTRA-Small)
          embedding_size: 128
          electra: {generator_size: 0.25, disc_weight: 50.0}

    Defaults are the paper's (Clark et al. 2020; google-research/electra configure_pretraining.py): a generator a
    quarter of the discriminator's width, discriminator loss weight 50, joint training. `two_stage` is the paper's
    two-stage baseline (Section 3.2), which like the paper needs a generator of the discriminator's size."""

    generator_size: float = Field(
        0.25, gt=0.0, le=1.0,
        description="generator hidden size, attention heads and FFN width as a fraction of the discriminator's "
                    "(each rounded, at least 1; same number of layers). Paper: Small 1/4, Base 1/3, Large 1/4")
    disc_weight: float = Field(50.0, gt=0.0, description="lambda: loss = generator MLM loss + lambda * "
                               "discriminator (replaced-token detection) loss")
    two_stage: bool = Field(False, description="the paper's two-stage training instead of joint training: "
                            "generator alone first, then the discriminator (initialised from the generator) with "
                            "the generator frozen; needs generator_size 1.0")
    generator_steps: int = Field(0, ge=0, description="two_stage only: optimiser steps of the generator-alone stage "
                                 "(the discriminator stage gets pretrain.max_steps - generator_steps)")

    @model_validator(mode="after")
    def _two_stage(self) -> "ElectraSettings":
        if self.two_stage:
            if self.generator_size != 1.0:
                raise ValueError(f"two_stage needs generator_size 1.0 (got {self.generator_size}): the "
                                 "discriminator is initialised from the generator")
            if self.generator_steps < 1:
                raise ValueError("two_stage needs generator_steps >= 1 (steps of the generator-alone stage)")
        elif self.generator_steps:
            raise ValueError(f"generator_steps={self.generator_steps} is only meaningful with two_stage: true")
        return self


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("electra", ElectraSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """The generator (no gradient in two-stage's discriminator stage), the discriminator and its RTD head."""
    g = c.generator_config()
    d = c.discriminator_config()
    generator = bert_encoder(g, s) + lm_head(g, f * s)
    grad = 0.0 if stage == "discriminator" else 2.0
    parts = [("generator encoder + MLM head", generator, grad)]
    if stage != "generator":
        h = d.hidden_size
        parts += [("discriminator encoder", bert_encoder(d, s), 2.0),
                  ("replaced-token detection head", 2 * s * (h * h + h), 2.0)]
    return parts


MEMBER = Member(
    name="ELECTRA", architecture="ElectraForPreTraining", model="training.models.electra.model",
    settings=MODEL_SUBSECTION,
    objectives=(ObjectiveInfo(
        name="electra", architecture="ElectraForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
        needs="masked tokens (shard fields mask_positions/mask_tokens)",
        description="ELECTRA: generator masked LM + disc_weight * replaced-token detection at every token "
                    "(model.electra: generator size, weight, two-stage)", loss_function="electra"),),
    flops=flops_terms,
    hf=HfRow(adapter="electra", reads="ElectraForPreTraining (with its generator in HF_DIR/generator, as our export "
             "writes it, or alone) or ElectraForMaskedLM", export="export_electra_to_hf",
             exports=("ElectraForPreTraining + OUT/generator (ElectraForMaskedLM)",), layouts=("electra",),
             imports=(("electra", "import_electra_from_hf"),)),
)
