"""benchmarks/pretrain_step.py: the "ours-fused" implementation really trains through the fused MLM loss (and
"ours" does not), and the printed comparison gives each of ours its own ratio to HF."""

from __future__ import annotations

import types

import pytest


@pytest.fixture()
def pretrain_step(load_benchmark):
    return load_benchmark("pretrain_step")


@pytest.mark.parametrize("impl, fused_calls", [("ours", 0), ("ours-fused", 3)])
def test_worker_uses_the_fused_loss_only_for_ours_fused(pretrain_step, monkeypatch, impl, fused_calls):
    import training.models.bert.model as bert_model

    calls = []
    real = bert_model.fused_linear_cross_entropy

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(bert_model, "fused_linear_cross_entropy", counting)
    out = pretrain_step._worker(impl, "tiny", steps=2, warmup=1)
    assert out["impl"] == impl and out["tokens_per_s"] > 0
    assert len(calls) == fused_calls  # one per training step, warm-up included


def test_comparison_prints_a_ratio_per_variant_of_ours(pretrain_step, capsys):
    runs = {impl: [{"tokens_per_s": tps, "peak_extra_mib": mib}]
            for impl, tps, mib in (("ours", 200.0, 50.0), ("ours-fused", 300.0, 40.0), ("hf", 100.0, 80.0))}
    median = {impl: r[0]["tokens_per_s"] for impl, r in runs.items()}
    memory = {impl: r[0]["peak_extra_mib"] for impl, r in runs.items()}
    d = types.SimpleNamespace(train_flops_per_token=1e6, dense_head_train_flops_per_token=2e6)
    pretrain_step.print_comparison(runs, median, memory, d, hidden=128, gemm=100.0)
    printed = capsys.readouterr().out
    assert "ratio ours / HF: 2.00x tokens/s, 0.62x peak extra memory" in printed
    assert "ratio ours-fused / HF: 3.00x tokens/s, 0.50x peak extra memory" in printed
    assert "ratio hf" not in printed
