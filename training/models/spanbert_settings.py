"""SpanBERT's settings (`model.spanbert`), declared without torch: the sub-section of a recipe's `model` that
spanbert.py's architecture reads, which loading a recipe validates (training/config.py, settings_registry.py)
without importing the model. spanbert.py imports it from here; either module is fine to import it from.

    from training.models.spanbert_settings import SpanBertSettings
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


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


# the recipe key of these settings and their dataclass (Architecture.settings of spanbert.py)
MODEL_SUBSECTION: tuple[str, type] = ("spanbert", SpanBertSettings)
