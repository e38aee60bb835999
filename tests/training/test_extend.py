"""Which checkpoints a raised max_steps continues exactly (training/extend.py): the steps already trained must keep
their learning rates under the new budget, or the user says --extend."""

from __future__ import annotations

import pytest
import torch

from training.extend import is_extension, resumable_step, unchanged_through
from training.optim import build_scheduler, reset_learning_rate
from training.pretrain_config import PretrainConfig


def fields(**kw) -> dict:
    return PretrainConfig(**kw).trajectory_fields()


def test_constant_schedule_keeps_every_trained_step():
    old, new = fields(schedule="constant", warmup_steps=2, max_steps=12), fields(schedule="constant", warmup_steps=2,
                                                                               max_steps=20)
    assert is_extension(old, new) and not is_extension(new, old)
    assert unchanged_through(old, new) == 12
    assert resumable_step(old, new, [5, 10], extend=False) == 10


def test_wsd_keeps_the_steps_before_the_old_decay():
    old = fields(schedule="wsd", warmup_steps=2, max_steps=100, wsd_decay_fraction=0.2)  # decay from step 80
    new = fields(schedule="wsd", warmup_steps=2, max_steps=200, wsd_decay_fraction=0.2)
    assert unchanged_through(old, new) == 80
    assert resumable_step(old, new, [40, 80, 90], extend=False) == 80  # not 90: its steps 81-90 decayed
    assert resumable_step(old, new, [90], extend=False) is None
    assert resumable_step(old, new, [90], extend=True) == 90


def test_linear_decay_keeps_only_the_warmup():
    old = fields(schedule="linear", warmup_steps=4, max_steps=12)
    new = fields(schedule="linear", warmup_steps=4, max_steps=20)
    assert unchanged_through(old, new) == 4
    assert resumable_step(old, new, [5, 10], extend=False) is None
    assert resumable_step(old, new, [2, 5, 10], extend=False) == 2
    assert resumable_step(old, new, [5, 10], extend=True) == 10


def test_a_warmup_clamped_to_a_short_run_changes_with_the_budget():
    # warmup_steps longer than the run warms up over the whole run (scheduler_from_config): more steps, other rates
    old, new = fields(schedule="wsd", warmup_steps=100, max_steps=12), fields(schedule="wsd", warmup_steps=100,
                                                                            max_steps=20)
    assert unchanged_through(old, new) == 0


def test_other_changes_are_not_extensions():
    assert not is_extension(fields(max_steps=12), fields(max_steps=20, seed=1))
    assert not is_extension(fields(max_steps=12), fields(max_steps=20, learning_rate=3e-4))


def test_reset_learning_rate_follows_the_new_budget():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = build_scheduler(opt, 2, 20, "linear")
    for _ in range(10):
        opt.step()
        sched.step()
    state = sched.state_dict()
    longer = build_scheduler(torch.optim.SGD([param], lr=1.0), 2, 40, "linear")
    state["lr_lambdas"] = [None]
    longer.load_state_dict(state)
    longer.optimizer.param_groups[0]["lr"] = opt.param_groups[0]["lr"]  # what loading the optimiser restores
    reset_learning_rate(longer)
    assert longer.optimizer.param_groups[0]["lr"] == (40 - 10) / (40 - 2)
    assert longer.get_last_lr() == [(40 - 10) / (40 - 2)]


def test_the_refusal_explains_a_warmup_clamped_to_the_old_run():
    from training.extend import schedule_reason

    old, new = fields(schedule="wsd", warmup_steps=100, max_steps=12), fields(schedule="wsd", warmup_steps=100,
                                                                            max_steps=20)
    reason = schedule_reason(old, new, 10)
    assert "from step 1 on" in reason and "warmup_steps=100 is longer than the 12-step run" in reason, reason
    assert "--extend" in reason


def test_run_pretrain_extends_refuses_or_continues_with_extend(tiny_run):
    """Without the stage layer (a direct run_pretrain): a linear run raised to more steps is refused naming
    --extend; with pretrain.extend it continues from its newest checkpoint, its shorter final/ moved aside."""
    import pytest

    from bertfactory.errors import ConfigError
    from training.checkpoint import read_checkpoint_config
    from training.config import ModelConfig
    from training.pretrain import pretrain, run_pretrain

    small = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=8, max_steps=12, warmup_steps=2, learning_rate=1e-3, log_every=4, save_every=5,
                         seed=1)
    pretrain(small, cfg, tiny_run)
    longer = cfg.model_copy(update={"max_steps": 20})
    with pytest.raises(ConfigError, match=r"^pretrain.max_steps changed \(12 -> 20\).*--extend"):
        run_pretrain(small, longer, tiny_run)
    summary = run_pretrain(small, longer.model_copy(update={"extend": True}), tiny_run)
    assert summary["resumed_from_step"] == 10 and summary["steps"] == 20
    aside = [p for p in (tiny_run / "pretrain").iterdir() if p.name.startswith("final.replaced-")]
    assert len(aside) == 1 and read_checkpoint_config(aside[0])["training"]["step"] == 12
    # from the resumed step on the rate is the new budget's linear decay (logged: the rate of the next step)
    import json

    lines = [json.loads(line) for line in (tiny_run / "pretrain/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [4, 8, 12, 16, 20]
    assert lines[3]["lr"] == pytest.approx(1e-3 * (20 - 16) / (20 - 2))
    assert lines[1]["lr"] == pytest.approx(1e-3 * (12 - 8) / (12 - 2))  # the steps before kept their rates


@pytest.mark.parametrize("schedule, extra, expected", [
    ("wsd", {"wsd_decay_fraction": 0.2}, 960),  # the decay starts after it
    ("constant", {}, 1200),  # every longer run shares all of it
    ("linear", {}, 100),  # stretches with max_steps: only the warmup is shared
])
def test_the_branch_step_is_the_last_step_every_longer_run_shares(schedule, extra, expected):
    from training.extend import branch_step
    from training.pretrain_config import PretrainConfig

    fields = PretrainConfig(schedule=schedule, max_steps=1200, warmup_steps=100, **extra).trajectory_fields()
    assert branch_step(fields) == expected
    longer = {**fields, "max_steps": 5000}
    assert unchanged_through(fields, longer) == expected
