"""ELECTRA's settings (`model.electra`), declared without torch: the sub-section of a recipe's `model` that
electra.py's architecture reads, which loading a recipe validates (training/config.py, settings_registry.py) without
importing the model. electra.py imports it from here; either module is fine to import it from.

    from training.models.electra_settings import ElectraSettings
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


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


# the recipe key of these settings and their dataclass (Architecture.settings of electra.py)
MODEL_SUBSECTION: tuple[str, type] = ("electra", ElectraSettings)
