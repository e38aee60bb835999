"""Pretraining heads: the pooler ([CLS] -> dense -> tanh), the masked-LM head and the next-sentence head, and the
summed token loss of the members that predict every labelled position (Transformer-XL, XLNet).

The MLM head computes logits only at the masked positions it is given (the caller gathers them first), which
for BERT's 15 % masking saves ~85 % of the vocabulary projection; its decoder is the input word-embedding
matrix (tied, passed in at call time so the weight exists once) plus an own output bias.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Pooler(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] -> [B, H] from the first ([CLS]) position."""
        return torch.tanh(self.dense(hidden[:, 0]))


class MaskedLMHead(nn.Module):
    """dense(H -> E) -> GELU -> LayerNorm -> tied decoder (E -> V) + bias; E = H except for factorised embeddings
    (ALBERT, ELECTRA's generator), where the transform maps back to the embedding width. `bias` False: the dense
    layer and the LayerNorm without bias (ModernBERT's head; the decoder keeps its bias)."""

    def __init__(self, hidden_size: int, vocab_size: int, layer_norm_eps: float, embedding_size: int | None = None,
                 bias: bool = True):
        super().__init__()
        width = embedding_size or hidden_size
        self.dense = nn.Linear(hidden_size, width, bias=bias)
        self.LayerNorm = nn.LayerNorm(width, eps=layer_norm_eps, bias=bias)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def transform(self, masked_hidden: torch.Tensor) -> torch.Tensor:
        """masked_hidden [N, H] -> [N, E], what the decoder reads (the fused loss takes it from here)."""
        return self.LayerNorm(F.gelu(self.dense(masked_hidden)))

    def forward(self, masked_hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """masked_hidden [N, H] (already gathered), word_embeddings [V, E] -> logits [N, V]."""
        return F.linear(self.transform(masked_hidden), word_embeddings, self.bias)


class NextSentenceHead(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.classifier = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """pooled [B, H] -> logits [B, 2] (0 = IsNext, 1 = NotNext)."""
        return self.classifier(pooled)


def summed_token_loss(logits: torch.Tensor, labels: torch.Tensor,
                      ignore_index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [N, V], labels [N] (`ignore_index` = no target) -> (loss, correct, count): the cross-entropy summed over
    the targets and divided by their count (at least 1), the targets predicted right, and the count. Sum / count
    rather than the mean: a static shape, no device sync, and no NaN for rows without targets (e.g. all padding)."""
    real = labels != ignore_index
    count = real.sum()
    loss = F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, reduction="sum") / count.clamp(min=1)
    with torch.no_grad():
        correct = ((logits.argmax(-1) == labels) & real).sum()
    return loss, correct, count
