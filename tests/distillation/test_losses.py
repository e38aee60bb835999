"""Each distillation loss against a hand computation on tiny tensors."""

import math

import pytest
import torch

from distillation import losses


def test_soft_kl_by_hand():
    s, t, T = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), 2.0
    ps = [math.exp(0.5) / (math.exp(0.5) + 1), 1 / (math.exp(0.5) + 1)]
    pt = [1 / (1 + math.e), math.e / (1 + math.e)]
    kl = sum(p * math.log(p / q) for p, q in zip(pt, ps))
    assert losses.soft_kl(s, t, T).item() == pytest.approx(T * T * kl, rel=1e-5)
    assert losses.soft_kl(t, t, T).item() == pytest.approx(0.0, abs=1e-7)


def test_soft_cross_entropy_by_hand():
    s, t = torch.tensor([[0.0, 0.0], [2.0, 0.0]]), torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    # teacher uniform: row 1 = log 2, row 2 = -(0.5 log p1 + 0.5 log p2)
    p1 = math.exp(2) / (math.exp(2) + 1)
    row2 = -(0.5 * math.log(p1) + 0.5 * math.log(1 - p1))
    assert losses.soft_cross_entropy(s, t).item() == pytest.approx((math.log(2) + row2) / 2, rel=1e-6)


def test_hidden_cosine_by_hand_ignores_padding():
    s = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    t = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [-5.0, 5.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert losses.hidden_cosine(s, t, mask).item() == pytest.approx((0.0 + 1.0) / 2)
    assert losses.hidden_cosine(s, t).item() == pytest.approx((0.0 + 1.0 + 1.0) / 3)


def test_patient_loss_by_hand():
    s = [torch.tensor([[3.0, 4.0]]), torch.tensor([[1.0, 0.0]])]
    t = [torch.tensor([[6.0, 8.0]]), torch.tensor([[0.0, 2.0]])]
    # layer 1: identical directions -> 0; layer 2: (1,0) vs (0,1) -> 2
    assert losses.patient_loss(s, t).item() == pytest.approx(2.0)
    with pytest.raises(ValueError):
        losses.patient_loss(s, t[:1])


def test_pkd_loss_combination():
    s, t, labels = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.tensor([1])
    s_cls, t_cls = [torch.tensor([[1.0, 0.0]])], [torch.tensor([[0.0, 1.0]])]
    out = losses.pkd_loss(s, t, labels, alpha=0.3, temperature=4.0, beta=10.0, student_cls=s_cls, teacher_cls=t_cls)
    ce = -math.log(1 / (1 + math.e))
    want = 0.3 * losses.soft_kl(s, t, 4.0).item() + 0.7 * ce + 10.0 * 2.0
    assert out["ce_loss"].item() == pytest.approx(ce, rel=1e-6)
    assert out["loss"].item() == pytest.approx(want, rel=1e-6)


def test_hidden_mse_with_projection_by_hand():
    s = torch.tensor([[[1.0], [2.0], [9.0]]])
    t = torch.tensor([[[2.0, 0.0], [4.0, 1.0], [0.0, 0.0]]])
    proj = torch.nn.Linear(1, 2)
    with torch.no_grad():
        proj.weight.copy_(torch.tensor([[2.0], [0.0]]))
        proj.bias.zero_()
    mask = torch.tensor([[1, 1, 0]])
    # projected: (2,0), (4,0) -> errors 0,0 and 0,1 -> mean over 4 elements = 0.25
    assert losses.hidden_mse(s, t, proj, mask).item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="projection"):
        losses.hidden_mse(s, t, None, mask)


def test_attention_mse_only_real_pairs():
    s = torch.zeros(1, 1, 2, 2)
    t = torch.tensor([[[[1.0, 100.0], [100.0, 100.0]]]])
    mask = torch.tensor([[1, 0]])
    assert losses.attention_mse(s, t, mask).item() == pytest.approx(1.0)
    assert losses.attention_mse(s, t).item() == pytest.approx((1 + 3 * 100.0 ** 2) / 4)
    with pytest.raises(ValueError, match="heads"):
        losses.attention_mse(torch.zeros(1, 2, 2, 2), t, mask)
