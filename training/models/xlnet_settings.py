"""XLNet's settings (`model.xlnet`), declared without torch: the sub-section of a recipe's `model` that xlnet.py's
architecture reads, which loading a recipe validates (training/config.py, settings_registry.py) without importing
the model. xlnet.py imports it from here; either module is fine to import it from.

    from training.models.xlnet_settings import XLNetSettings
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


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


# the recipe key of these settings and their dataclass (Architecture.settings of xlnet.py)
MODEL_SUBSECTION: tuple[str, type] = ("xlnet", XLNetSettings)
