"""The recipe's settings of the relative-position members: `model.xlnet` (XLNetSettings, objective plm) and
`model.transformer_xl` (TransformerXLSettings, objective txl_clm), read together with the shared `model` fields
(vocab, hidden size, layers, heads, FFN width, dropout, LayerNorm epsilon, init range). Neither member has
absolute positions: `model.max_position_embeddings`, `type_vocab_size`, `embedding_size` and layer sharing do not
apply to them (and are refused when set to non-defaults, so a recipe never silently means something else).

    model:
      hidden_size: 768
      xlnet: {predict_fraction: 6, mem_len: 0}

Defaults: XLNet's partial prediction K = 6 (Yang et al. 2019, Section 2.3, "K = 6, 7 in our experiments") with no
memory (the recipes set mem_len with `clm` shards and pretrain.stream_batches, which carry it across batches:
training/streams.py); Transformer-XL's memory of 64 states per layer and 2 segments per row (the recipes use one
segment per row and carry the memory across batches with pretrain.stream_batches).
"""

from __future__ import annotations

from pydantic import Field

from bertfactory.config import StrictModel


class XLNetSettings(StrictModel):
    """XLNet's permutation language modelling."""

    predict_fraction: int = Field(6, ge=1, description="K of partial prediction: only the last 1/K of each "
                                  "factorisation order is predicted")
    mem_len: int = Field(0, ge=0, description="content-stream states per layer kept as memory for the next "
                         "segment (0 = none); carried across batches with pretrain.stream_batches")


class TransformerXLSettings(StrictModel):
    """Transformer-XL's segment-level recurrence."""

    mem_len: int = Field(64, ge=0, description="hidden states per layer cached from the previous segment "
                         "(stop-gradient) and attended to by the next")
    train_segments: int = Field(2, ge=1, description="segments each training row is split into; the memory "
                                "carries from one to the next (and, with pretrain.stream_batches, to the next batch)")
