"""The transformer encoder: a stack of post-LN layers (self-attention block, then a GELU feed-forward block),
with ALBERT's cross-layer parameter sharing as an option.

Sharing (BertConfig.share_layers, num_layer_groups): the L layers are split into G consecutive groups; inside a
group the layers share all parameters (`all`, ALBERT's default), only the attention block (`attention`), only
the feed-forward block (`ffn`), or nothing (`none`, BERT). A shared block is stored once, in the first layer of
its group; the other layers of the group own only what they do not share, so the state dict never holds a
tensor twice (safetensors refuses aliased tensors) and with `none` names stay the BERT layout
(`layer.N.attention`, `layer.N.intermediate.dense`, `layer.N.output`).
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
    """One post-LN layer. `with_attention` / `with_ffn` False leave that block out (it is borrowed from the first
    layer of the group at run time, see Encoder)."""

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, hidden_dropout: float,
                 attention_dropout: float, layer_norm_eps: float, with_attention: bool = True, with_ffn: bool = True):
        super().__init__()
        if with_attention:
            self.attention = AttentionBlock(hidden_size, num_heads, attention_dropout, hidden_dropout, layer_norm_eps)
        if with_ffn:
            self.intermediate = Intermediate(hidden_size, intermediate_size)
            self.output = ResidualOutput(intermediate_size, hidden_size, hidden_dropout, layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.run(hidden, mask, self, self)

    @staticmethod
    def run(hidden: torch.Tensor, mask: torch.Tensor, attention_owner: "TransformerLayer",
            ffn_owner: "TransformerLayer") -> torch.Tensor:
        attended = attention_owner.attention(hidden, mask)
        return ffn_owner.output(ffn_owner.intermediate(attended), attended)


def layer_plan(num_layers: int, share: str, groups: int) -> tuple[int, list[tuple[int, int]]]:
    """(how many layer modules to build, per layer i: (index of the module owning its attention, of its FFN)).

    `all` builds one module per group; `attention`/`ffn` build one module per layer, of which only the first of
    each group owns the shared block; `none` builds one full module per layer."""
    per_group = num_layers // groups
    first = [(i // per_group) * per_group for i in range(num_layers)]
    if share == "none":
        return num_layers, [(i, i) for i in range(num_layers)]
    if share == "all":
        return groups, [(i // per_group, i // per_group) for i in range(num_layers)]
    if share == "attention":
        return num_layers, [(first[i], i) for i in range(num_layers)]
    if share == "ffn":
        return num_layers, [(i, first[i]) for i in range(num_layers)]
    raise ValueError(f"unknown share_layers {share!r}")


class Encoder(nn.Module):
    def __init__(self, num_layers: int, share_layers: str = "none", num_layer_groups: int = 1, **layer_kwargs):
        super().__init__()
        modules, self.plan = layer_plan(num_layers, share_layers, num_layer_groups)
        attention_owners = {a for a, _ in self.plan}
        ffn_owners = {f for _, f in self.plan}
        self.layer = nn.ModuleList(
            TransformerLayer(**layer_kwargs, with_attention=m in attention_owners, with_ffn=m in ffn_owners)
            for m in range(modules)
        )

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Returns the output of every layer (the last one is the encoder output). `mask`: a ready boolean
        attention mask broadcastable to [B, heads, T, T] (True = may attend), e.g. causal; else built from
        attention_mask [B, T] (1 real / 0 pad)."""
        if mask is None:
            mask = padding_mask(attention_mask)
        outputs = []
        for attention_index, ffn_index in self.plan:
            hidden = TransformerLayer.run(hidden, mask, self.layer[attention_index], self.layer[ffn_index])
            outputs.append(hidden)
        return outputs
