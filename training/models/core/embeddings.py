"""BERT input embeddings: word + learned absolute position + token type (+ language, for XLM), then LayerNorm and
dropout, all of width E (= hidden size, or smaller for ALBERT/ELECTRA's factorised embeddings, which BertModel
projects to the hidden size).

Parameter names follow the original BERT / Hugging Face layout (`word_embeddings`, `position_embeddings`,
`token_type_embeddings`, `LayerNorm`) so that published BERT checkpoints map onto this module by name.

The ModernBERT-class member (rotary positions in attention, no segments) builds it with `learned_positions` and
`token_types` False and a LayerNorm without bias (`norm_bias`): word embeddings -> LayerNorm -> dropout.
"""

from __future__ import annotations

import torch
from torch import nn


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, width: int, max_position_embeddings: int, type_vocab_size: int,
                 layer_norm_eps: float, dropout: float, pad_token_id: int, num_languages: int = 0,
                 learned_positions: bool = True, token_types: bool = True, norm_bias: bool = True):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, width, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, width) if learned_positions else None
        self.token_type_embeddings = nn.Embedding(type_vocab_size, width) if token_types else None
        self.language_embeddings = nn.Embedding(num_languages, width) if num_languages else None
        self.LayerNorm = nn.LayerNorm(width, eps=layer_norm_eps, bias=norm_bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                language_ids: torch.Tensor | None = None) -> torch.Tensor:
        """position_ids [B, T] default to 0..T-1 (XLM's TLM restarts them at the target sentence); language_ids
        [B, T] are required when the model has language embeddings and refused otherwise. Without learned
        positions / token types, position_ids / token_type_ids are not read."""
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            limit = self.position_embeddings.num_embeddings
            if position_ids is None:
                seq_len = input_ids.shape[1]
                if seq_len > limit:
                    raise ValueError(f"sequence length {seq_len} exceeds max_position_embeddings {limit}")
                positions = self.position_embeddings(torch.arange(seq_len, device=input_ids.device))[None]
            else:
                positions = self.position_embeddings(position_ids)
            x = x + positions
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.language_embeddings is not None:
            if language_ids is None:
                raise ValueError("this model has language embeddings (num_languages > 0): pass language_ids")
            x = x + self.language_embeddings(language_ids)
        elif language_ids is not None:
            raise ValueError("language_ids given but the model has no language embeddings (num_languages = 0)")
        return self.dropout(self.LayerNorm(x))
