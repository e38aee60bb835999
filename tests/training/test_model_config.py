"""One schema per architecture family: the recipe's `model` keys are BertConfig's fields (declared once), the
member settings of a recipe are the fields their configs add, XLNet and Transformer-XL share RelativeConfig, and the
one dict parser (training/models/core/config_schema.py) names the source and the field for every kind of bad value."""

from __future__ import annotations

import dataclasses

import pytest

from bertfactory.errors import ContractError
from training.config import BERT_BASE, ModelConfig
from training.models.bert.model import BertConfig
from training.models.electra.model import ElectraConfig, ElectraSettings
from training.models.core.relative_config import RelativeConfig
from training.models.transformer_xl.model import TransformerXLConfig, TransformerXLSettings
from training.models.xlm.model import XlmConfig, XlmSettings
from training.models.xlnet.model import XLNetConfig, XLNetSettings

TINY = dict(vocab_size=40, hidden_size=8, num_layers=2, num_heads=2, intermediate_size=16)


def _names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_the_recipe_model_keys_are_bert_config_fields_with_their_docs_and_bounds():
    encoder = [name for name in ModelConfig.model_fields if name in _names(BertConfig)]
    assert encoder == [n for n in _names(BertConfig) if n not in ("pad_token_id", "sentence_head")]
    for name in encoder[1:]:  # vocab_size: null in a recipe means the tokenizer's size
        ours, theirs = ModelConfig.model_fields[name], BertConfig.__pydantic_fields__[name]
        assert ours.description == theirs.description and ours.metadata == theirs.metadata, name
    assert {k: getattr(ModelConfig(), k) for k in BERT_BASE} == BERT_BASE
    with pytest.raises(ValueError, match="hidden_size 10 is not divisible by num_heads 3"):
        ModelConfig(hidden_size=10, num_heads=3)


def test_the_member_sections_of_a_recipe_are_those_the_architectures_declare():
    from training.models.registry import member_settings

    sections = {name: info.annotation for name, info in ModelConfig.model_fields.items()
                if name not in _names(BertConfig)}
    assert sections == {key: settings | None for key, settings in member_settings().items()}
    assert list(sections) == ["electra", "spanbert", "xlnet", "transformer_xl", "xlm", "modernbert"]


def test_member_settings_are_the_fields_their_configs_add():
    assert _names(ElectraConfig) == _names(BertConfig) + _names(ElectraSettings)
    assert _names(XlmConfig) == _names(BertConfig) + ["language_id"] and "language_id" in _names(XlmSettings)
    assert _names(XLNetConfig) == _names(RelativeConfig) + _names(XLNetSettings)
    assert _names(TransformerXLConfig) == _names(RelativeConfig) + _names(TransformerXLSettings)
    assert XLNetConfig(**TINY).mem_len == 0 and TransformerXLConfig(**TINY).mem_len == 64


@pytest.mark.parametrize("cls, extra", [(BertConfig, {"max_position_embeddings": 16}), (XLNetConfig, {}),
                                        (TransformerXLConfig, {})])
def test_the_dict_parser_names_the_file_and_the_field(cls, extra):
    good = cls(**TINY, **extra).to_dict()
    assert cls.from_dict(good, "x/config.json") == cls(**TINY, **extra)
    cases = [
        ({**good, "hidden_sise": 8}, "x/config.json: unknown model config field.s. hidden_sise; valid: vocab_size"),
        ({k: v for k, v in good.items() if k != "num_layers"}, "x/config.json: missing model config field.s. num_layers"),
        ({**good, "num_heads": "2"}, "x/config.json: model config field 'num_heads' must be int, got '2'"),
        ({**good, "num_heads": True}, "x/config.json: model config field 'num_heads' must be int, got True"),
        ({**good, "attention_dropout": 1.5}, f"x/config.json: invalid {cls.__name__}: attention_dropout must be < 1"),
        ({**good, "num_heads": 3}, "x/config.json: invalid .*hidden_size 8 is not divisible by num_heads 3"),
        ({**good, "pad_token_id": 40}, "pad_token_id 40 is outside the vocabulary"),
    ]
    for data, message in cases:
        with pytest.raises(ContractError, match=message):
            cls.from_dict(data, "x/config.json")
    with pytest.raises(ContractError, match="x/config.json: the model config must be a mapping, got list"):
        cls.from_dict([1], "x/config.json")


def test_bert_config_specific_values_are_refused_by_name():
    good = BertConfig(**TINY, max_position_embeddings=16).to_dict()
    with pytest.raises(ContractError, match="share_layers must be one of 'none', 'all', 'attention' or 'ffn' "
                                            r"\(got 'some'\)"):
        BertConfig.from_dict({**good, "share_layers": "some"}, "x/config.json")
    with pytest.raises(ContractError, match="'sentence_head' must be bool, got 1"):
        BertConfig.from_dict({**good, "sentence_head": 1}, "x/config.json")
    assert BertConfig.from_dict({**good, "hidden_dropout": 0}, "x").hidden_dropout == 0.0  # JSON may write 0
    without_head = {k: v for k, v in good.items() if k != "sentence_head"}  # written before the field existed
    assert BertConfig.from_dict(without_head, "x").sentence_head is True


def test_an_unknown_key_of_a_member_section_lists_the_valid_ones():
    from pydantic import ValidationError

    from bertfactory.config import format_validation_error

    with pytest.raises(ValidationError) as caught:
        ModelConfig.model_validate({"electra": {"generator_sise": 0.5}})
    assert format_validation_error(ModelConfig, caught.value, "r.yaml").splitlines()[1] == (
        "  - unknown key 'electra.generator_sise' (did you mean 'generator_size'?); valid keys here: disc_weight, "
        "generator_size, generator_steps, two_stage")
