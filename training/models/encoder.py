"""The transformer encoder: a stack of post-LN layers (self-attention block, then a GELU feed-forward block).

Module names (`layer.N.attention`, `layer.N.intermediate.dense`, `layer.N.output`) mirror the original BERT layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionBlock, ResidualOutput, padding_mask


class Intermediate(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))  # exact (erf) GELU, as in BERT


class TransformerLayer(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, hidden_dropout: float,
                 attention_dropout: float, layer_norm_eps: float):
        super().__init__()
        self.attention = AttentionBlock(hidden_size, num_heads, attention_dropout, hidden_dropout, layer_norm_eps)
        self.intermediate = Intermediate(hidden_size, intermediate_size)
        self.output = ResidualOutput(intermediate_size, hidden_size, hidden_dropout, layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, mask)
        return self.output(self.intermediate(attended), attended)


class Encoder(nn.Module):
    def __init__(self, num_layers: int, **layer_kwargs):
        super().__init__()
        self.layer = nn.ModuleList(TransformerLayer(**layer_kwargs) for _ in range(num_layers))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        """Returns the output of every layer (the last one is the encoder output)."""
        mask = padding_mask(attention_mask)
        outputs = []
        for layer in self.layer:
            hidden = layer(hidden, mask)
            outputs.append(hidden)
        return outputs
