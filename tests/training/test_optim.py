"""Optimisers and schedules of training/optim.py against hand-computed values: LAMB's step (trust ratio, no
decay and no trust ratio for biases/LayerNorm), Adafactor's factored step (Shazeer & Stern 2018), and the
slanted triangular (ULMFiT) / one-cycle / constant / linear / warmup-stable-decay schedules at chosen steps."""

import math

import pytest
import torch
from torch import nn

from training.pretrain_config import PretrainConfig
from pydantic import ValidationError

from training.optim import (Lamb, OneCycle, SlantedTriangular, WarmupLinearDecay, WarmupStableDecay, build_optimizer,
                            build_scheduler, optimizer_from_config, scheduler_from_config)


def _lamb_reference(w, g, m, v, step, lr, wd, beta1, beta2, eps, adapt):
    """One LAMB step written out in plain Python floats (NVIDIA FusedLAMB / You et al. 2020, Algorithm 2)."""
    m = [beta1 * mi + (1 - beta1) * gi for mi, gi in zip(m, g)]
    v = [beta2 * vi + (1 - beta2) * gi * gi for vi, gi in zip(v, g)]
    m_hat = [mi / (1 - beta1 ** step) for mi in m]
    v_hat = [vi / (1 - beta2 ** step) for vi in v]
    r = [mh / (math.sqrt(vh) + eps) + wd * wi for mh, vh, wi in zip(m_hat, v_hat, w)]
    ratio = 1.0
    if adapt:
        w_norm, r_norm = math.sqrt(sum(x * x for x in w)), math.sqrt(sum(x * x for x in r))
        ratio = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
    return [wi - lr * ratio * ri for wi, ri in zip(w, r)], m, v


def test_lamb_matches_a_hand_computed_step():
    # step 1 by hand: m_hat = g, v_hat = g^2, so r = g / (|g| + eps) + wd * w ~ sign(g) + 0.1 * w
    #   w = [3, 4] (||w|| = 5), g = [0.5, -2]: r ~ [1.3, -0.6], ||r|| ~ 1.43178, ratio ~ 3.49215
    #   w' ~ [3 - 0.1 * 3.49215 * 1.3, 4 + 0.1 * 3.49215 * 0.6] = [2.54602, 4.20953]
    # bias b = [3, -1], g = [0.25, 0.25], no decay and no trust ratio (it would be ~2.24): b' ~ b - 0.1 * sign(g)
    weight = nn.Parameter(torch.tensor([3.0, 4.0], dtype=torch.float64))
    bias = nn.Parameter(torch.tensor([3.0, -1.0], dtype=torch.float64))
    opt = Lamb([{"params": [weight], "weight_decay": 0.1},
                {"params": [bias], "weight_decay": 0.0, "layer_adaptation": False}], lr=0.1, betas=(0.9, 0.999), eps=1e-6)
    weight.grad = torch.tensor([0.5, -2.0], dtype=torch.float64)
    bias.grad = torch.tensor([0.25, 0.25], dtype=torch.float64)
    opt.step()
    assert weight.detach().tolist() == pytest.approx([2.54602, 4.20953], abs=1e-5)
    assert bias.detach().tolist() == pytest.approx([2.9, -1.1], abs=1e-6)

    # step 2 (moments carried over) against the written-out algorithm, exactly up to float64 rounding
    w_ref, m_ref, v_ref = _lamb_reference([3.0, 4.0], [0.5, -2.0], [0, 0], [0, 0], 1, 0.1, 0.1, 0.9, 0.999, 1e-6, True)
    w_ref, _, _ = _lamb_reference(w_ref, [-1.0, 0.5], m_ref, v_ref, 2, 0.1, 0.1, 0.9, 0.999, 1e-6, True)
    b_ref, mb, vb = _lamb_reference([3.0, -1.0], [0.25, 0.25], [0, 0], [0, 0], 1, 0.1, 0.0, 0.9, 0.999, 1e-6, False)
    b_ref, _, _ = _lamb_reference(b_ref, [0.5, -0.75], mb, vb, 2, 0.1, 0.0, 0.9, 0.999, 1e-6, False)
    weight.grad = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    bias.grad = torch.tensor([0.5, -0.75], dtype=torch.float64)
    opt.step()
    assert weight.detach().tolist() == pytest.approx(w_ref, rel=1e-12)
    assert bias.detach().tolist() == pytest.approx(b_ref, rel=1e-12)
    assert opt.state[weight]["step"] == 2


def test_lamb_trust_ratio_is_one_for_a_zero_weight():
    weight = nn.Parameter(torch.zeros(3))
    opt = Lamb([weight], lr=0.5, weight_decay=0.1, eps=1e-8)
    weight.grad = torch.tensor([2.0, -3.0, 0.0])
    opt.step()  # ||w|| = 0: ratio 1, the plain Adam-like step of size lr
    assert weight.detach().tolist() == pytest.approx([-0.5, 0.5, 0.0], abs=1e-6)


def test_build_optimizer_excludes_biases_and_layer_norms_from_decay_and_trust_ratio():
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    lamb = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6, name="lamb")
    assert isinstance(lamb, Lamb)
    decay, no_decay = lamb.param_groups
    assert decay["layer_adaptation"] and decay["weight_decay"] == 0.01 and decay["params"] == [model[0].weight]
    assert not no_decay["layer_adaptation"] and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in no_decay["params"]} == {id(model[0].bias), id(model[1].weight), id(model[1].bias)}
    adafactor = optimizer_from_config(model, PretrainConfig(optimizer="adafactor", learning_rate=1e-3))
    assert isinstance(adafactor, torch.optim.Adafactor) and adafactor.param_groups[1]["weight_decay"] == 0.0
    with pytest.raises(ValueError, match="optimizer"):
        PretrainConfig(optimizer="sgd")


def test_adafactor_takes_the_papers_factored_step():
    """torch.optim.Adafactor (the one pretrain.optimizer=adafactor builds) against Shazeer & Stern's Algorithm
    4/5 written out: rows/columns of the squared gradient instead of the full second moment, relative step
    size scaled by RMS(param), update clipping at d = 1, beta2_t = 1 - t^-0.8."""
    torch.manual_seed(0)
    param = nn.Parameter(torch.randn(2, 3, dtype=torch.float64))
    opt = torch.optim.Adafactor([param], lr=0.05, weight_decay=0.0)
    theta = param.detach().clone()
    row = torch.zeros(2, 1, dtype=torch.float64)
    col = torch.zeros(1, 3, dtype=torch.float64)
    for t in (1, 2, 3):
        grad = torch.randn(2, 3, dtype=torch.float64)
        param.grad = grad.clone()
        opt.step()
        beta2 = 1 - t ** -0.8
        row = beta2 * row + (1 - beta2) * (grad * grad).sum(dim=1, keepdim=True)  # R_t = beta R + (1-beta) (G^2) 1_m
        col = beta2 * col + (1 - beta2) * (grad * grad).sum(dim=0, keepdim=True)  # C_t = beta C + (1-beta) 1_n^T G^2
        v_hat = row @ col / row.sum()
        update = grad / v_hat.sqrt()
        update = update / max(1.0, (update.pow(2).mean().sqrt() / 1.0).item())
        rho = min(0.05, 1 / math.sqrt(t))
        alpha = max(1e-3, theta.pow(2).mean().sqrt().item()) * rho
        theta = theta - alpha * update
        assert torch.allclose(param.detach(), theta, rtol=1e-10, atol=1e-12), t
    state = opt.state[param]
    assert state["row_var"].numel() + state["col_var"].numel() == 5  # factored: 2 + 3 numbers, not 2 x 3


def test_linear_schedule_is_unchanged():
    rule = WarmupLinearDecay(warmup_steps=10, max_steps=110)
    assert [rule(s) for s in (0, 5, 10, 60, 110, 200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = build_scheduler(opt, 10, 110)  # the default schedule (what every existing recipe gets)
    lrs = []
    for _ in range(12):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [2.0 * rule(s) for s in range(12)]


def test_slanted_triangular_follows_ulmfit():
    # Howard & Ruder 2018, eq. 3: cut = floor(T cut_frac); p = t/cut if t < cut else 1 - (t-cut)/(cut (1/cut_frac - 1));
    # eta_t = eta_max (1 + p (ratio - 1)) / ratio. Here T = 1000, cut_frac = 0.1, ratio = 32: warmup_steps = 100.
    total, cut_frac, ratio = 1000, 0.1, 32
    cut = math.floor(total * cut_frac)

    def ulmfit(t):
        p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
        return (1 + p * (ratio - 1)) / ratio

    rule = SlantedTriangular(warmup_steps=cut, max_steps=total, ratio=ratio)
    for t in (0, 1, 50, 99, 100, 101, 550, 999, 1000):
        assert rule(t) == pytest.approx(ulmfit(t), rel=1e-12), t
    assert rule(0) == rule(1000) == pytest.approx(1 / 32) and rule(100) == 1.0 and rule(5000) == pytest.approx(1 / 32)
    cfg = PretrainConfig(schedule="slanted_triangular", warmup_steps=100, max_steps=1000, learning_rate=0.01)
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=cfg.learning_rate)
    sched = scheduler_from_config(opt, cfg)
    assert sched.get_last_lr()[0] == pytest.approx(0.01 / 32)


def test_one_cycle_and_constant_follow_their_formulas():
    rule = OneCycle(warmup_steps=30, max_steps=130, div_factor=25.0, final_div_factor=1e4)
    lo, end = 1 / 25, 1 / 25 / 1e4
    expected = {0: lo, 15: lo + (1 - lo) * 0.5, 30: 1.0, 80: end + (1 - end) * 0.5,
                55: end + (1 - end) * (1 + math.cos(math.pi * 0.25)) / 2, 130: end, 500: end}
    for step, value in expected.items():
        assert rule(step) == pytest.approx(value, rel=1e-12), step
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = scheduler_from_config(opt, PretrainConfig(schedule="constant", warmup_steps=4, max_steps=10))
    lrs = []
    for _ in range(8):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]


def test_warmup_stable_decay_warms_up_holds_then_decays_along_one_minus_sqrt_to_zero():
    # W = 10, T = 110, decay over round(0.4 * 110) = 44 steps: stable from 10 to 66, then 1 - sqrt((s - 66) / 44)
    rule = WarmupStableDecay(warmup_steps=10, max_steps=110, decay_fraction=0.4)
    expected = {0: 0.0, 5: 0.5, 10: 1.0, 40: 1.0, 65: 1.0, 66: 1.0, 77: 0.5, 99: 1 - math.sqrt(0.75), 110: 0.0,
                500: 0.0}
    for step, value in expected.items():
        assert rule(step) == pytest.approx(value, abs=1e-12), step
    after_warmup = [rule(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(after_warmup, after_warmup[1:]))
    assert rule(67) < 1 - 1 / 44  # 1-sqrt falls faster at first than a linear decay from the same start
    # a decay longer than what follows the warmup starts right after it (no stable phase)
    assert WarmupStableDecay(warmup_steps=10, max_steps=20, decay_fraction=1.0)(15) == pytest.approx(1 - math.sqrt(0.5))


def test_wsd_from_the_config_steps_the_learning_rate_and_resumes_exactly():
    cfg = PretrainConfig(schedule="wsd", warmup_steps=4, max_steps=20, wsd_decay_fraction=0.25, learning_rate=2.0)
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=cfg.learning_rate)
    sched = scheduler_from_config(opt, cfg)
    lrs = []
    for _ in range(21):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    decay = [2.0 * (1 - math.sqrt(k / 5)) for k in range(6)]  # the last 5 steps: 15 .. 20
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 1.5] + [2.0] * 11 + decay, abs=1e-12)
    # the scheduler's state is plain numbers: a new scheduler loaded from it continues the same rates
    opt2 = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=cfg.learning_rate)
    first = scheduler_from_config(opt2, cfg)
    for _ in range(16):
        opt2.step()
        first.step()
    state = first.state_dict()
    opt3 = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=cfg.learning_rate)
    resumed = scheduler_from_config(opt3, cfg)
    resumed.load_state_dict(state)
    resumed_lrs = []
    for _ in range(4):
        opt3.step()
        resumed.step()
        resumed_lrs.append(resumed.get_last_lr()[0])
    assert resumed_lrs == pytest.approx(lrs[17:21], abs=1e-12)


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_wsd_decay_fraction_outside_zero_one_is_refused_naming_the_field(fraction):
    with pytest.raises(ValidationError, match="wsd_decay_fraction"):
        PretrainConfig(schedule="wsd", wsd_decay_fraction=fraction)


def test_global_batch_and_accumulation_config():
    # LAMB's 64K-sequence batch (You et al.) as 512 micro-batches of 128, and a 65,536-token batch of 128 x 512
    big = PretrainConfig(batch_size=65536, grad_accumulation=512, optimizer="lamb", warmup_steps=100, max_steps=8599)
    assert big.batch_size // big.grad_accumulation == 128
    assert PretrainConfig(batch_size=128, grad_accumulation=4).grad_accumulation == 4
    with pytest.raises(ValueError, match="grad_accumulation \\(3\\) must divide batch_size \\(128\\)"):
        PretrainConfig(batch_size=128, grad_accumulation=3)


@pytest.mark.parametrize("name", ["lamb", "adafactor"])
def test_progressive_stacking_keeps_the_optimizer_and_its_groups(name):
    from training.models.bert.model import BertConfig, BertForPreTraining
    from training.stacking import stack_layers

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2,
                                          intermediate_size=16, max_position_embeddings=8))
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6, name=name)
    ids = torch.randint(5, 20, (2, 8))
    model(ids, torch.zeros_like(ids), torch.ones_like(ids), torch.tensor([[1, 2], [3, 4]]),
          torch.tensor([[5, 6], [7, 8]]), torch.tensor([0, 1]))["loss"].backward()
    optimizer.step()
    stacked, new_optimizer = stack_layers(model, optimizer)
    assert type(new_optimizer) is type(optimizer)
    assert [g["weight_decay"] for g in new_optimizer.param_groups] == [0.01, 0.0]
    assert [g.get("layer_adaptation") for g in new_optimizer.param_groups] == (
        [True, False] if name == "lamb" else [None, None])
    assert len(new_optimizer.state) > len(optimizer.state)  # the copied layer starts with its source's state
