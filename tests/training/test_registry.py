"""The architecture registry: each architecture declares the pretraining options it implements
(`Architecture.supports`), and the declaration matches what its model class really has."""

from __future__ import annotations

import pytest

from training.models.registry import (CAPABILITIES, FUSED_MLM_LOSS, STACKING, STATIC_SHAPES, UNPAD, Architecture,
                                      architectures, get_architecture)

# the model attribute each capability switches on (what pretraining sets when the recipe asks for the option)
_SWITCH = {UNPAD: "unpad_by_default", STATIC_SHAPES: "static_shapes", FUSED_MLM_LOSS: "fused_mlm_loss"}


def test_bert_declares_unpad_and_static_shapes_and_the_others_nothing():
    # ModernBERT runs BertForPreTraining's forward (training/models/modernbert/model.py), so it declares the same
    # three (unpad, static shapes, the fused MLM loss); stacking (tests/training/test_stacking.py) is BERT's, SpanBERT's and XLM's, not ModernBERT's
    declared = {"BertForPreTraining": {UNPAD, STATIC_SHAPES, STACKING, FUSED_MLM_LOSS},
                "ModernBertForMaskedLM": {UNPAD, STATIC_SHAPES, FUSED_MLM_LOSS},
                "SpanBertForPreTraining": {STACKING}, "XlmForPreTraining": {STACKING}}
    for name in architectures():
        assert get_architecture(name).supports == frozenset(declared.get(name, ())), name


@pytest.mark.parametrize("name", ["BertForPreTraining", "SpanBertForPreTraining", "XlmForPreTraining"])
def test_declared_capabilities_are_the_switches_the_model_has(name):
    from training.models.bert.model import BertConfig
    arch = get_architecture(name)
    config = arch.config_from_dict(BertConfig(vocab_size=32, hidden_size=8, num_layers=1, num_heads=2,
                                              intermediate_size=16, max_position_embeddings=16,
                                              num_languages=1).to_dict(), "test")
    model = arch.build(config)
    for capability, attribute in _SWITCH.items():
        assert hasattr(model, attribute) == (capability in arch.supports), (name, capability)


def test_an_unknown_capability_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown capabilities fast"):
        Architecture(name="X", config_from_dict=lambda d, s: d, build=lambda c: None,
                     from_model_config=lambda m, v, p: m, description="x", supports=frozenset({"fast"}))
    assert CAPABILITIES == {UNPAD, STATIC_SHAPES, STACKING, FUSED_MLM_LOSS}


def test_a_checkpoint_that_stores_the_former_xlnet_name_loads(tmp_path):
    import json

    import torch

    from training.checkpoint import load_pretrained, read_checkpoint_config, save_pretrained
    from training.models.xlnet.model import XLNetConfig, XLNetForPreTraining

    from .conftest import write_tokenizer

    assert get_architecture("XLNetForPretraining") is get_architecture("XLNetForPreTraining")
    config = XLNetConfig(vocab_size=45, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    torch.manual_seed(0)
    model = XLNetForPreTraining(config)
    target = tmp_path / "model"
    save_pretrained(model, config, write_tokenizer(tmp_path / "tokenizer.json", 40), target)
    doc = json.loads((target / "config.json").read_text())
    assert doc["architecture"] == "XLNetForPreTraining"
    doc["architecture"] = "XLNetForPretraining"  # as written before the rename
    (target / "config.json").write_text(json.dumps(doc))
    assert read_checkpoint_config(target)["architecture"] == "XLNetForPreTraining"
    loaded, loaded_config, _ = load_pretrained(target)
    assert type(loaded) is XLNetForPreTraining and loaded_config == config
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
