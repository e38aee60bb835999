"""Multi-head self-attention through `torch.nn.functional.scaled_dot_product_attention`, with a padding mask.

`SelfAttention` projects to queries/keys/values and attends; `ResidualOutput` is the BERT "output" block
(dense -> dropout -> add residual -> LayerNorm) shared by the attention and feed-forward sub-layers.
Names (`self.query`, `output.dense`, `output.LayerNorm`) mirror the original BERT layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .varlen import PackedSequences, varlen_attention


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] with 1 = real token, 0 = padding -> boolean [B, 1, 1, T], True where a key may be attended to.

    Padded *queries* still attend to the real keys (every row has at least [CLS]), so no row is all -inf and
    SDPA never produces NaN; their outputs are simply ignored downstream."""
    return attention_mask.to(torch.bool)[:, None, None, :]


class SelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, dropout: float):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = dropout
        # opt-in (distillation/): when a list, every padded forward also appends its PRE-softmax
        # scores q.k/sqrt(d) [B, heads, T, T] (no mask applied) and attends through an explicit softmax instead of
        # SDPA — same outputs, slower; None (the default) keeps the fused SDPA path untouched
        self.score_sink: list[torch.Tensor] | None = None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | PackedSequences) -> torch.Tensor:
        """hidden [B, T, H], mask from `padding_mask` -> context [B, T, H] (before the output projection); or,
        unpadded (varlen.py), hidden [N, H] of the real tokens with their PackedSequences -> context [N, H]."""
        if isinstance(mask, PackedSequences):
            q, k, v = (proj(hidden).view(-1, self.num_heads, self.head_dim) for proj in (self.query, self.key, self.value))
            context = varlen_attention(q, k, v, mask, self.dropout if self.training else 0.0)
            return context.reshape(-1, self.num_heads * self.head_dim)
        q, k, v = self._heads(self.query(hidden)), self._heads(self.key(hidden)), self._heads(self.value(hidden))
        if self.score_sink is not None:
            context = self._attend_recording(q, k, v, mask)
        else:
            context = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
            )
        b, _, t, _ = context.shape
        return context.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)

    def _attend_recording(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """SDPA written out, appending the pre-softmax scores to `score_sink` (what TinyBERT distills)."""
        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        self.score_sink.append(scores)
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1) if mask is not None else scores.softmax(-1)
        probs = F.dropout(probs, self.dropout, self.training)
        return probs @ v


class ResidualOutput(nn.Module):
    """dense(in -> hidden) -> dropout -> + residual -> LayerNorm (post-LN, as in BERT). `bias` False: a projection
    without bias (XLNet's and Transformer-XL's attention output `o`)."""

    def __init__(self, in_size: int, hidden_size: int, dropout: float, layer_norm_eps: float, bias: bool = True):
        super().__init__()
        self.dense = nn.Linear(in_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class AttentionBlock(nn.Module):
    """Self-attention sub-layer: attention, output projection, residual, LayerNorm."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float, hidden_dropout: float,
                 layer_norm_eps: float):
        super().__init__()
        self.self = SelfAttention(hidden_size, num_heads, attention_dropout)
        self.output = ResidualOutput(hidden_size, hidden_size, hidden_dropout, layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, mask), hidden)
