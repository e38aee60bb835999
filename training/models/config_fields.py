"""Parsing a model config dataclass from the dict stored in a checkpoint's config.json, with errors that name the
source and the field. Shared by the configs of the relative-attention models (XLNet, Transformer-XL).

    config = config_from_dict(XLNetConfig, doc["model"], "RUN/checkpoint/config.json")
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, TypeVar

from bertfactory.errors import ContractError

C = TypeVar("C")

_TYPES = {"int": int, "float": float, "bool": bool, int: int, float: float, bool: bool}


def config_from_dict(cls: type[C], data: Mapping[str, Any], source: str) -> C:
    """Build the frozen dataclass `cls` from `data`: unknown, missing or wrongly typed fields and values the
    dataclass rejects (its __post_init__ raising ValueError) become a ContractError naming `source`."""
    if not isinstance(data, Mapping):
        raise ContractError(f"{source}: the model config must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ContractError(f"{source}: unknown model config field(s) {', '.join(unknown)}; valid: {', '.join(fields)}")
    missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING]
    if missing:
        raise ContractError(f"{source}: missing model config field(s) {', '.join(missing)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        want = _TYPES[fields[name].type]
        if want is bool:
            ok = isinstance(value, bool)
        elif want is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:  # an int is a valid float (JSON writes 0.0 as 0 in some tools)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise ContractError(f"{source}: model config field '{name}' must be {want.__name__}, got {value!r}")
        values[name] = want(value)
    try:
        return cls(**values)
    except ValueError as err:
        raise ContractError(f"{source}: {err}") from None


def relative_config_problems(config: Any, positive: tuple[str, ...]) -> list[str]:
    """What is wrong with a relative-attention model config (XLNet, Transformer-XL): the shared architecture fields
    plus the member's own `positive` (>= 1) fields; an empty list when it is valid."""
    problems = []
    for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", *positive):
        if getattr(config, name) < 1:
            problems.append(f"{name} must be >= 1 (got {getattr(config, name)})")
    if config.num_heads >= 1 and config.hidden_size % config.num_heads:
        problems.append(f"hidden_size {config.hidden_size} is not divisible by num_heads {config.num_heads}")
    if config.hidden_size % 2:
        problems.append(f"hidden_size must be even for the sinusoidal relative encodings (got {config.hidden_size})")
    for name in ("dropout", "attention_dropout"):
        if not 0.0 <= getattr(config, name) < 1.0:
            problems.append(f"{name} must be in [0, 1) (got {getattr(config, name)})")
    if config.mem_len < 0:
        problems.append(f"mem_len must be >= 0 (got {config.mem_len})")
    if not 0 <= config.pad_token_id < config.vocab_size:
        problems.append(f"pad_token_id {config.pad_token_id} is outside the vocabulary (size {config.vocab_size})")
    return problems
