"""The architectures a checkpoint can hold, by the name stored in config.json's `architecture` (see
core/architecture.py for what one is): one per member of training/models/members.py, imported from the module its
row names (`Member.model`, which defines `ARCHITECTURE`). Nothing a model module imports imports this module.

Adding a member does not touch this module. It takes the member's folder training/models/<member>/ (`__init__.py`,
model.py ending in its `ARCHITECTURE`, the torch-free settings.py holding its row `MEMBER`), one line (and its
import) in `MEMBERS` of training/models/members.py, its HF adapter training/hf/<member>.py (or the row's `no_hf`),
its recipes in configs/ (a full one and its tiny twin), its rows in docs/family.md, and its package in
pyproject.toml's list and its row in scripts/family_table.py. tests/test_family_table.py checks the folder,
adapter, recipes and docs rows of every member; the steps in order: docs/family.md, "Adding a member".

    from training.models.registry import get_architecture
    arch = get_architecture("BertForPreTraining")
    model = arch.build(arch.config_from_dict(doc["model"], "config.json"))
"""

from __future__ import annotations

import importlib

from torch import nn

from bertfactory.errors import ContractError

from .core.architecture import CAPABILITIES, FUSED_MLM_LOSS, STACKING, STATIC_SHAPES, UNPAD, Architecture
from .members import MEMBERS, Member, member_of_architecture

__all__ = ["CAPABILITIES", "FUSED_MLM_LOSS", "STACKING", "STATIC_SHAPES", "UNPAD", "Architecture", "get_architecture", "architecture_of",
           "architectures", "member_settings"]


def _architecture(member: Member) -> Architecture:
    arch = importlib.import_module(member.model).ARCHITECTURE
    if (arch.name, arch.supports, arch.settings) != (member.architecture, member.supports, member.settings):
        raise ContractError(f"{member.model}: ARCHITECTURE ({arch.name}) does not take its name, supports and "
                            f"settings from its MEMBER row ({member.architecture})")
    return arch


_ARCHITECTURES: dict[str, Architecture] = {member.architecture: _architecture(member) for member in MEMBERS}


def get_architecture(name: str, source: str = "config.json") -> Architecture:
    """The architecture stored under `name` (today's name or a former one, `Member.former_names`); a ContractError
    naming `source` and the known names for any other."""
    try:
        return _ARCHITECTURES[member_of_architecture(name).architecture]
    except KeyError:
        raise ContractError(f"{source}: architecture {name!r} is not one bertfactory can build; "
                            f"known: {', '.join(sorted(_ARCHITECTURES))}") from None


def architecture_of(model: nn.Module) -> Architecture:
    """The registered architecture of a model instance (its class name; under FSDP, which swaps the class for a
    subclass FSDP<Name>, the first registered class of its MRO)."""
    for cls in type(model).__mro__:
        if cls.__name__ in _ARCHITECTURES:
            return _ARCHITECTURES[cls.__name__]
    return get_architecture(type(model).__name__, source=f"model {type(model).__name__}")


def architectures() -> list[str]:
    return sorted(_ARCHITECTURES)


def member_settings() -> dict[str, type]:
    """The sub-sections of a recipe's `model` that the architectures declare (`Architecture.settings`): key -> the
    dataclass of its settings, in the order of members.MEMBERS (the same as members.member_settings(), which a
    recipe reads without importing a model; tests/training/test_model_config.py checks that they agree)."""
    return dict(arch.settings for arch in _ARCHITECTURES.values() if arch.settings is not None)
