"""The plan pretraining logs at its start: a warmup as long as the run (a paper recipe's 10,000 warmup steps tried
with --set pretrain.max_steps=200) is said in one warning, since the learning rate then never reaches its peak."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch

from training.pretrain_config import PretrainConfig
from training.pretrain_summary import log_plan, warmup_past_the_end


class _Model:
    def num_parameters(self) -> int:
        return 1234


def test_a_warmup_as_long_as_the_run_is_warned_once_naming_both_settings(caplog):
    batches = SimpleNamespace(rows=64, steps_per_epoch=8)
    with caplog.at_level(logging.INFO, logger="training"):
        log_plan(_Model(), batches, PretrainConfig(max_steps=200, warmup_steps=10_000, learning_rate=1e-4),
                 torch.device("cpu"))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == ["pretrain: warmup_steps 10,000 >= max_steps 200: the learning rate rises for the whole run and "
                      "never reaches learning_rate 0.0001; a run this short wants a shorter warmup, e.g. --set "
                      "pretrain.warmup_steps=20 (10 % of the steps)"]


def test_a_warmup_shorter_than_the_run_says_nothing():
    assert warmup_past_the_end(PretrainConfig(max_steps=1200, warmup_steps=100)) is None
    assert warmup_past_the_end(PretrainConfig(max_steps=1200, warmup_steps=1199)) is None
    assert warmup_past_the_end(PretrainConfig(max_steps=5, warmup_steps=5)).startswith("warmup_steps 5 >= max_steps 5")
    assert "warmup_steps=1 " in warmup_past_the_end(PretrainConfig(max_steps=3, warmup_steps=10))
