"""The GPU step on CUDA (issue 31): pretrain.compile with pretrain.static_shapes trains to the eager loss curve in
bf16 and compiles nothing after the first step (ModernBERT unpadded, its recipe's step: nothing after the first
change of the packed token count); the trainer's step reads nothing back from the device (deferred
reads with fused AdamW: checked with torch.cuda.set_sync_debug_mode("error"), which raises on any synchronising
call); fused AdamW matches the foreach kernels and the foreach LAMB matches its loop; pretrain.compile_mode
reduce-overhead (CUDA graphs) keeps the values the trainer reads later: with 1 and 2 micro-batches a step, 30 steps
whose losses are read every 10 steps (deferred reads, the values kept across 10 replays) give the averages of the
same run read after every step, and follow the default mode's curve; the graphs are recorded once and replayed
(torch.cuda.CUDAGraph captures / replays counted) and nothing is compiled after step 1; the unpadded step in the
fixed layout (pretrain.unpad_layout fixed) reads nothing back either, where the packed layout does, and runs
ModernBERT under CUDA graphs on the eager packed curve. Not yet run on a GPU when written (no device was lent):
its first `make test-gpu` is its first check.

Tolerances: eager and compiled both run under bf16 autocast, where inductor's fusions round differently (bf16 keeps
8 significant bits, tests/gpu/test_bf16.py): every logged loss of the compiled run within 2 % of the eager run's.
Fused vs foreach AdamW and foreach vs loop LAMB: fp32 rounding, 1e-5 relative on the parameters after 5 steps.
CUDA graphs: the windows of 10 steps within 0.5 % of the per-step reads' average (the same computation, but GPU
kernels are not bitwise repeatable: atomic adds in the embedding backward), the default mode within 2 % as above,
mlm_acc within 0.05."""

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


@pytest.mark.parametrize("compiled_settings", [
    # configs/modernbert-base.yaml's GPU step: compile + static_shapes + unpad (the varlen kernel, the local layers'
    # window in it) on rows of varied length; the packed token count changes: one recompilation with it symbolic
    {"compile": True},
    # pretrain.unpad_layout fixed: nothing read on the host and shapes of [B, T] alone, so the unpadded step runs
    # under CUDA graphs (reduce-overhead); at most one recompile (a new batch width)
    {"compile": True, "unpad_layout": "fixed", "compile_mode": "reduce-overhead"},
], ids=["packed", "fixed-cuda-graphs"])
def test_compiled_unpadded_modernbert_on_cuda_follows_the_eager_curve(run_factory, compiled_settings):
    from training.models.modernbert.model import ModernBertSettings

    model_cfg = ModelConfig(hidden_size=64, num_layers=3, num_heads=2, intermediate_size=96, max_position_embeddings=32,
                            type_vocab_size=1, hidden_dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5,
                            modernbert=ModernBertSettings(global_attn_every_n_layers=3, local_attention=8))
    runs = {name: run_factory(name, max_seq_len=24, min_seq_len=10, train_rows=128, heldout_rows=8)
            for name in ("eager-unpad", "compiled-unpad")}
    cfg = PretrainConfig(objective="modernbert_mlm", batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3,
                         log_every=2, save_every=4, seed=5, static_shapes=True, unpad=True, device="cuda")
    pretrain(model_cfg, cfg, runs["eager-unpad"])  # the packed layout, eager: the reference curve
    pretrain(model_cfg, cfg.model_copy(update=compiled_settings), runs["compiled-unpad"])
    eager, compiled = _metrics(runs["eager-unpad"]), _metrics(runs["compiled-unpad"])
    assert [m["step"] for m in compiled] == [m["step"] for m in eager] == [2, 4, 6, 8]
    for e, c in zip(eager, compiled):
        assert c["tokens"] == e["tokens"] and c["skipped_steps"] == 0
        for key in ("loss", "mlm_loss"):
            assert c[key] == pytest.approx(e[key], rel=2e-2), (key, e, c)
    counts = [m["compiled_graphs"] for m in compiled]
    assert counts[1:] == [counts[1]] * (len(counts) - 1), counts  # nothing compiled after the first shape change
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
    # the unpadded step in the fixed layout reads nothing either; the packed layout's packing does (nonzero)
    ragged = run_factory("sync-ragged", max_seq_len=24, min_seq_len=10)
    for layout in ("fixed", "packed"):
        trainer, batches = _trainer(ragged, tmp_path)
        trainer.module.unpad_by_default, trainer.module.unpad_layout = True, layout
        batch_of = pinned(batches.batch)
        trainer.train_step(batch_of(0))
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            if layout == "fixed":
                out = trainer.train_step(batch_of(1))
            else:
                with pytest.raises(RuntimeError, match="synchroniz"):
                    trainer.train_step(batch_of(1))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out["loss"]).item()  # the fixed layout's step, read after the check
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


def _counting_cuda_graphs(monkeypatch) -> dict[str, int]:
    """Captures and replays of torch.cuda.CUDAGraph, which inductor's CUDA graph trees record and replay."""
    counts = {"captures": 0, "replays": 0}
    real_capture, real_replay = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay

    def capture_begin(self, *args, **kwargs):
        counts["captures"] += 1
        return real_capture(self, *args, **kwargs)

    def replay(self, *args, **kwargs):
        counts["replays"] += 1
        return real_replay(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", capture_begin)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", replay)
    return counts


@pytest.mark.parametrize("accumulation", [1, 2], ids=["one-batch", "two-micro-batches"])
def test_cuda_graphs_keep_the_values_the_trainer_reads_later(run_factory, monkeypatch, accumulation):
    runs = {name: run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=256, heldout_rows=8)
            for name in ("default", "graphs", "each")}
    cfg = PretrainConfig(batch_size=16, grad_accumulation=accumulation, max_steps=30, warmup_steps=2,
                         learning_rate=2e-3, log_every=10, save_every=15, seed=5, static_shapes=True, device="cuda",
                         compile=True)
    graphs = cfg.model_copy(update={"compile_mode": "reduce-overhead"})
    pretrain(TINY, cfg, runs["default"])
    torch.compiler.reset()
    with monkeypatch.context() as patch:
        counts = _counting_cuda_graphs(patch)
        pretrain(TINY, graphs, runs["graphs"])  # deferred reads (fused AdamW): 10 steps' values kept on the device
    torch.compiler.reset()
    pretrain(TINY, graphs.model_copy(update={"log_every": 1}), runs["each"])  # each step's values read at once
    torch.compiler.reset()

    default, kept, each = (_metrics(runs[name]) for name in ("default", "graphs", "each"))
    assert [m["step"] for m in kept] == [m["step"] for m in default] == [10, 20, 30]
    assert [m["step"] for m in each] == list(range(1, 31))
    # graphs really ran: recorded a few times, not per step (the forward, the backward, and the empty capture that
    # keeps the tree's memory pool), then replayed: forward and backward in every micro-step after the first steps
    assert 2 <= counts["captures"] <= 8 and counts["replays"] >= 2 * accumulation * 25, counts
    for line in kept:  # a window read after 10 replays = the same steps read one by one
        window = [m for m in each if line["step"] - 10 < m["step"] <= line["step"]]
        assert line["tokens"] == window[-1]["tokens"] and line["skipped_steps"] == 0
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert line[key] == pytest.approx(sum(m[key] for m in window) / len(window), rel=5e-3), (key, line)
    for d, g in zip(default, kept):  # and the default mode's curve, within bf16 rounding
        assert g["tokens"] == d["tokens"] and g["lr"] == d["lr"]
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert g[key] == pytest.approx(d[key], rel=2e-2), (key, d, g)
        assert g["mlm_acc"] == pytest.approx(d["mlm_acc"], abs=0.05)
    assert default[-1]["loss"] < default[0]["loss"]
    graph_counts = [m["compiled_graphs"] for m in kept]
    assert graph_counts == [graph_counts[0]] * len(graph_counts), graph_counts  # no recompiles after step 1
