"""ModernBERT's settings (`model.modernbert`), declared without torch: the sub-section of a recipe's `model` that
modernbert.py's architecture reads, which loading a recipe validates (training/config.py, settings_registry.py)
without importing the model. modernbert.py imports it from here; either module is fine to import it from.

    from training.models.modernbert_settings import ModernBertSettings
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


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


# the recipe key of these settings and their dataclass (Architecture.settings of modernbert.py)
MODEL_SUBSECTION: tuple[str, type] = ("modernbert", ModernBertSettings)
