"""Multi-head self-attention through `torch.nn.functional.scaled_dot_product_attention`, with a padding mask.

`SelfAttention` projects to queries/keys/values and attends; `ResidualOutput` is the BERT "output" block
(dense -> dropout -> add residual -> LayerNorm) shared by the attention and feed-forward sub-layers.
Names (`self.query`, `output.dense`, `output.LayerNorm`) mirror the original BERT layout.

Options of the ModernBERT-class member (training/models/modernbert/model.py), all off by default (BERT): projections and
norms without bias, rotary position embeddings applied to queries and keys (`rotary`, rotary.py), and
pre-normalisation (`pre_norm`: the block normalises its input, `input_norm`, and adds its output to the residual
without a norm after it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .rotary import apply_rotary
from .varlen import PackedSequences, varlen_attention


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, T] with 1 = real token, 0 = padding -> boolean [B, 1, 1, T], True where a key may be attended to.

    Padded *queries* still attend to the real keys (every row has at least [CLS]), so no row is all -inf and
    SDPA never produces NaN; their outputs are simply ignored downstream."""
    return attention_mask.to(torch.bool)[:, None, None, :]


class SelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, dropout: float, bias: bool = True):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.query = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.key = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.value = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = dropout
        # opt-in (distillation/): when a list, every padded forward also appends its PRE-softmax
        # scores q.k/sqrt(d) [B, heads, T, T] (no mask applied) and attends through an explicit softmax instead of
        # SDPA — same outputs, slower; None (the default) keeps the fused SDPA path untouched
        self.score_sink: list[torch.Tensor] | None = None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | PackedSequences,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """hidden [B, T, H], mask from `padding_mask` -> context [B, T, H] (before the output projection); or,
        unpadded (varlen.py), hidden [N, H] of the real tokens with their PackedSequences -> context [N, H].
        `rotary`: (cos, sin) rotating queries and keys (rotary.py), shaped to broadcast against them: [B or 1, 1,
        T, head_dim] padded, [N, 1, head_dim] unpadded; None = no rotation (absolute positions are in the input)."""
        if isinstance(mask, PackedSequences):
            q, k, v = (proj(hidden).view(-1, self.num_heads, self.head_dim) for proj in (self.query, self.key, self.value))
            if rotary is not None:
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
            context = varlen_attention(q, k, v, mask, self.dropout if self.training else 0.0)
            return context.reshape(-1, self.num_heads * self.head_dim)
        q, k, v = self._heads(self.query(hidden)), self._heads(self.key(hidden)), self._heads(self.value(hidden))
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
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
    without bias (XLNet's and Transformer-XL's attention output `o`). `norm` False: no LayerNorm after the sum
    (pre-LN layers, whose blocks normalise their input instead); `norm_bias` False: a LayerNorm without bias."""

    def __init__(self, in_size: int, hidden_size: int, dropout: float, layer_norm_eps: float, bias: bool = True,
                 norm: bool = True, norm_bias: bool = True):
        super().__init__()
        self.dense = nn.Linear(in_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps, bias=norm_bias) if norm else None

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if self.LayerNorm is None:
            return residual + self.dropout(self.dense(x))
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class AttentionBlock(nn.Module):
    """Self-attention sub-layer: attention, output projection, residual, LayerNorm (post-LN). `pre_norm`: the
    LayerNorm normalises the block's input (`input_norm`; none with `input_norm` False, for a first layer whose
    input the embedding norm has just normalised) and the sum has none; `bias` False: projections and norms
    without bias."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float, hidden_dropout: float,
                 layer_norm_eps: float, bias: bool = True, pre_norm: bool = False, input_norm: bool = True):
        super().__init__()
        self.self = SelfAttention(hidden_size, num_heads, attention_dropout, bias=bias)
        self.output = ResidualOutput(hidden_size, hidden_size, hidden_dropout, layer_norm_eps, bias=bias,
                                     norm=not pre_norm, norm_bias=bias)
        self.input_norm = (nn.LayerNorm(hidden_size, eps=layer_norm_eps, bias=bias)
                           if pre_norm and input_norm else None)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor,
                rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        attended = self.input_norm(hidden) if self.input_norm is not None else hidden
        return self.output(self.self(attended, mask, rotary), hidden)
