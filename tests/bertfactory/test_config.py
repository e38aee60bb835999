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


def test_a_key_twice_in_a_recipe_is_refused_naming_it_and_both_lines(tmp_path):
    from bertfactory.config import load_yaml

    top = tmp_path / "top.yaml"
    top.write_text("name: x\npretrain:\n  max_steps: 5\npretrain:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match=r"top.yaml: key 'pretrain' appears twice \(line 2, again at line 4\)"):
        load_yaml(top)  # PyYAML kept the second section: max_steps 5 was dropped without a word
    nested = tmp_path / "nested.yaml"
    nested.write_text("pretrain:\n  max_steps: 5\n  max_steps: 7\n")
    with pytest.raises(ConfigError, match=r"key 'pretrain.max_steps' appears twice \(line 2, again at line 3\)"):
        load_yaml(nested)
    merged = tmp_path / "merged.yaml"  # a merge key's values may be overridden: not a duplicate
    merged.write_text("base: &b {steps: 1}\ninner:\n  <<: *b\n  steps: 2\n")
    assert load_yaml(merged)["inner"] == {"steps": 2}


def test_a_key_twice_in_a_set_value_is_refused_naming_the_override():
    # --set 'evaluate.tasks={trec_coarse: {}, trec_coarse: {...}}' kept the last one without a word
    from bertfactory.config import parse_override

    item = "evaluate.tasks={trec_coarse: {}, trec_coarse: {finetune: {epochs: 1}}}"
    with pytest.raises(ConfigError, match=r"^--set evaluate\.tasks=\{.*\}: key 'trec_coarse' appears twice "
                                          r"\(columns 2 and 19\); YAML would keep the second"):
        parse_override(item)
    assert parse_override("evaluate.tasks={a: {}, b: {}}") == (["evaluate", "tasks"], {"a": {}, "b": {}})
    assert parse_override("corpus.name=a: b: c") == (["corpus", "name"], "a: b: c")  # not YAML: taken as text


def test_a_yaml_syntax_error_is_one_line_naming_the_file_and_the_line(tmp_path):
    from bertfactory.config import load_yaml

    tab = tmp_path / "tab.yaml"
    tab.write_text("name: x\npretrain:\n\tmax_steps: 5\n")
    with pytest.raises(ConfigError) as e:
        load_yaml(tab)
    msg = str(e.value)
    assert "\n" not in msg and "<unicode string>" not in msg
    assert msg.startswith(f"{tab} is not valid YAML: line 3, column 1: found character")
    assert msg.endswith("YAML indents with spaces, not tabs")
    two = tmp_path / "two.yaml"  # two recipes pasted into one file
    two.write_text("name: a\n---\nname: b\n")
    with pytest.raises(ConfigError, match=r"two.yaml is not valid YAML: line 2, column 1: expected a single document "
                                          r"in the stream that starts at line 1, column 1, but found another document$"):
        load_yaml(two)


def test_a_misspelt_key_is_offered_the_closest_valid_one():
    with pytest.raises(ConfigError) as e:
        validate(Outer, {"inner": {"stpes": 3}}, "r.yaml")
    assert "unknown key 'inner.stpes' (did you mean 'steps'?); valid keys here: mode, steps" in str(e.value)
    with pytest.raises(ConfigError) as e:
        validate(Outer, {"innr": {}}, "r.yaml")
    assert "unknown key 'innr' (did you mean 'inner'?)" in str(e.value)
    with pytest.raises(ConfigError) as e:  # nothing close: no guess
        validate(Outer, {"zzz": 1}, "r.yaml")
    assert "did you mean" not in str(e.value)


def test_an_unquoted_yaml_boolean_or_number_for_a_text_field_says_to_quote_it():
    # `lang: no` (Norwegian) reads as False: the refusal said only "Input should be a valid string (got False)"
    with pytest.raises(ConfigError) as e:
        validate(Outer, apply_overrides({}, ["name=no"]), "r.yaml")
    assert ("'name': Input should be a valid string (got False; YAML reads an unquoted no, yes, on, off, true, false "
            "as a boolean and digits as a number: quote it for text, e.g. name: \"no\" in the file or --set "
            "'name=\"no\"')") in str(e.value)
    assert validate(Outer, apply_overrides({}, ['name="no"'])).name == "no"
    with pytest.raises(ConfigError, match=r"got 2024; YAML reads .* e.g. name: \"2024\""):
        validate(Outer, {"name": 2024})


def test_a_key_of_another_section_is_offered_its_full_path():
    class Model(StrictModel):
        hidden_size: int = 8

    class Train(StrictModel):
        max_steps: int = 1
        enabled: bool = True

    class Eval(StrictModel):
        enabled: bool = True

    class Extra(StrictModel):
        enabled: bool = True

    class Whole(StrictModel):
        model: Model = Field(default_factory=Model)
        train: Train = Field(default_factory=Train)
        eval: Eval | None = None
        extra: Extra = Field(default_factory=Extra)

    with pytest.raises(ConfigError) as e:
        validate(Whole, {"train": {"hidden_size": 64}})
    assert "unknown key 'train.hidden_size' (did you mean 'model.hidden_size'?); valid keys here: enabled" \
        in str(e.value)
    with pytest.raises(ConfigError) as e:
        validate(Whole, {"max_steps": 3})
    assert "unknown key 'max_steps' (did you mean 'train.max_steps'?)" in str(e.value)
    with pytest.raises(ConfigError) as e:  # a key of many sections: no guess
        validate(Whole, {"model": {"enabled": True}})
    assert "did you mean" not in str(e.value)
