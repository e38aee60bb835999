"""SpanBERT's span boundary objective (SBO, Joshi et al. 2020, section 3.2): predict every token of a masked span
from the encoder outputs at the two tokens just outside the span and a relative position inside it:

    h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]          span s..e, masked token i, p: learned relative position embeddings
    h1 = LayerNorm(GeLU(W1 h0))
    y_i = LayerNorm(GeLU(W2 h1))                -> tied decoder (the word embeddings) + own bias -> logits

Spans come from the shards: with the `span` masking policy a shard stores every masked span's bounds (column
mask_spans, docs/shards.md), which collate() turns into span_left / span_right per prediction slot
(`stored_span_boundaries`) - two spans that touch stay two spans, each with its own boundary tokens (one of
them a masked token of the other span, whose encoder output the SBO then reads). Shards without the column (other
policies, or span shards written before it) fall back to `span_boundaries`: the masked positions of a row are
sorted (shard contract), and the maximal runs of consecutive masked positions are taken as the spans. That
recovers the `span` policy's spans because it never lets two spans touch (preprocessing/masking_policies.py); with other
policies (token, ngram) masked neighbours form one run and are predicted as one span, as SpanBERT's own code does
when it merges touching spans (merge_intervals): every run is still bounded by two unmasked tokens. As in
SpanBERT's released code (max_pair_targets 15), only the first `max_span_tokens` tokens of a span get an SBO
target; the rest still get the MLM loss.

    boundaries = stored_span_boundaries(masked_positions, span_left, span_right)   # from the shards, or
    boundaries = span_boundaries(masked_positions, masked_labels)                  # reconstructed: [B, P] each
    left, right, relative, labels = gather_span_boundaries(hidden, masked_positions, masked_labels,
                                                           attention_mask, max_span_tokens=15, bounds=boundaries)
    logits = head(left, right, relative, word_embeddings)                  # [N, V]
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100  # the same value as bert.IGNORE_INDEX (not imported: bert.py may import this module)


class SpanBoundaries(NamedTuple):
    """Per prediction slot [B, P]: the position before the slot's span, the position after it, and the slot's
    0-based offset inside the span (i - s). Values at padding slots are meaningless."""

    left: torch.Tensor
    right: torch.Tensor
    relative: torch.Tensor


def span_boundaries(masked_positions: torch.Tensor, masked_labels: torch.Tensor) -> SpanBoundaries:
    """Spans = maximal runs of consecutive positions among the real slots (labels != -100) of each row, whose
    positions must be sorted ascending with the real slots first (as collate() lays them out)."""
    b, p = masked_positions.shape
    real = masked_labels != IGNORE_INDEX
    slots = torch.arange(p, device=masked_positions.device).expand(b, p)
    follows = torch.zeros_like(real)  # slot j continues the run of slot j-1
    follows[:, 1:] = real[:, 1:] & real[:, :-1] & (masked_positions[:, 1:] == masked_positions[:, :-1] + 1)
    precedes = torch.zeros_like(real)  # slot j+1 continues the run of slot j
    precedes[:, :-1] = follows[:, 1:]
    # first slot of each slot's run: the latest run start at or before it; last slot: the earliest run end at or
    # after it (a cumulative max over the reversed row)
    start_slot = torch.where(follows, 0, slots).cummax(dim=1).values
    end_slot = (p - 1) - torch.where(precedes, 0, (p - 1) - slots).flip(1).cummax(dim=1).values.flip(1)
    start = masked_positions.gather(1, start_slot)
    end = masked_positions.gather(1, end_slot)
    return SpanBoundaries(left=start - 1, right=end + 1, relative=masked_positions - start)


def stored_span_boundaries(masked_positions: torch.Tensor, span_left: torch.Tensor, span_right: torch.Tensor
                           ) -> SpanBoundaries:
    """The boundaries of stored spans (collate's span_left / span_right [B, P], from the shards' mask_spans): the
    offset inside the span is the slot's position minus the span's first position (span_left + 1)."""
    return SpanBoundaries(left=span_left, right=span_right, relative=masked_positions - span_left - 1)


def gather_span_boundaries(hidden: torch.Tensor, masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                           attention_mask: torch.Tensor, max_span_tokens: int, bounds: SpanBoundaries | None = None):
    """hidden [B, T, H] -> (left [N, H], right [N, H], relative [N], labels [N]) for the N real slots whose span
    has both boundaries among the row's real tokens and whose offset is < max_span_tokens, in row-major order.
    `bounds`: the spans' boundaries (stored_span_boundaries); None reconstructs them (span_boundaries)."""
    b, t, h = hidden.shape
    if bounds is None:
        bounds = span_boundaries(masked_positions, masked_labels)
    real = masked_labels != IGNORE_INDEX
    inside = (bounds.left >= 0) & (bounds.right < t)
    right_is_real = attention_mask.gather(1, bounds.right.clamp(0, t - 1)) != 0
    keep = real & inside & right_is_real & (bounds.relative < max_span_tokens)
    offsets = torch.arange(b, device=hidden.device)[:, None] * t
    flat = hidden.reshape(b * t, h)
    left = flat.index_select(0, (bounds.left + offsets)[keep])
    right = flat.index_select(0, (bounds.right + offsets)[keep])
    return left, right, bounds.relative[keep], masked_labels[keep]


class SpanBoundaryHead(nn.Module):
    """The SBO head: relative position embeddings + a 2-layer FFN (GeLU, LayerNorm) + the tied decoder. With
    factorised embeddings (E != H) the second layer maps to E, as the MLM head does, so that it can use the
    word-embedding matrix as its decoder."""

    def __init__(self, hidden_size: int, vocab_size: int, max_span_tokens: int, position_size: int,
                 layer_norm_eps: float, embedding_size: int | None = None):
        super().__init__()
        width = embedding_size or hidden_size
        self.position_embeddings = nn.Embedding(max_span_tokens, position_size)
        self.dense1 = nn.Linear(2 * hidden_size + position_size, hidden_size)
        self.LayerNorm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense2 = nn.Linear(hidden_size, width)
        self.LayerNorm2 = nn.LayerNorm(width, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative: torch.Tensor,
                word_embeddings: torch.Tensor) -> torch.Tensor:
        """left, right [N, H] (encoder outputs at x_{s-1}, x_{e+1}), relative [N] (i - s) -> logits [N, V]."""
        h0 = torch.cat([left, right, self.position_embeddings(relative)], dim=-1)
        h1 = self.LayerNorm1(F.gelu(self.dense1(h0)))
        y = self.LayerNorm2(F.gelu(self.dense2(h1)))
        return F.linear(y, word_embeddings, self.bias)
