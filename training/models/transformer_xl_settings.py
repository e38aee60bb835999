"""Transformer-XL's settings (`model.transformer_xl`), declared without torch: the sub-section of a recipe's `model`
that transformer_xl.py's architecture reads, which loading a recipe validates (training/config.py,
settings_registry.py) without importing the model. transformer_xl.py imports it from here; either module is fine to
import it from.

    from training.models.transformer_xl_settings import TransformerXLSettings
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


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


# the recipe key of these settings and their dataclass (Architecture.settings of transformer_xl.py)
MODEL_SUBSECTION: tuple[str, type] = ("transformer_xl", TransformerXLSettings)
