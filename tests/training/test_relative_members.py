"""XLNet and Transformer-XL through the one pretraining stage: recipe -> architecture config -> Trainer ->
checkpoint -> load_pretrained, with their metrics in metrics.jsonl and relative-position-only options refused."""

import json

import pytest

from bertfactory.errors import ConfigError
from training.checkpoint import load_pretrained
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

TINY = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, hidden_dropout=0.0, attention_dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("objective, settings, metric", [
    ("plm", {"xlnet": {"predict_fraction": 4}}, "plm_acc"),
    ("txl_clm", {"transformer_xl": {"mem_len": 16, "train_segments": 2}}, "clm_acc"),
])
def test_relative_members_train_through_the_pretraining_stage(run_factory, objective, settings, metric):
    run = run_factory(objective)
    model_cfg = ModelConfig(**TINY, **settings)
    cfg = PretrainConfig(objective=objective, batch_size=16, max_steps=120, learning_rate=3e-3, warmup_steps=10,
                         log_every=20, save_every=60, seed=3)
    summary = pretrain(model_cfg, cfg, run)
    assert summary["status"] == "trained"
    lines = [json.loads(x) for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    # the integration check; the members' own tests train longer to a much lower loss
    assert lines[-1]["loss"] < 0.85 * lines[0]["loss"], [x["loss"] for x in lines]
    assert metric in lines[-1] and lines[-1][metric] > lines[0][metric]
    model, config, _ = load_pretrained(run / "pretrain" / "final")
    assert type(model).__name__ == {"plm": "XLNetForPreTraining", "txl_clm": "TransformerXLLM"}[objective]
    assert config.to_dict() == summary_config(model_cfg, objective)


def summary_config(model_cfg, objective):
    from training.models.registry import get_architecture
    from training.objectives import get_objective_spec

    arch = get_architecture(get_objective_spec(objective).architecture)
    return arch.from_model_config(model_cfg, 45, 0).to_dict()  # make_run: 5 specials + 40 words


def test_absolute_position_options_are_refused_for_relative_members(run_factory):
    run = run_factory("refused")
    cfg = PretrainConfig(objective="plm", batch_size=8, max_steps=2, warmup_steps=0)
    with pytest.raises(ConfigError, match="XLNet has relative positions and no such options: model.embedding_size=16"):
        pretrain(ModelConfig(**TINY, embedding_size=16), cfg, run)
