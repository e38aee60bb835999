"""pretrain.init_from naming one of our model directories (training/pretrain_model.py `warm_start`): the recipe's
model section must be init_from's (docs/recipes.md), checked field by field in one line naming the recipe keys,
including fields that keep every tensor's shape (num_heads, layer_norm_eps: the same weights would load silently
and compute something else); a model trained with another sentence loss (BERT's NSP head, e.g. every
`bertfactory import-hf` of a BERT, continued under objective mlm, or the reverse) warm-starts with that head left
out or started fresh."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import load_file

from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _cfg(objective: str = "mlm_nsp", steps: int = 2, init_from=None) -> PretrainConfig:
    return PretrainConfig(objective=objective, batch_size=8, max_steps=steps, warmup_steps=1, learning_rate=1e-3,
                          log_every=1, save_every=1000, seed=4, num_threads=1, device="cpu",
                          init_from=str(init_from) if init_from else None)


@pytest.fixture
def start(run_factory):
    """A tiny mlm_nsp run's final model directory (with an NSP head)."""
    run = run_factory("start")
    pretrain(ModelConfig(**MODEL), _cfg(), run)
    return run / "pretrain" / "final"


@pytest.mark.parametrize("changes, named", [
    ({"num_heads": 4}, "model.num_heads (init_from 2, recipe 4)"),  # same shapes, other heads
    ({"layer_norm_eps": 1e-5}, "model.layer_norm_eps (init_from 1e-12, recipe 1e-05)"),
    ({"num_layers": 3}, "model.num_layers (init_from 2, recipe 3)"),  # was a list of missing tensor names
])
def test_a_model_section_other_than_init_froms_is_refused_naming_the_key(run_factory, start, changes, named):
    run = run_factory("continued")
    with pytest.raises(ConfigError, match="another model than the recipe's") as err:
        pretrain(ModelConfig(**{**MODEL, **changes}), _cfg(init_from=start), run)
    assert named in str(err.value) and "\n" not in str(err.value)
    assert not (run / "pretrain" / "final").exists()


def test_dropout_may_change_in_a_warm_start(run_factory, start):
    run = run_factory("continued")
    pretrain(ModelConfig(**{**MODEL, "hidden_dropout": 0.0, "attention_dropout": 0.0}), _cfg(init_from=start), run)
    assert (run / "pretrain" / "final" / "model.safetensors").is_file()


def test_an_nsp_model_continues_under_mlm_without_its_head(run_factory, start, caplog):
    run = run_factory("continued")
    caplog.set_level(logging.INFO, logger="training.pretrain")
    pretrain(ModelConfig(**MODEL), _cfg("mlm", steps=1, init_from=start), run)
    assert "sentence-pair head of" in caplog.text and "left out" in caplog.text
    final = load_file(str(run / "pretrain" / "final" / "model.safetensors"))
    assert not any(name.startswith("nsp_head.") for name in final)
    # it started from init_from's weights: one step at lr 1e-3 moves the embeddings by little, a fresh init far
    before = load_file(str(start / "model.safetensors"))["bert.embeddings.word_embeddings.weight"]
    after = final["bert.embeddings.word_embeddings.weight"]
    assert (after - before).abs().max() < 0.01


def test_an_mlm_model_continues_under_mlm_nsp_with_a_fresh_head(run_factory, caplog):
    first = run_factory("mlm")
    pretrain(ModelConfig(**MODEL), _cfg("mlm"), first)
    run = run_factory("continued")
    caplog.set_level(logging.INFO, logger="training.pretrain")
    pretrain(ModelConfig(**MODEL), _cfg("mlm_nsp", steps=1, init_from=first / "pretrain" / "final"), run)
    assert "sentence-pair head initialised fresh" in caplog.text
    final = load_file(str(run / "pretrain" / "final" / "model.safetensors"))
    assert "nsp_head.classifier.weight" in final
    before = load_file(str(first / "pretrain" / "final" / "model.safetensors"))
    assert torch.allclose(before["bert.embeddings.word_embeddings.weight"],
                          final["bert.embeddings.word_embeddings.weight"], atol=0.01)
