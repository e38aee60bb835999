"""Pretraining end to end on a tiny synthetic run: the loss falls, a resumed run reproduces the uninterrupted
one exactly on CPU, and reruns refuse foreign checkpoints / report a finished run."""

import json
import random

import numpy as np
import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.optim import WarmupLinearDecay, build_optimizer, parameter_groups
from training.models.bert.model import BertConfig, BertForPreTraining
from training.pretrain import pretrain, run_pretrain

SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_loss_falls_and_final_model_is_written(tiny_run):
    model = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=16, max_steps=150, warmup_steps=10, learning_rate=3e-3, log_every=25,
                         save_every=1000, seed=1)
    summary = run_pretrain(model, cfg, tiny_run)
    metrics = _metrics(tiny_run)
    assert [m["step"] for m in metrics] == [25, 50, 75, 100, 125, 150]
    first, last = metrics[0], metrics[-1]
    assert last["mlm_loss"] < first["mlm_loss"] - 0.5, (first, last)
    assert last["mlm_acc"] > 5 * (1 / 45)  # far above chance on the 45-token vocabulary
    assert {"loss", "mlm_loss", "nsp_loss", "lr", "tokens_per_s", "mlm_acc", "step"} <= set(last)
    assert last["lr"] == 0.0 and metrics[0]["lr"] == pytest.approx(3e-3 * (150 - 25) / 140)
    assert summary["status"] == "trained" and summary["steps"] == 150 and summary["loss"] == last["loss"]
    assert summary["tokens"] == last["tokens"] > 0
    assert (tiny_run / "pretrain" / "final" / "model.safetensors").is_file()
    assert json.loads((tiny_run / "pretrain" / "summary.json").read_text()) == summary

    # a rerun with the same config reports done without training; another config is refused
    again = run_pretrain(model, cfg, tiny_run)
    assert again["status"] == "already complete" and again["loss"] == summary["loss"]
    assert _metrics(tiny_run) == metrics
    with pytest.raises(ContractError, match="pretrain.seed \\(checkpoint 1, now 2\\)"):
        run_pretrain(model, cfg.model_copy(update={"seed": 2}), tiny_run)


def _scramble_global_rngs():
    torch.manual_seed(987654)
    np.random.seed(4321)
    random.seed(99)


def test_resume_reproduces_the_loss_curve_exactly(run_factory):
    straight_run, resumed_run = run_factory("straight"), run_factory("resumed")
    cfg = PretrainConfig(batch_size=16, max_steps=40, warmup_steps=5, learning_rate=2e-3, log_every=5,
                         save_every=20, seed=3)
    assert SMALL.hidden_dropout > 0 and SMALL.attention_dropout > 0  # dropout on: RNG state must be restored
    straight = pretrain(SMALL, cfg, straight_run)

    # stop at 25 (a metrics line at 25 was written after the checkpoint at 20: it must be replaced, not duplicated)
    partial = pretrain(SMALL, cfg, resumed_run, stop_after=25)
    assert partial["status"] == "stopped" and not (resumed_run / "pretrain" / "final").exists()
    assert [m["step"] for m in _metrics(resumed_run)][-1] == 25
    leftover = resumed_run / "pretrain" / "checkpoints" / ".step-25.staging-999"  # a save killed midway
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"partial")
    with open(resumed_run / "pretrain" / "metrics.jsonl", "a") as f:  # an append killed midway
        f.write('{"step": 30, "lo')
    _scramble_global_rngs()
    resumed = pretrain(SMALL, cfg.model_copy(update={"log_every": 5, "keep_last": 1}), resumed_run)
    assert resumed["resumed_from_step"] == 20 and straight["resumed_from_step"] is None
    assert not leftover.exists()

    def curve(run):
        return [{k: v for k, v in m.items() if k != "tokens_per_s"} for m in _metrics(run)]

    assert [m["step"] for m in _metrics(resumed_run)] == list(range(5, 45, 5))
    assert curve(resumed_run) == curve(straight_run)  # exact equality of every loss, lr and accuracy
    final = "pretrain/final/model.safetensors"
    assert (straight_run / final).read_bytes() == (resumed_run / final).read_bytes()
    assert resumed["loss"] == straight["loss"] and resumed["tokens"] == straight["tokens"]


def test_resume_refuses_a_checkpoint_of_another_config(tiny_run):
    cfg = PretrainConfig(batch_size=16, max_steps=20, warmup_steps=2, learning_rate=1e-3, log_every=5, save_every=5)
    pretrain(SMALL, cfg, tiny_run, stop_after=5)
    other_model = SMALL.model_copy(update={"intermediate_size": 96})
    with pytest.raises(ContractError, match="step-5.*model.intermediate_size \\(checkpoint 64, now 96\\)"):
        pretrain(other_model, cfg, tiny_run)
    with pytest.raises(ContractError, match="pretrain.learning_rate .*pretrain.max_steps \\(checkpoint 20, now 30\\)"):
        pretrain(SMALL, cfg.model_copy(update={"learning_rate": 5e-4, "max_steps": 30}), tiny_run)


def test_mlm_only_objective_has_no_nsp_loss(tiny_run):
    cfg = PretrainConfig(objective="mlm", batch_size=16, max_steps=4, warmup_steps=1, log_every=2, save_every=100)
    summary = run_pretrain(SMALL, cfg, tiny_run)
    metrics = _metrics(tiny_run)
    assert [m["step"] for m in metrics] == [2, 4]
    assert all("nsp_loss" not in m and m["loss"] == m["mlm_loss"] for m in metrics)
    assert "nsp_loss" not in summary


def test_positions_shorter_than_the_shards_are_refused(tiny_run):
    cfg = PretrainConfig(batch_size=16, max_steps=2, warmup_steps=0)
    with pytest.raises(ConfigError, match="max_position_embeddings=16 is shorter.*max_seq_len 32"):
        run_pretrain(SMALL.model_copy(update={"max_position_embeddings": 16}), cfg, tiny_run)
    with pytest.raises(ConfigError, match="vocab_size=40 is smaller"):
        run_pretrain(SMALL.model_copy(update={"vocab_size": 40}), cfg, tiny_run)


def test_tokenizer_changed_after_preprocessing_is_refused(tiny_run):
    tok = tiny_run / "tokenizer" / "tokenizer.json"
    tok.write_text(tok.read_text().replace('"w1"', '"w01"'))
    with pytest.raises(ContractError, match="tokenizer sha256"):
        run_pretrain(SMALL, PretrainConfig(batch_size=16, max_steps=2, warmup_steps=0), tiny_run)


def test_a_warmup_longer_than_the_run_warms_up_over_the_whole_run(caplog):
    # a recipe shortened with --set pretrain.max_steps=5 keeps its warmup_steps: accepted, with a warning
    from training.optim import scheduler_from_config

    cfg = PretrainConfig(warmup_steps=10, max_steps=5, learning_rate=1.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = scheduler_from_config(optimizer, cfg)
    assert "warms up over all 5 steps" in caplog.text
    lrs = []
    for _ in range(5):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == [0.0, 0.2, 0.4, 0.6, 0.8]


def test_config_validation():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="seed"):  # numpy's default_rng([seed, epoch]) refuses negative seeds
        PretrainConfig(seed=-1)
    defaults = ModelConfig().to_bert_config(30522, 0)
    assert (defaults.num_layers, defaults.hidden_size, defaults.num_heads, defaults.intermediate_size) == (12, 768, 12, 3072)


def test_no_weight_decay_on_biases_and_layer_norms_and_schedule():
    model = BertForPreTraining(BertConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2,
                                          intermediate_size=16, max_position_embeddings=8))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(n.endswith("bias") or "LayerNorm" in n for n in (names[id(p)] for p in no_decay["params"]))
    assert all(not n.endswith("bias") and "LayerNorm" not in n for n in (names[id(p)] for p in decay["params"]))
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert "mlm_head.bias" in {names[id(p)] for p in no_decay["params"]}
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6)
    assert optimizer.param_groups[0]["eps"] == 1e-6
    rule = WarmupLinearDecay(warmup_steps=10, max_steps=110)
    assert [rule(s) for s in (0, 5, 10, 60, 110, 200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]


def test_length_buckets_train_and_resume_exactly(run_factory):
    """pretrain.length_buckets through the trainer: the loss falls with batches padded to the buckets, and a run
    resumed at a checkpoint reproduces the uninterrupted metrics."""
    straight_run, resumed_run = run_factory("straight"), run_factory("resumed")
    cfg = PretrainConfig(batch_size=16, max_steps=20, warmup_steps=2, learning_rate=3e-3, log_every=5,
                         save_every=10, seed=3, length_buckets=[16, 24, 32], bucket_window=4)
    straight = pretrain(SMALL, cfg, straight_run)
    assert pretrain(SMALL, cfg, resumed_run, stop_after=15)["status"] == "stopped"
    resumed = pretrain(SMALL, cfg, resumed_run)
    assert resumed["resumed_from_step"] == 10
    assert [m["loss"] for m in _metrics(resumed_run)] == [m["loss"] for m in _metrics(straight_run)]
    assert resumed["loss"] == straight["loss"] and _metrics(straight_run)[-1]["mlm_loss"] < _metrics(straight_run)[0]["mlm_loss"]
