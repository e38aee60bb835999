"""The members of the family, and every table built from what they declare, without torch: each member is a folder
training/models/<member>/ whose settings.py holds its row `MEMBER` (training/models/core/member.py: architecture,
capabilities, recipe settings, objectives, FLOPs terms, Hugging Face adapter). Adding a member is its folder plus
one line in `MEMBERS` (checklist: docs/family.md, "Adding a member").

What reads which table:
- a recipe's `model` sub-sections (training/config.py): `member_settings()`
- a recipe's cross-checks (training/recipe_checks.py): `supports`, `supporting`, `objective_info`
- `pretrain.objective` (training/pretrain_config.py, training/objectives/): `objective_names`, `objective_info`
- the FLOPs of a step (training/flops.py): `member_of_objective(name).flops`
- the architectures a checkpoint can hold (training/models/registry.py, which imports the models): `MEMBERS`
- the Hugging Face import / export table (training/hf/__init__.py): each `Member.hf`

    from training.models.members import objective_info, supporting
    objective_info("mlm_sop").architecture   # 'BertForPreTraining'
"""

from __future__ import annotations

from bertfactory.errors import ContractError

from .bert import settings as bert
from .core.member import MASKED_TEXT_FORMATS, Member, ObjectiveInfo
from .electra import settings as electra
from .modernbert import settings as modernbert
from .spanbert import settings as spanbert
from .transformer_xl import settings as transformer_xl
from .xlm import settings as xlm
from .xlnet import settings as xlnet

__all__ = ["MASKED_TEXT_FORMATS", "MEMBERS", "Member", "ObjectiveInfo", "member_of_architecture",
           "member_of_objective", "member_settings", "objective_info", "objective_names", "supporting", "supports"]

# in the order of the recipe's `model` keys (the members' settings sub-sections)
MEMBERS: tuple[Member, ...] = (
    bert.MEMBER,
    electra.MEMBER,
    spanbert.MEMBER,
    xlnet.MEMBER,
    transformer_xl.MEMBER,
    xlm.MEMBER,
    modernbert.MEMBER,
)

_BY_ARCHITECTURE: dict[str, Member] = {}
_BY_OBJECTIVE: dict[str, Member] = {}
_OBJECTIVES: dict[str, ObjectiveInfo] = {}
for _member in MEMBERS:
    for _name in (_member.architecture, *_member.former_names):
        if _name in _BY_ARCHITECTURE:
            raise ContractError(f"training/models/members.py: architecture {_name} is declared by both "
                                f"{_BY_ARCHITECTURE[_name].name} and {_member.name}")
        _BY_ARCHITECTURE[_name] = _member
    for _info in _member.objectives:
        if _info.name in _OBJECTIVES:
            raise ContractError(f"training/models/members.py: objective {_info.name} is declared by both "
                                f"{_BY_OBJECTIVE[_info.name].name} and {_member.name}")
        _OBJECTIVES[_info.name] = _info
        _BY_OBJECTIVE[_info.name] = _member
del _member, _name, _info


def member_of_architecture(name: str) -> Member:
    """The member whose checkpoints store `name` (today's name or a former one) as `architecture`; KeyError else."""
    if name not in _BY_ARCHITECTURE:
        raise KeyError(f"unknown architecture {name!r}; known: {', '.join(sorted(m.architecture for m in MEMBERS))}")
    return _BY_ARCHITECTURE[name]


def member_of_objective(name: str) -> Member:
    if name not in _BY_OBJECTIVE:
        raise KeyError(f"unknown objective '{name}'; known: {', '.join(objective_names())}")
    return _BY_OBJECTIVE[name]


def member_settings() -> dict[str, type]:
    """Recipe key of each member's settings sub-section -> its dataclass (a RECIPE_SECTION pydantic dataclass whose
    docstring describes it), in the order of MEMBERS."""
    return dict(member.settings for member in MEMBERS if member.settings is not None)


def supports(architecture: str, option: str) -> bool:
    """Whether the architecture of that name implements the option (one of core/capabilities.CAPABILITIES)."""
    return architecture in _BY_ARCHITECTURE and option in _BY_ARCHITECTURE[architecture].supports


def supporting(option: str) -> list[str]:
    """The names of the architectures that implement the option, sorted."""
    return sorted(member.architecture for member in MEMBERS if option in member.supports)


def objective_names() -> list[str]:
    return sorted(_OBJECTIVES)


def objective_info(name: str) -> ObjectiveInfo:
    """What an objective is (architecture, instance formats, descriptions), without its loss (training/objectives/)."""
    if name not in _OBJECTIVES:
        raise KeyError(f"unknown objective '{name}'; known: {', '.join(objective_names())}")
    return _OBJECTIVES[name]
