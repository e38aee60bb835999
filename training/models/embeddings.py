"""BERT input embeddings: word + learned absolute position + token type, then LayerNorm and dropout.

Parameter names follow the original BERT / Hugging Face layout (`word_embeddings`, `position_embeddings`,
`token_type_embeddings`, `LayerNorm`) so that published BERT checkpoints map onto this module by name.
"""

from __future__ import annotations

import torch
from torch import nn


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, max_position_embeddings: int, type_vocab_size: int,
                 layer_norm_eps: float, dropout: float, pad_token_id: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_position_embeddings {self.position_embeddings.num_embeddings}"
            )
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None] + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))
