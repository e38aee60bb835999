"""The transformer encoder: a stack of post-LN layers (self-attention block, then a GELU feed-forward block),
with ALBERT's cross-layer parameter sharing as an option.

Sharing (BertConfig.share_layers, num_layer_groups): the L layers are split into G consecutive groups; inside a
group the layers share all parameters (`all`, ALBERT's default), only the attention block (`attention`), only
the feed-forward block (`ffn`), or nothing (`none`, BERT). A shared block is stored once, in the first layer of
its group; the other layers of the group own only what they do not share, so the state dict never holds a
tensor twice (safetensors refuses aliased tensors) and with `none` names stay the BERT layout
(`layer.N.attention`, `layer.N.intermediate.dense`, `layer.N.output`).

Layer style (`LayerStyle`, BERT's by default): the ModernBERT-class member builds the same layers pre-LN (each block
normalises its input: `attention.input_norm`, `intermediate.input_norm`; no norm after the residual sum; the first
layer's attention without one, as its input is the normalised embeddings), without biases in projections and
norms, with a GeGLU feed-forward block, and gives each layer its own mask and rotary angles (`per_layer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionBlock, ResidualOutput, padding_mask


@dataclass(frozen=True)
class LayerStyle:
    """How the layers are built; the defaults are BERT's."""

    pre_norm: bool = False  # normalise each block's input instead of the residual sum (pre-LN)
    bias: bool = True  # biases in the projections and LayerNorms
    gated_ffn: bool = False  # GeGLU: the FFN's dense layer gives 2 x intermediate_size, GELU(first half) * second half
    first_attention_norm: bool = True  # pre_norm only: whether layer 0's attention normalises its input


BERT_LAYERS = LayerStyle()


class Intermediate(nn.Module):
    """dense(H -> I) -> GELU; gated (GeGLU): dense(H -> 2I), GELU of the first half times the second half.
    `input_norm`: a pre-LN layer's norm of the block's input."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = True, gated: bool = False,
                 input_norm: nn.Module | None = None):
        super().__init__()
        self.gated = gated
        self.dense = nn.Linear(hidden_size, intermediate_size * (2 if gated else 1), bias=bias)
        self.input_norm = input_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.gated:
            value, gate = self.dense(x).chunk(2, dim=-1)  # the first half goes through the GELU (transformers' order)
            return F.gelu(value) * gate
        return F.gelu(self.dense(x))  # exact (erf) GELU, as in BERT


class TransformerLayer(nn.Module):
    """One layer, post-LN unless `style.pre_norm`. `with_attention` / `with_ffn` False leave that block out (it is
    borrowed from the first layer of the group at run time, see Encoder). `attention_norm` False: a pre-LN
    layer's attention without an input norm (the first layer, LayerStyle.first_attention_norm)."""

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, hidden_dropout: float,
                 attention_dropout: float, layer_norm_eps: float, with_attention: bool = True, with_ffn: bool = True,
                 style: LayerStyle = BERT_LAYERS, attention_norm: bool = True):
        super().__init__()
        if with_attention:
            self.attention = AttentionBlock(hidden_size, num_heads, attention_dropout, hidden_dropout, layer_norm_eps,
                                            bias=style.bias, pre_norm=style.pre_norm, input_norm=attention_norm)
        if with_ffn:
            ffn_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps, bias=style.bias) if style.pre_norm else None
            self.intermediate = Intermediate(hidden_size, intermediate_size, bias=style.bias, gated=style.gated_ffn,
                                             input_norm=ffn_norm)
            self.output = ResidualOutput(intermediate_size, hidden_size, hidden_dropout, layer_norm_eps,
                                         bias=style.bias, norm=not style.pre_norm, norm_bias=style.bias)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.run(hidden, mask, self, self)

    @staticmethod
    def run(hidden: torch.Tensor, mask: torch.Tensor, attention_owner: "TransformerLayer",
            ffn_owner: "TransformerLayer", rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        attended = attention_owner.attention(hidden, mask, rotary)
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
    def __init__(self, num_layers: int, share_layers: str = "none", num_layer_groups: int = 1,
                 style: LayerStyle = BERT_LAYERS, **layer_kwargs):
        super().__init__()
        modules, self.plan = layer_plan(num_layers, share_layers, num_layer_groups)
        attention_owners = {a for a, _ in self.plan}
        ffn_owners = {f for _, f in self.plan}
        self.layer = nn.ModuleList(
            TransformerLayer(**layer_kwargs, with_attention=m in attention_owners, with_ffn=m in ffn_owners,
                             style=style, attention_norm=m > 0 or style.first_attention_norm)
            for m in range(modules)
        )

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None,
                mask: torch.Tensor | None = None,
                per_layer: list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]] | None = None
                ) -> list[torch.Tensor]:
        """Returns the output of every layer (the last one is the encoder output). `mask`: a ready boolean
        attention mask broadcastable to [B, heads, T, T] (True = may attend), e.g. causal; else built from
        attention_mask [B, T] (1 real / 0 pad). `per_layer`: instead, one (mask, rotary (cos, sin) or None) per
        layer, for layers that differ in what they attend to (ModernBERT's global and sliding-window layers, each
        kind with its own rotary base)."""
        if per_layer is None:
            if mask is None:
                mask = padding_mask(attention_mask)
            per_layer = [(mask, None)] * len(self.plan)
        outputs = []
        for (attention_index, ffn_index), (layer_mask, rotary) in zip(self.plan, per_layer, strict=True):
            hidden = TransformerLayer.run(hidden, layer_mask, self.layer[attention_index], self.layer[ffn_index],
                                          rotary)
            outputs.append(hidden)
        return outputs
