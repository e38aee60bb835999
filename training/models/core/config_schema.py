"""The one schema mechanism of the model configs: each architecture family's config is a frozen pydantic dataclass
(validated once, on construction, with its field docs), and `config_from_dict` is the one parser of the dict a
checkpoint's config.json stores under `model`, with errors that name the source file and the field.

    @dataclass(frozen=True, config=MODEL_CONFIG)
    class MyConfig(CheckpointConfig):
        hidden_size: int = Field(ge=1, description="width of every layer")

    config = MyConfig.from_dict(doc["model"], source="RUN/pretrain/final/config.json")
    doc["model"] = config.to_dict()

MODEL_CONFIG is strict (an int field refuses true and "4", a bool refuses 1; a float field takes an int), as a
checkpoint's JSON is typed; RECIPE_SECTION is for the member settings a recipe's `model` section holds (as lax as the
rest of the recipe, whose --set values arrive as YAML).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

from pydantic import ConfigDict, ValidationError

from bertfactory.errors import ContractError

MODEL_CONFIG = ConfigDict(extra="forbid", strict=True)
RECIPE_SECTION = ConfigDict(extra="forbid")

C = TypeVar("C")

_UNKNOWN = {"unexpected_keyword_argument", "extra_forbidden"}
_MISSING = {"missing", "missing_argument", "missing_keyword_only_argument"}
_TYPES = {"int_type": "int", "int_from_float": "int", "float_type": "float", "bool_type": "bool",
          "string_type": "str"}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than": ("<", "lt"),
           "less_than_equal": ("<=", "le")}


class CheckpointConfig:
    """What every model config provides: `to_dict()` (config.json's `model`) and `from_dict` (its inverse)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any], source: str | None = None) -> C:
        """Build from a dict, with a ContractError naming `source` (default: the class name) and the field."""
        return config_from_dict(cls, data, source or cls.__name__)


def settings_dict(settings: Any) -> dict[str, Any]:
    """A member's settings sub-section of a recipe (a RECIPE_SECTION dataclass; None = its defaults) as keyword
    arguments of its config."""
    return dataclasses.asdict(settings) if settings is not None else {}


def _field_of(error: Mapping[str, Any]) -> str:
    return str(error["loc"][0]) if error["loc"] else ""


def config_problems(cls: type, err: ValidationError) -> str:
    """One line saying what is wrong with the values given to config class `cls`, in the order a reader fixes
    them: unknown fields, missing fields, wrong types, then the values the constraints and checks refuse."""
    errors = err.errors()
    unknown = sorted({_field_of(e) for e in errors if e["type"] in _UNKNOWN})
    if unknown:
        valid = ", ".join(f.name for f in dataclasses.fields(cls))
        return f"unknown model config field(s) {', '.join(unknown)}; valid: {valid}"
    missing = [_field_of(e) for e in errors if e["type"] in _MISSING]
    if missing:
        return f"missing model config field(s) {', '.join(missing)}"
    for e in errors:
        if e["type"] in _TYPES:
            return f"model config field '{_field_of(e)}' must be {_TYPES[e['type']]}, got {e['input']!r}"
    problems = []
    for e in errors:
        name = _field_of(e)
        if e["type"] in _BOUNDS:
            symbol, key = _BOUNDS[e["type"]]
            problems.append(f"{name} must be {symbol} {e['ctx'][key]} (got {e['input']!r})")
        elif e["type"] == "literal_error":
            problems.append(f"{name} must be one of {e['ctx']['expected']} (got {e['input']!r})")
        elif e["type"] == "value_error":
            problems.append(str(e["ctx"]["error"]))
        else:
            problems.append(f"{name}: {e['msg']} (got {e['input']!r})" if name else e["msg"])
    return f"invalid {cls.__name__}: " + "; ".join(problems)


def config_from_dict(cls: type[C], data: Mapping[str, Any], source: str) -> C:
    """Build the config class `cls` from `data` (config.json's `model`): anything wrong becomes a ContractError
    naming `source` and the field (config_problems)."""
    if not isinstance(data, Mapping):
        raise ContractError(f"{source}: the model config must be a mapping, got {type(data).__name__}")
    try:
        return cls(**data)
    except ValidationError as err:
        raise ContractError(f"{source}: {config_problems(cls, err)}") from None
