from typing import Literal

import pytest
from pydantic import Field

from bertfactory.config import StrictModel, apply_overrides, parse_override, validate
from bertfactory.errors import ConfigError


class Inner(StrictModel):
    steps: int = Field(10, description="number of steps")
    mode: Literal["a", "b"] = "a"


class Outer(StrictModel):
    inner: Inner = Field(default_factory=Inner)
    name: str = "x"


def test_unknown_key_names_key_and_valid_choices():
    with pytest.raises(ConfigError) as e:
        validate(Outer, {"inner": {"stpes": 3}}, "r.yaml")
    msg = str(e.value)
    assert "inner.stpes" in msg and "r.yaml" in msg
    assert "mode, steps" in msg


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError) as e:
        validate(Outer, {"inner": {"steps": "many"}}, "r.yaml")
    assert "inner.steps" in str(e.value) and "'many'" in str(e.value)


def test_literal_error_lists_choices():
    with pytest.raises(ConfigError) as e:
        validate(Outer, {"inner": {"mode": "c"}})
    assert "'a'" in str(e.value) and "'b'" in str(e.value)


def test_overrides_are_typed_and_nested():
    assert parse_override("inner.steps=200") == (["inner", "steps"], 200)
    assert parse_override("name=hello world") == (["name"], "hello world")
    data = apply_overrides({"inner": {"steps": 1}}, ["inner.steps=5", "inner.mode=b"])
    assert validate(Outer, data).inner.steps == 5
    with pytest.raises(ConfigError):
        apply_overrides({"name": "x"}, ["name.deeper=1"])
    with pytest.raises(ConfigError):
        parse_override("no-equals-sign")
