"""The unpadded path's CUDA kernel (training/models/core/varlen.py: `torch.nn.attention.varlen.varlen_attn`, the
FlashAttention varlen kernel) against the padded path, in bf16 autocast on batches of very different lengths.

The CPU tests (tests/training/test_varlen.py) cover the exact reference attention; here the kernel runs (checked:
it is called once per layer) and both paths compute in bf16, so they cannot agree to 1e-5. The tolerances are
bf16's, stated two ways: the unpadded outputs and gradients within 2 % / 5 % (relative L2) of the padded ones,
and no further from the fp32 padded result than the padded bf16 path itself is (at most 1.5x its error plus a
small floor), i.e. the kernel path loses no accuracy of its own."""

from __future__ import annotations

import pytest
import torch

from training.backends import autocast_context
from training.models.bert.model import BertConfig, BertForPreTraining, BertModel
from training.models.core.varlen import PackedSequences, _use_varlen_kernel

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("varlen_kernel_capable")]

LENGTHS = [1, 100, 17, 64, 3, 77]
VOCAB = 1000


def _config(**overrides) -> BertConfig:
    base = dict(vocab_size=VOCAB, hidden_size=128, num_layers=3, num_heads=2, intermediate_size=256,
                max_position_embeddings=128, hidden_dropout=0.0, attention_dropout=0.0)  # head_dim 64
    return BertConfig(**{**base, **overrides})


def _batch(device):
    g = torch.Generator().manual_seed(0)
    b, t = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(t)[None] < torch.tensor(LENGTHS)[:, None]).long()
    ids = torch.randint(5, VOCAB, (b, t), generator=g) * mask
    types = (torch.arange(t)[None] >= torch.tensor(LENGTHS)[:, None] // 2).long() * mask
    return ids.to(device), types.to(device), mask.to(device)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


def _run(model, ids, types, mask, readout, unpad: bool, bf16: bool, causal: bool):
    """Hidden states of every layer at the real tokens, and the gradients of a loss reading all of them."""
    model.zero_grad(set_to_none=True)
    with autocast_context(ids.device, bf16):
        last, states = model(ids, types, mask, output_hidden_states=True, causal=causal, unpad=unpad)
        real = mask.bool()
        loss = (last.float() * readout).sum(-1)[real].mean() + model.pooler(last).float().square().mean()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return [s[real].float() for s in states], grads


def test_kernel_condition_on_cuda():
    q = torch.randn(10, 2, 64, device="cuda", dtype=torch.bfloat16)
    assert _use_varlen_kernel(q, 0.0)
    assert not _use_varlen_kernel(q, 0.1)  # attention dropout in training: the reference (varlen_attn has none)
    assert not _use_varlen_kernel(q.float(), 0.0)  # fp32: the reference
    assert not _use_varlen_kernel(torch.randn(10, 2, 12, device="cuda", dtype=torch.bfloat16), 0.0)  # head_dim 12


@pytest.mark.parametrize("causal", [False, True])
def test_unpadded_kernel_path_matches_the_padded_path_in_bf16(kernel_calls, causal):
    torch.manual_seed(0)
    model = BertModel(_config()).cuda().train()  # train mode, dropout 0: the path training takes
    ids, types, mask = _batch("cuda")
    readout = torch.randn(128, device="cuda", generator=torch.Generator("cuda").manual_seed(2))

    fp32_states, fp32_grads = _run(model, ids, types, mask, readout, unpad=False, bf16=False, causal=causal)
    padded_states, padded_grads = _run(model, ids, types, mask, readout, unpad=False, bf16=True, causal=causal)
    assert not kernel_calls
    unpadded_states, unpadded_grads = _run(model, ids, types, mask, readout, unpad=True, bf16=True, causal=causal)
    assert kernel_calls == [(-1, 0) if causal else (-1, -1)] * 3  # the kernel, once per layer, with its window

    assert len(unpadded_states) == len(padded_states) == 4
    for layer, (u, p, f) in enumerate(zip(unpadded_states, padded_states, fp32_states)):
        assert _relative(u, p) < 2e-2, (layer, _relative(u, p))
        assert _relative(u, f) <= 1.5 * _relative(p, f) + 2e-3, (layer, _relative(u, f), _relative(p, f))
    assert torch.isfinite(unpadded_grads).all()
    assert _relative(unpadded_grads, padded_grads) < 5e-2, _relative(unpadded_grads, padded_grads)
    assert _relative(unpadded_grads, fp32_grads) <= 1.5 * _relative(padded_grads, fp32_grads) + 5e-3, (
        _relative(unpadded_grads, fp32_grads), _relative(padded_grads, fp32_grads))


def test_pretraining_loss_unpadded_on_the_kernel_equals_padded_within_bf16(kernel_calls):
    torch.manual_seed(0)
    model = BertForPreTraining(_config()).cuda().train()
    ids, types, mask = _batch("cuda")
    g = torch.Generator().manual_seed(3)
    positions = torch.zeros(len(LENGTHS), 8, dtype=torch.long)
    labels = torch.full((len(LENGTHS), 8), -100)
    for row, length in enumerate(LENGTHS):
        n = min(8, length - 1)  # [CLS] is never masked; a 1-token row has no prediction
        if n > 0:
            positions[row, :n] = 1 + torch.randperm(length - 1, generator=g)[:n]
            labels[row, :n] = torch.randint(5, VOCAB, (n,), generator=g)
    nsp = torch.tensor([0, 1, 1, 0, 1, 0])
    args = (ids, types, mask, positions.cuda(), labels.cuda(), nsp.cuda())
    with autocast_context(ids.device, bf16=True):
        padded = model(*args)
        unpadded = model(*args, unpad=True)
    assert len(kernel_calls) == 3
    assert padded["mlm_count"] == unpadded["mlm_count"] == int((labels != -100).sum())
    for key in ("loss", "mlm_loss", "nsp_loss"):
        assert torch.isfinite(unpadded[key])
        assert unpadded[key].item() == pytest.approx(padded[key].item(), rel=1e-2), key
    layout = PackedSequences.from_attention_mask(mask)
    assert layout.num_tokens == sum(LENGTHS) and layout.max_seqlen == max(LENGTHS)
