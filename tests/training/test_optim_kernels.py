"""The GPU step's optimiser kernels and sync-free reads, checked on the CPU: LAMB on torch._foreach kernels against
its per-parameter loop, fused AdamW against torch's loop, the kernel choice of build_optimizer, and the trainer's
deferred reads (no host read inside a step, the optimiser vetoing a non-finite step on the device) against the
per-step read. On CUDA the trainer defers by default (fused AdamW, no spike factor); here it is switched on by hand
with torch's CPU fused AdamW, which takes the same `found_inf` flag.

Tolerances: the foreach LAMB does the loop's arithmetic in the same order: equal to the bit on the CPU (asserted
equal). Fused AdamW computes the same update in another order: 1e-6 relative on the parameters after 5 steps,
and the pretrain loss curve within 1e-5 of the loop's. Deferred and per-step reads with the same optimiser do the
same arithmetic: identical curves."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import training.optim as optim
import training.trainer as trainer_module
from training.config import ModelConfig
from training.optim import Lamb, adamw_kernel, build_optimizer
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig
from training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)


def _pair(opt_cls, **kwargs):
    torch.manual_seed(0)
    shapes = [(6, 4), (4,), (5,)]
    a = [nn.Parameter(torch.randn(*s)) for s in shapes]
    b = [nn.Parameter(p.detach().clone()) for p in a]

    def groups(ps):
        return [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0,
                                                          **({"layer_adaptation": False} if opt_cls is Lamb else {})}]
    return a, b, groups


def _steps(a, b, oa, ob, steps=5):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for pa, pb in zip(a, b):
            grad = torch.randn(pa.shape, generator=g)
            pa.grad, pb.grad = grad.clone(), grad.clone()
        oa.step()
        ob.step()


def test_foreach_lamb_equals_the_loop():
    a, b, groups = _pair(Lamb)
    loop = Lamb(groups(a), lr=0.05, foreach=False)
    fused = Lamb(groups(b), lr=0.05, foreach=True)
    _steps(a, b, loop, fused)
    for pa, pb in zip(a, b):
        assert torch.equal(pa, pb)
    assert [s["step"] for s in fused.state.values()] == [5, 5, 5]
    # the default decides per group: the loop for CPU tensors
    assert Lamb(groups(a)).param_groups[0]["foreach"] is None


def test_fused_adamw_matches_the_loop_and_skips_on_found_inf():
    a, b, groups = _pair(torch.optim.AdamW)
    loop = torch.optim.AdamW(groups(a), lr=0.05)
    fused = torch.optim.AdamW(groups(b), lr=0.05, fused=True)
    _steps(a, b, loop, fused)
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pb, pa, rtol=1e-6, atol=1e-7)
    before = [p.detach().clone() for p in b]
    moments = [fused.state[p]["exp_avg"].clone() for p in b]
    for p in b:
        p.grad = torch.full_like(p, float("nan"))
    fused.grad_scale, fused.found_inf = None, torch.tensor(1.0)
    fused.step()  # the device-side veto the trainer's deferred step uses
    assert all(torch.equal(x, p) for x, p in zip(before, b))
    assert all(torch.equal(m, fused.state[p]["exp_avg"]) for m, p in zip(moments, b))
    assert all(int(fused.state[p]["step"]) == 5 for p in b)


def test_build_optimizer_picks_the_kernels_by_device():
    model = nn.Linear(3, 2)
    assert adamw_kernel(list(model.parameters())) == {}  # CPU: torch's loop, trajectories unchanged
    opt = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6)
    assert all(not g.get("fused") and not g.get("foreach") for g in opt.param_groups)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _run(run_factory, name, monkeypatch, fused=False, defer=False, poison_step=None):
    run = run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=64, heldout_rows=8)
    with monkeypatch.context() as patch:
        if fused:
            patch.setattr(optim, "adamw_kernel", lambda params: {"fused": True})
        if defer:
            patch.setattr(Trainer, "_defers_reads", lambda self: True)
        if poison_step is not None:  # the norm of that step's gradients reads as non-finite
            real, calls = trainer_module.clip_gradients, []

            def clip(model, max_norm):
                calls.append(1)
                norm = real(model, max_norm)
                return norm * float("inf") if len(calls) == poison_step else norm
            patch.setattr(trainer_module, "clip_gradients", clip)
        cfg = PretrainConfig(batch_size=8, max_steps=6, warmup_steps=1, learning_rate=2e-3, log_every=3,
                             save_every=4, seed=5, device="cpu")
        pretrain(TINY, cfg, run)
    return _metrics(run)


def _curve(metrics):
    return [{k: v for k, v in m.items() if k not in ("tokens_per_s", "mfu")} for m in metrics]


def test_deferred_reads_give_the_per_step_curve(run_factory, monkeypatch):
    loop = _run(run_factory, "loop", monkeypatch)
    per_step = _run(run_factory, "fused", monkeypatch, fused=True)
    deferred = _run(run_factory, "deferred", monkeypatch, fused=True, defer=True)
    assert _curve(deferred) == _curve(per_step)  # the same arithmetic, read later
    assert [m["step"] for m in loop] == [3, 6]
    for a, b in zip(loop, per_step):
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5)
        assert a["tokens"] == b["tokens"] and a["lr"] == b["lr"]


def test_a_non_finite_step_is_skipped_on_the_device_and_counted_at_the_read(run_factory, monkeypatch):
    per_step = _run(run_factory, "host", monkeypatch, fused=True, poison_step=2)
    deferred = _run(run_factory, "device", monkeypatch, fused=True, defer=True, poison_step=2)
    assert [m["skipped_steps"] for m in per_step] == [1, 1]
    assert _curve(deferred) == _curve(per_step)  # skipped alike, kept out of the averages alike


def test_defer_reads_needs_a_device_veto():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="defer_reads=True"):
        Trainer(model, torch.optim.AdamW(model.parameters()), None, None, None, torch.device("cpu"),
                _settings(), defer_reads=True)


def _settings():
    from pathlib import Path

    from training.trainer_settings import TrainerSettings

    return TrainerSettings(max_steps=1, metrics_path=Path("unused.jsonl"))
