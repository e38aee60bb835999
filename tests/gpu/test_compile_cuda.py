"""The GPU step on CUDA (issue 31): pretrain.compile with pretrain.static_shapes trains to the eager loss curve in
bf16 and compiles nothing after the first step; the trainer's step reads nothing back from the device (deferred
reads with fused AdamW: checked with torch.cuda.set_sync_debug_mode("error"), which raises on any synchronising
call); fused AdamW matches the foreach kernels and the foreach LAMB matches its loop.

Tolerances: eager and compiled both run under bf16 autocast, where inductor's fusions round differently (bf16 keeps
8 significant bits, tests/gpu/test_bf16.py): every logged loss of the compiled run within 2 % of the eager run's.
Fused vs foreach AdamW and foreach vs loop LAMB: fp32 rounding, 1e-5 relative on the parameters after 5 steps."""

from __future__ import annotations

import json

import pytest
import torch

from bertfactory.io import sha256_file
from training.config import ModelConfig
from training.data import PretrainBatches
from training.models.bert.model import BertConfig, BertForPreTraining
from training.objectives.mlm_nsp import mlm_nsp
from training.optim import Lamb, build_optimizer
from training.prefetch import pinned
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig
from training.step_guard import StepGuard
from training.trainer import Trainer
from training.trainer_settings import TrainerSettings

pytestmark = [pytest.mark.cuda,
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]

TINY = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_compiled_step_on_cuda_follows_the_eager_curve_without_recompiling(run_factory):
    runs = {name: run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=128, heldout_rows=8)
            for name in ("eager", "compiled")}
    cfg = PretrainConfig(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3, log_every=2, save_every=4,
                         seed=5, static_shapes=True, device="cuda")
    pretrain(TINY, cfg, runs["eager"])
    pretrain(TINY, cfg.model_copy(update={"compile": True}), runs["compiled"])
    eager, compiled = _metrics(runs["eager"]), _metrics(runs["compiled"])
    assert [m["step"] for m in compiled] == [m["step"] for m in eager] == [2, 4, 6, 8]
    for e, c in zip(eager, compiled):
        assert c["tokens"] == e["tokens"] and c["lr"] == e["lr"] and c["skipped_steps"] == 0
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert c[key] == pytest.approx(e[key], rel=2e-2), (key, e, c)
    assert eager[-1]["loss"] < eager[0]["loss"]
    counts = [m["compiled_graphs"] for m in compiled]
    assert counts == [counts[0]] * len(counts), counts  # everything compiled in the first window's first step
    torch.compiler.reset()


def _trainer(run, tmp_path, **kwargs) -> tuple[Trainer, PretrainBatches]:
    device = torch.device("cuda")
    batches = PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 16, seed=0)
    vocab = json.loads((run / "shards" / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=vocab, hidden_size=64, num_layers=2, num_heads=2,
                                          intermediate_size=128, max_position_embeddings=32)).to(device)
    model.static_shapes = True
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6, name=kwargs.pop("optimizer", "adamw"))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    settings = TrainerSettings(max_steps=4, metrics_path=tmp_path / "metrics.jsonl", bf16=True, log_every=4)
    return Trainer(model, optimizer, scheduler, batches, mlm_nsp, device, settings, **kwargs), batches


def test_the_cuda_step_reads_nothing_back(run_factory, tmp_path):
    run = run_factory("sync", max_seq_len=24, min_seq_len=24)
    trainer, batches = _trainer(run, tmp_path)
    assert trainer.defer_reads and all(g["fused"] for g in trainer.optimizer.param_groups)
    batch_of = pinned(batches.batch)
    trainer.train_step(batch_of(0))  # the first step creates the optimiser state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = trainer.train_step(batch_of(1))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert isinstance(out["loss"], torch.Tensor) and out["loss"].is_cuda  # still on the device
    assert torch.isfinite(out["loss"]).item()
    # the per-step read stays where the guard must veto on the host: a spike factor, or LAMB (no device veto)
    assert not _trainer(run, tmp_path, guard=StepGuard(spike_factor=3.0))[0].defer_reads
    assert not _trainer(run, tmp_path, optimizer="lamb")[0].defer_reads


def _pair(steps=5):
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (1000, 64)]
    a = [torch.nn.Parameter(torch.randn(*s, device="cuda")) for s in shapes]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    return a, b


def _run(a, b, oa, ob, steps=5):
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(steps):
        for pa, pb in zip(a, b):
            grad = torch.randn(pa.shape, generator=g, device="cuda")
            pa.grad, pb.grad = grad.clone(), grad.clone()
        oa.step()
        ob.step()
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pb, pa, rtol=1e-5, atol=1e-6)


def test_fused_adamw_matches_foreach_and_foreach_lamb_matches_the_loop():
    model = torch.nn.Linear(4, 4).cuda()
    assert all(g["fused"] for g in build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6).param_groups)
    a, b = _pair()
    _run(a, b, torch.optim.AdamW(a, lr=1e-2, weight_decay=0.01, foreach=True),
         torch.optim.AdamW(b, lr=1e-2, weight_decay=0.01, fused=True))
    a, b = _pair()
    _run(a, b, Lamb(a, lr=1e-2, weight_decay=0.01, foreach=False), Lamb(b, lr=1e-2, weight_decay=0.01))
