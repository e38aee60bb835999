"""The MLM decoder and its cross-entropy in one pass over row chunks, never holding the [N, V] logits
(`pretrain.fused_mlm_loss`; BertForPreTraining's forward, so BERT's family and ModernBERT).

The unfused head writes the logits of all N masked tokens ([N, V]: 39 MB at the demo's 1,216 x 8,000), then
log-softmax writes a second [N, V], the loss's backward a zero-filled third, log-softmax's backward a fourth: on a CPU
those passes over memory cost about as much as the decoder's three matrix products (measured on the demo's step:
88 ms unfused vs 52 ms fused for the decoder and loss, forward and backward; benchmarks/RESULTS.md, "Fused MLM
loss"). Here each chunk of rows is computed while it is in cache: logits = x W^T + b, the row's log-sum-exp, the
loss and the correct count, then the logits turned in place into the gradient (softmax - one-hot) / count, and that
multiplied into the gradients of x, W and b at once. The backward only scales them by the incoming gradient.

    loss, correct, count = fused_linear_cross_entropy(x, weight, bias, labels, ignore_index=-100)

Equal to `F.cross_entropy(F.linear(x, weight, bias), labels, ignore_index)` (the mean over the labelled rows; 0
when none) and its gradients up to float rounding (tests/training/test_fused_loss.py). The arithmetic runs in float32
with autocast off. The gradients are computed during forward, so call it only when they will be used (training);
evaluation takes the logits path, which also returns the logits.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 128  # a [128, V] float32 chunk stays in a core's L2 for vocabularies up to ~8k (measured: 128 ~ 256 > all)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, labels, ignore_index: int, chunk_rows: int):
        with torch.autocast(device_type=x.device.type, enabled=False):
            xf, wf = x.float(), weight.float()
            bf = bias.float() if bias is not None else None
            real = labels != ignore_index
            count = real.sum()
            scale = 1.0 / count.clamp(min=1).to(torch.float32)
            total = xf.new_zeros(())
            correct = torch.zeros((), dtype=torch.long, device=x.device)
            grad_x = torch.empty_like(xf)
            grad_w = torch.zeros_like(wf)
            grad_b = torch.zeros_like(bf) if bf is not None else None
            for start in range(0, xf.shape[0], chunk_rows):
                rows = slice(start, start + chunk_rows)
                xc, yc, keep = xf[rows], labels[rows], real[rows]
                logits = torch.addmm(bf, xc, wf.t()) if bf is not None else xc @ wf.t()
                target = yc.clamp(min=0)[:, None]  # ignored rows read column 0 and are masked below
                correct += ((logits.argmax(-1) == yc) & keep).sum()
                lse = torch.logsumexp(logits, -1)
                total += ((lse - logits.gather(1, target)[:, 0]) * keep).sum()
                # d loss / d logits = (softmax - one_hot) / count on labelled rows, 0 on ignored ones
                logits.sub_(lse[:, None]).exp_()
                logits.scatter_add_(1, target, -torch.ones_like(lse)[:, None])
                logits.mul_((keep.to(logits.dtype) * scale)[:, None])
                torch.mm(logits, wf, out=grad_x[rows])
                grad_w.addmm_(logits.t(), xc)
                if grad_b is not None:
                    grad_b += logits.sum(0)
        ctx.save_for_backward(grad_x, grad_w, grad_b if grad_b is not None else grad_w.new_empty(0))
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(correct, count)
        return total * scale, correct, count

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct, _grad_count):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        dx, dw, db = ctx.dtypes
        return ((grad_x * grad_loss).to(dx), (grad_w * grad_loss).to(dw),
                (grad_b * grad_loss).to(db) if ctx.has_bias else None, None, None, None)


def fused_linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                               labels: torch.Tensor, ignore_index: int = -100,
                               chunk_rows: int = CHUNK_ROWS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [N, E], weight [V, E], bias [V] or None, labels [N] (`ignore_index` = no target) -> (mean cross-entropy over
    the labelled rows (0 when none), rows whose argmax is their label, labelled rows); see the module docstring."""
    if x.dim() != 2 or labels.shape != x.shape[:1]:
        raise ValueError(f"x must be [N, E] with labels [N]; got {tuple(x.shape)} and {tuple(labels.shape)}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    return _FusedLinearCrossEntropy.apply(x, weight, bias, labels, ignore_index, chunk_rows)
