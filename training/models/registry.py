"""The architectures a checkpoint can hold, by the name stored in config.json's `architecture` (see
architecture.py for what one is). This module lists every member; nothing it imports imports it back, so adding
a member is its model module (with an `ARCHITECTURE`) plus one line in `_MEMBERS` (and, when it has recipe settings,
its <member>_settings.py plus one line in settings_registry.py, the list a recipe reads without importing torch).

    from training.models.registry import get_architecture
    arch = get_architecture("BertForPreTraining")
    model = arch.build(arch.config_from_dict(doc["model"], "config.json"))
"""

from __future__ import annotations

from torch import nn

from bertfactory.errors import ContractError

from . import bert, electra, modernbert, spanbert, transformer_xl, xlm, xlnet
from .architecture import CAPABILITIES, STACKING, STATIC_SHAPES, UNPAD, Architecture
from .capabilities import SUPPORTS

__all__ = ["CAPABILITIES", "STACKING", "STATIC_SHAPES", "UNPAD", "Architecture", "get_architecture", "architecture_of",
           "architectures", "member_settings"]

_MEMBERS: tuple[Architecture, ...] = (
    bert.ARCHITECTURE,
    electra.ARCHITECTURE,
    spanbert.ARCHITECTURE,
    xlnet.ARCHITECTURE,
    transformer_xl.ARCHITECTURE,
    xlm.ARCHITECTURE,
    modernbert.ARCHITECTURE,
)
_ARCHITECTURES: dict[str, Architecture] = {arch.name: arch for arch in _MEMBERS}
# a recipe's checks read capabilities.SUPPORTS without building an architecture: each must declare its entry
_MISDECLARED = sorted({*SUPPORTS} - {*_ARCHITECTURES} | {arch.name for arch in _MEMBERS
                                                         if arch.supports != SUPPORTS.get(arch.name, frozenset())})
if _MISDECLARED:
    raise ContractError(f"training/models/capabilities.py SUPPORTS and the architectures' `supports` disagree for "
                        f"{', '.join(_MISDECLARED)}")
# names that earlier releases wrote into config.json's `architecture` -> today's name (those checkpoints load)
_FORMER_NAMES = {"XLNetForPretraining": "XLNetForPreTraining"}


def get_architecture(name: str, source: str = "config.json") -> Architecture:
    """The architecture stored under `name` (today's name or a former one); a ContractError naming `source` and the
    known names for any other."""
    name = _FORMER_NAMES.get(name, name)
    if name not in _ARCHITECTURES:
        raise ContractError(f"{source}: architecture {name!r} is not one bertfactory can build; "
                            f"known: {', '.join(sorted(_ARCHITECTURES))}")
    return _ARCHITECTURES[name]


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
    """The sub-sections of a recipe's `model` that members declare (`Architecture.settings`): key -> the dataclass
    of its settings, in the order of `_MEMBERS`. A recipe reads the same list from settings_registry.py, which
    imports no model (tests/training/test_model_config.py checks that they agree)."""
    return dict(arch.settings for arch in _MEMBERS if arch.settings is not None)
