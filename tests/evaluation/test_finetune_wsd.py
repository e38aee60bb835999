"""Warmup-stable-decay for fine-tuning (`evaluate.finetune.schedule: wsd`, evaluation/finetune_schedule.py): the
rule is pretraining's WarmupStableDecay (one implementation) stated in fractions of the run's steps, its values by
hand, `schedule_rule` picks each configured schedule, the config refuses a decay fraction outside (0, 1], and a
fine-tuning run under wsd holds the peak through the stable epochs and ends at 0."""

import math

import pytest
import torch
from pydantic import ValidationError

from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder
from evaluation.finetune import finetune_run, prepare_task
from evaluation.finetune_schedule import schedule_rule, warmup_stable_decay
from tests.evaluation.test_finetune import finetune_settings, rule_task, tiny_encoder
from training.optim import SlantedTriangular, WarmupLinearDecay, WarmupStableDecay

CPU = torch.device("cpu")


def test_wsd_by_hand_is_pretrainings_rule():
    rule = warmup_stable_decay(100, warmup_ratio=0.1, decay_fraction=0.2)
    assert isinstance(rule, WarmupStableDecay)  # training/optim.py's, not a second implementation
    # warmup over 10 steps, the peak from 10 to 80, then 1 - sqrt((s - 80) / 20) to 0 at step 100
    assert rule(0) == 0.0 and rule(5) == pytest.approx(0.5) and rule(10) == 1.0 and rule(79) == 1.0
    assert rule(80) == 1.0 and rule(85) == pytest.approx(1 - math.sqrt(0.25)) and rule(100) == 0.0
    assert rule(120) == 0.0
    # a decay longer than what follows the warmup starts right after it
    long = warmup_stable_decay(10, warmup_ratio=0.5, decay_fraction=1.0)
    assert long(5) == 1.0 and long(6) == pytest.approx(1 - math.sqrt(1 / 5))


def test_schedule_rule_picks_the_configured_schedule():
    kinds = {"linear": WarmupLinearDecay, "slanted_triangular": SlantedTriangular, "wsd": WarmupStableDecay}
    for name, kind in kinds.items():
        assert isinstance(schedule_rule(FinetuneConfig(schedule=name), 50), kind), name
    wsd = schedule_rule(FinetuneConfig(schedule="wsd", warmup_ratio=0.0, wsd_decay_fraction=0.5), 40)
    assert wsd(19) == 1.0 and wsd(20) == 1.0 and wsd(30) == pytest.approx(1 - math.sqrt(0.5)) and wsd(40) == 0.0


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_a_decay_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(ValidationError, match="wsd_decay_fraction"):
        FinetuneConfig(schedule="wsd", wsd_decay_fraction=fraction)
    with pytest.raises(ValidationError, match="schedule"):
        FinetuneConfig(schedule="cosine")


def test_a_finetuning_run_under_wsd_holds_the_peak_then_decays_to_zero(eval_run):
    text_encoder = TextEncoder.from_file(eval_run / "pretrain" / "final" / "tokenizer.json")
    data = rule_task("classification", 120)
    peak = 3e-3
    # 3 epochs of equal steps, no warmup, the last third decaying: the peak at the end of epochs 1 and 2, 0 after 3
    cfg = finetune_settings(epochs=3, schedule="wsd", wsd_decay_fraction=1 / 3, learning_rate=peak)
    task = prepare_task(data, text_encoder, cfg)
    vocab = text_encoder.tokenizer.get_vocab_size()
    run = finetune_run(tiny_encoder(vocab), task, cfg, peak, 1, CPU, 0, "wsd", keep_state=False)
    assert [e["lr_end"] for e in run.epochs] == [pytest.approx(peak), pytest.approx(peak), 0.0]
    assert all(math.isfinite(e["train_loss"]) for e in run.epochs)
    # the linear schedule of the same run has already decayed by a third after epoch 1: the setting is used
    linear = finetune_run(tiny_encoder(vocab), task, cfg.model_copy(update={"schedule": "linear"}), peak, 1, CPU, 0,
                          "linear", keep_state=False)
    assert linear.epochs[0]["lr_end"] == pytest.approx(2 * peak / 3)
