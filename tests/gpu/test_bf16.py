"""bf16 autocast on CUDA (training/backends.py): the context the trainer runs its forward in really computes in
bfloat16, a training step's loss and gradients stay close to fp32, and the pretrain stage with `pretrain.bf16`
follows the fp32 loss curve and learns.

Tolerances (bf16 keeps 8 significant bits: 2^-9 ≈ 2e-3 relative rounding per operation; matmuls accumulate in
fp32, softmax, LayerNorm and the loss run in fp32 under autocast): the loss within 2 % of fp32 and the whole
gradient within 5 % in L2 for this 2-layer model, and the stage's logged losses (each a mean over a batch)
within 5 % of the fp32 run's at every point of 60 steps."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from bertfactory.io import sha256_file
from training.backends import autocast_context, resolve_device
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.models.bert.model import BertConfig, BertForPreTraining
from training.pretrain import pretrain

pytestmark = pytest.mark.cuda

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions", "masked_labels", "nsp_labels")
NO_DROPOUT = dict(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256, max_position_embeddings=64,
                  hidden_dropout=0.0, attention_dropout=0.0)


def _relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    a = torch.cat([g.float().flatten() for g in got])
    b = torch.cat([w.float().flatten() for w in want])
    return float((a - b).norm() / b.norm())


def test_autocast_context_computes_in_bf16_and_a_step_stays_close_to_fp32(run_factory):
    device = resolve_device("cuda")
    assert torch.cuda.is_bf16_supported(), "bf16 needs compute capability >= 8.0"
    run = run_factory("bf16", min_seq_len=24, max_seq_len=60)  # real shards: padding, masks and NSP labels
    batches = PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 32, seed=0)
    batch = {k: v.to(device) for k, v in batches.batch(0).items() if k in MODEL_INPUTS}
    torch.manual_seed(0)
    vocab = json.loads((run / "shards" / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    model = BertForPreTraining(BertConfig(vocab_size=vocab, **NO_DROPOUT)).to(device).train()
    fp32 = copy.deepcopy(model)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, fp32)]

    for step in range(3):
        with autocast_context(device, bf16=True):
            assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16
            out = model(**batch)
        ref = fp32(**batch)
        assert out["mlm_logits"].dtype == torch.bfloat16 and ref["mlm_logits"].dtype == torch.float32
        loss, ref_loss = out["loss"], ref["loss"]
        assert math.isfinite(loss.item())
        assert loss.item() == pytest.approx(ref_loss.item(), rel=2e-2), (step, loss.item(), ref_loss.item())
        loss.backward()
        ref_loss.backward()
        grads = [p.grad for p in model.parameters()]
        assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)  # fp32 master weights
        error = _relative_error(grads, [p.grad for p in fp32.parameters()])
        assert error < 5e-2, (step, error)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    # with bf16 off (or on the CPU) the same context is a no-op: fp32 compute
    with autocast_context(device, bf16=False):
        assert not torch.is_autocast_enabled("cuda")


def test_pretrain_stage_in_bf16_follows_the_fp32_curve_and_learns(run_factory):
    model_cfg = ModelConfig(**NO_DROPOUT)
    curves, summaries = {}, {}
    for bf16 in (False, True):
        run = run_factory(f"stage-bf16-{bf16}", min_seq_len=24, max_seq_len=60)
        cfg = PretrainConfig(device="cuda", bf16=bf16, batch_size=32, max_steps=60, warmup_steps=5,
                             learning_rate=4e-3, log_every=10, save_every=100, seed=3)
        summaries[bf16] = pretrain(model_cfg, cfg, run)
        curves[bf16] = [json.loads(line)["loss"]
                        for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert summaries[True]["device"].startswith("cuda") and summaries[True]["world_size"] == 1
    assert len(curves[True]) == len(curves[False]) == 6
    assert all(math.isfinite(x) for x in curves[True])
    assert curves[True] == pytest.approx(curves[False], rel=5e-2), curves
    assert curves[True][-1] < 0.95 * curves[True][0], curves[True]  # it learned, in bf16 (fp32 on the CPU: -11 %)
