"""pretrain.freeze_encoder_steps (training/freeze.py): during the head warm-up the encoder - the word embeddings, and
so BERT's tied MLM decoder, included - keeps its exact bytes under AdamW weight decay while the head's transform and
bias train; after it the encoder trains; a run resumed inside or after the warm-up equals the uninterrupted one;
the setting is part of the resume fingerprint and the stage key; wrong values are refused in one line; under two
gloo processes every rank freezes alike."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import training.pretrain as pretrain_module
from bertfactory.errors import ConfigError, ContractError
from training.config import ModelConfig
from training.freeze import encoder_parameter_names
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
# weight decay well above BERT's: a frozen tensor that were decayed would show it
CFG = PretrainConfig(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3, weight_decay=0.1, log_every=1,
                     save_every=2, keep_last=10, seed=5, freeze_encoder_steps=4)
HEAD = ("mlm_head.dense.weight", "mlm_head.dense.bias", "mlm_head.LayerNorm.weight", "mlm_head.bias",
        "nsp_head.classifier.weight")


def _weights(run, step=None):
    where = run / "pretrain" / ("final" if step is None else f"checkpoints/step-{step}")
    return load_file(str(where / "model.safetensors"))


def _initial_weights(monkeypatch) -> dict:
    """The model's weights when the trainer is built (before any step), recorded through build_trainer."""
    seen: dict = {}
    original = pretrain_module.build_trainer

    def recording(model, *args, **kwargs):
        seen.update({k: v.detach().clone() for k, v in model.state_dict().items()})
        seen["encoder"] = encoder_parameter_names(model)
        return original(model, *args, **kwargs)

    monkeypatch.setattr(pretrain_module, "build_trainer", recording)
    return seen


def _trajectory(run):
    lines = (run / "pretrain" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in m.items() if k not in ("tokens_per_s", "mfu")} for m in map(json.loads, lines)]


def test_the_encoder_keeps_its_bytes_during_the_warmup_and_trains_after(run_factory, monkeypatch):
    run = run_factory("run")
    start = _initial_weights(monkeypatch)
    pretrain(TINY, CFG, run)
    encoder = start["encoder"]
    # the whole backbone: embeddings (the tied decoder), layers and pooler; nothing of the heads
    assert "bert.embeddings.word_embeddings.weight" in encoder and "bert.pooler.dense.weight" in encoder
    assert any(".encoder." in n for n in encoder) and not any(n.startswith(("mlm_head", "nsp_head")) for n in encoder)
    assert not any("decoder" in n for n in start if n != "encoder")  # the decoder is the word embeddings (tied)

    warmed = _weights(run, 4)
    for name in encoder:
        assert torch.equal(warmed[name], start[name]), name  # byte-identical, weight decay 0.1 notwithstanding
    for name in HEAD:
        assert not torch.equal(warmed[name], start[name]), name  # the head's transform and bias trained
    # the encoder had no gradient, hence no optimiser state: it starts when the warm-up ends
    state = torch.load(run / "pretrain" / "checkpoints" / "step-4" / "training_state.pt", weights_only=False)
    params = [p for group in state["optimizer"]["param_groups"] for p in group["params"]]
    assert 0 < len(state["optimizer"]["state"]) < len(params)

    final = _weights(run)
    moved = [n for n in encoder if not torch.equal(final[n], start[n])]
    # after step 4 the whole encoder trains (the pooler too: mlm_nsp's sentence head reads it)
    assert "bert.embeddings.word_embeddings.weight" in moved and any(".encoder." in n for n in moved)
    assert len(moved) == len(encoder)
    lines = _trajectory(run)
    assert [m["step"] for m in lines] == list(range(1, 9)) and lines[-1]["loss"] < lines[0]["loss"]


@pytest.mark.parametrize("stop_after", [3, 7], ids=["inside", "after"])
def test_a_run_resumed_inside_or_after_the_warmup_equals_the_uninterrupted_one(run_factory, stop_after):
    whole, resumed = run_factory("whole"), run_factory("resumed")
    pretrain(TINY, CFG, whole)
    pretrain(TINY, CFG, resumed, stop_after=stop_after)  # checkpoint at step 2 (inside) or 6 (after), then stopped
    pretrain(TINY, CFG, resumed)
    assert _trajectory(whole) == _trajectory(resumed)
    a, b = _weights(whole), _weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_setting_is_in_the_fingerprint_and_the_stage_key(run_factory):
    assert "freeze_encoder_steps" not in PretrainConfig.RESUME_NEUTRAL
    assert CFG.trajectory_fields()["freeze_encoder_steps"] == 4
    assert CFG.trajectory_fields() != CFG.model_copy(update={"freeze_encoder_steps": 3}).trajectory_fields()
    run = run_factory("run")
    pretrain(TINY, CFG, run, stop_after=2)
    with pytest.raises(ContractError, match="freeze_encoder_steps"):  # a checkpoint of another warm-up
        pretrain(TINY, CFG.model_copy(update={"freeze_encoder_steps": 3}), run)

    from flows.recipe import load_recipe
    from flows.stage_runner import stage_inputs
    from flows.stamps import stage_key

    def key(*sets):
        config, files = stage_inputs("pretrain", load_recipe("configs/local.yaml", list(sets)), run)
        return stage_key("pretrain", config, files, run)

    assert key() != key("pretrain.freeze_encoder_steps=10")
    # 0 (the default) is left out: runs started before the setting existed keep their key and fingerprint
    assert "freeze_encoder_steps" not in PretrainConfig().trajectory_fields()
    assert key() == key("pretrain.freeze_encoder_steps=0")


@pytest.mark.parametrize("sets, message", [
    (["pretrain.freeze_encoder_steps=100", "pretrain.max_steps=100"],
     "pretrain.freeze_encoder_steps (100) must be < max_steps (100): the encoder would never train"),
    (["pretrain.freeze_encoder_steps=-1"], "'pretrain.freeze_encoder_steps': Input should be greater than or equal to 0"),
    (["pretrain.freeze_encoder_steps=10", "pretrain.parallelism=fsdp"],
     "pretrain.freeze_encoder_steps is not implemented with parallelism fsdp or pretrain.stacking"),
])
def test_a_wrong_setting_is_refused_in_one_line(sets, message):
    from flows.recipe import load_recipe

    with pytest.raises(ConfigError) as err:
        load_recipe("configs/local.yaml", sets)
    # the recipe loader's header, then the problem on one line of its own
    problem = [line for line in str(err.value).splitlines() if line.lstrip().startswith("- 'pretrain")]
    assert len(problem) == 1 and message in problem[0], str(err.value)


def test_two_gloo_processes_freeze_alike(run_factory):
    from .ranks import launch_ranks

    run = run_factory("ddp")
    cfg = CFG.model_copy(update={"max_steps": 6, "freeze_encoder_steps": 2})
    launch_ranks(TINY, cfg, run, world=2)
    warmed, final = _weights(run, 2), _weights(run)
    single = run_factory("single")
    pretrain(TINY, cfg, single, stop_after=2)
    start_of_single = _weights(single, 2)
    # the same init (seed) and the same frozen set on both ranks: the encoder at step 2 is the single run's bytes,
    # i.e. untouched; after the warm-up DDP is rewrapped over every parameter and the encoder trains
    encoder = [n for n in warmed if n.startswith("bert.")]
    assert all(torch.equal(warmed[n], start_of_single[n]) for n in encoder)
    assert not torch.equal(final["bert.embeddings.word_embeddings.weight"],
                           warmed["bert.embeddings.word_embeddings.weight"])
