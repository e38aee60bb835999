"""The members' settings sub-sections of a recipe's `model` (`model.electra`, `model.xlnet`, ...), listed without
importing a model: loading and validating a recipe (training/config.py) reads them from here, so it needs no torch.

    from training.models.settings_registry import member_settings
    member_settings()   # {"electra": ElectraSettings, "spanbert": SpanBertSettings, ...}

Each entry is the `MODEL_SUBSECTION` of a <member>_settings.py, the same tuple that member's `Architecture.settings`
holds; training/models/registry.py lists the architectures themselves, and tests/training/test_model_config.py checks
that the two lists agree (a member with settings needs a line here and one there).
"""

from __future__ import annotations

from . import (electra_settings, modernbert_settings, spanbert_settings, transformer_xl_settings, xlm_settings,
               xlnet_settings)

# in the order of registry._MEMBERS, which is the order of the recipe's `model` keys
_SUBSECTIONS: tuple[tuple[str, type], ...] = (
    electra_settings.MODEL_SUBSECTION,
    spanbert_settings.MODEL_SUBSECTION,
    xlnet_settings.MODEL_SUBSECTION,
    transformer_xl_settings.MODEL_SUBSECTION,
    xlm_settings.MODEL_SUBSECTION,
    modernbert_settings.MODEL_SUBSECTION,
)


def member_settings() -> dict[str, type]:
    """Recipe key of each member's settings sub-section -> its dataclass (a RECIPE_SECTION pydantic dataclass whose
    docstring describes it)."""
    return dict(_SUBSECTIONS)
