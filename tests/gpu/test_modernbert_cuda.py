"""ModernBERT's unpadded path on CUDA (training/models/modernbert/model.py): the global layers and the sliding-window local
layers both reach the FlashAttention varlen kernel (`varlen_attn`, with window_size (-1, -1) and (w, w)), and the
result equals the padded path, whose local layers attend under sliding_window_band's boolean mask.

The windows are made to matter: local_attention 16 (8 columns on either side) on sequences of up to 100 tokens, so
a kernel that ignored the window, or counted it differently from the padded mask, would differ far beyond bf16's
rounding. Tolerances are tests/gpu/test_varlen_cuda.py's (bf16 on both paths): the unpadded outputs and gradients
within 2 % / 5 % (relative L2) of the padded ones, and no further from the fp32 padded result than the padded bf16
path itself is (1.5x its error plus a small floor). The fixed layout (pretrain.unpad_layout fixed: every slot a
row, each row's padding a sequence of its own, empty for the full row of 100 tokens) gives the packed layout's
states and gradients on the kernel within the same bounds. The CPU tests (tests/training/test_modernbert.py,
test_varlen.py) cover the exact reference attention with the window and the fixed layout.""" 

from __future__ import annotations

import dataclasses

import pytest
import torch

from training.backends import autocast_context
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM
from training.models.core.varlen import PackedSequences, _use_varlen_kernel, reference_attention, varlen_attention

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("varlen_kernel_capable")]

LENGTHS = [1, 100, 17, 64, 3, 77]
VOCAB = 1000
WINDOW = 8  # local_attention 16: 8 columns on either side


def _model() -> ModernBertForMaskedLM:
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=VOCAB, hidden_size=128, num_layers=3, num_heads=2, intermediate_size=256,
                              max_position_embeddings=128, global_attn_every_n_layers=3,
                              local_attention=2 * WINDOW)  # head_dim 64; layer 0 global, layers 1-2 local
    return ModernBertForMaskedLM(config).cuda().train()  # train mode, dropout 0: the path training takes


def _batch():
    g = torch.Generator().manual_seed(0)
    b, t = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(t)[None] < torch.tensor(LENGTHS)[:, None]).long()
    ids = torch.randint(5, VOCAB, (b, t), generator=g) * mask
    return ids.cuda(), mask.cuda()


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


def _run(model, ids, mask, readout, unpad: bool, bf16: bool):
    """Hidden states of every layer at the real tokens, and the gradients of a loss reading all of them."""
    model.zero_grad(set_to_none=True)
    with autocast_context(ids.device, bf16):
        last, states = model.bert(ids, None, mask, output_hidden_states=True, unpad=unpad)
        real = mask.bool()
        loss = (last.float() * readout).sum(-1)[real].mean()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.bert.parameters() if p.grad is not None])
    return [s[real].float() for s in states], grads


def test_sliding_window_layers_run_on_the_kernel_and_match_the_padded_band_mask(kernel_calls):
    model = _model()
    ids, mask = _batch()
    readout = torch.randn(128, device="cuda", generator=torch.Generator("cuda").manual_seed(2))

    fp32_states, fp32_grads = _run(model, ids, mask, readout, unpad=False, bf16=False)
    padded_states, padded_grads = _run(model, ids, mask, readout, unpad=False, bf16=True)
    assert not kernel_calls
    unpadded_states, unpadded_grads = _run(model, ids, mask, readout, unpad=True, bf16=True)
    assert kernel_calls == [(-1, -1), (WINDOW, WINDOW), (WINDOW, WINDOW)]  # global, local, local

    assert len(unpadded_states) == len(padded_states) == 4
    for layer, (u, p, f) in enumerate(zip(unpadded_states, padded_states, fp32_states)):
        assert _relative(u, p) < 2e-2, (layer, _relative(u, p))
        assert _relative(u, f) <= 1.5 * _relative(p, f) + 2e-3, (layer, _relative(u, f), _relative(p, f))
    assert torch.isfinite(unpadded_grads).all()
    assert _relative(unpadded_grads, padded_grads) < 5e-2, _relative(unpadded_grads, padded_grads)
    assert _relative(unpadded_grads, fp32_grads) <= 1.5 * _relative(padded_grads, fp32_grads) + 5e-3, (
        _relative(unpadded_grads, fp32_grads), _relative(padded_grads, fp32_grads))


def test_kernel_window_equals_the_band_masked_reference():
    """The kernel's window_size against the reference attention under the same window (sliding_window_band), on
    random bf16 q/k/v where the window matters: attending globally instead moves the result by ~87 % (so a kernel
    ignoring the window, or counting it in other units, fails here by far more than bf16's rounding)."""
    t = max(LENGTHS)
    mask = (torch.arange(t)[None] < torch.tensor(LENGTHS)[:, None]).long().cuda()
    layout = PackedSequences.from_attention_mask(mask)
    windowed = dataclasses.replace(layout, window=WINDOW)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(layout.num_tokens, 2, 64, generator=g).cuda() for _ in range(3))
    bf16 = [x.bfloat16() for x in (q, k, v)]
    assert _use_varlen_kernel(bf16[0], 0.0)
    kernel = varlen_attention(*bf16, windowed, 0.0).float()
    reference = reference_attention(q, k, v, windowed, 0.0)
    unbounded = reference_attention(q, k, v, layout, 0.0)
    assert _relative(kernel, reference) < 2e-2, _relative(kernel, reference)
    assert _relative(unbounded, reference) > 0.5


def test_masked_lm_loss_unpadded_on_the_kernel_equals_padded_within_bf16(kernel_calls):
    model = _model()
    ids, mask = _batch()
    g = torch.Generator().manual_seed(3)
    positions = torch.zeros(len(LENGTHS), 8, dtype=torch.long)
    labels = torch.full((len(LENGTHS), 8), -100)
    for row, length in enumerate(LENGTHS):
        n = min(8, length - 1)
        if n > 0:
            positions[row, :n] = 1 + torch.randperm(length - 1, generator=g)[:n]
            labels[row, :n] = torch.randint(5, VOCAB, (n,), generator=g)
    args = (ids, torch.zeros_like(ids), mask, positions.cuda(), labels.cuda())
    with autocast_context(ids.device, bf16=True):
        padded = model(*args)
        unpadded = model(*args, unpad=True)
    assert len(kernel_calls) == 3
    assert padded["mlm_count"] == unpadded["mlm_count"] == int((labels != -100).sum())
    assert torch.isfinite(unpadded["loss"])
    assert unpadded["loss"].item() == pytest.approx(padded["loss"].item(), rel=1e-2)


def test_the_fixed_layout_on_the_kernel_equals_the_packed_one(kernel_calls):
    """Every slot through the kernel, each row's padding a sequence of its own (cu_seqlens of 2B + 1 entries, one
    of them an empty sequence: the full row of 100 tokens) and max_seqlen the batch width: the real tokens' states
    and the gradients of the packed layout, within bf16's rounding; padding rows finite."""
    model = _model()
    ids, mask = _batch()
    readout = torch.randn(128, device="cuda", generator=torch.Generator("cuda").manual_seed(2))
    real = mask.bool()
    results = {}
    for layout in ("packed", "fixed"):
        model.zero_grad(set_to_none=True)
        with autocast_context(ids.device, True):
            states, packed = model.bert(ids, None, mask, unpad=layout)
            last = packed.unpack(states[-1])
            loss = (last.float() * readout).sum(-1)[real].mean()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.bert.parameters() if p.grad is not None])
        results[layout] = ([packed.unpack(s)[real].float() for s in states], grads, states)
    assert kernel_calls == [(-1, -1), (WINDOW, WINDOW), (WINDOW, WINDOW)] * 2
    (packed_states, packed_grads, _), (fixed_states, fixed_grads, raw) = results["packed"], results["fixed"]
    assert raw[-1].shape[0] == ids.numel() and all(torch.isfinite(s).all() for s in raw)
    for layer, (f, p) in enumerate(zip(fixed_states, packed_states)):
        assert _relative(f, p) < 2e-2, (layer, _relative(f, p))
    assert torch.isfinite(fixed_grads).all()
    assert _relative(fixed_grads, packed_grads) < 5e-2, _relative(fixed_grads, packed_grads)
