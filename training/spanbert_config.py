"""The recipe's SpanBERT settings: `model.spanbert` (SpanBertSettings), read by the SpanBertForPreTraining
architecture (training/models/spanbert.py) together with the rest of `model`, which describes the encoder.

    model:
      hidden_size: 768
      spanbert: {max_span_tokens: 15, position_size: 200}

Defaults are those of SpanBERT's released pretraining command (facebookresearch/SpanBERT pretraining/README.md:
--max-pair-targets 15 --pair-positional-embedding-size 200). Span masking itself is a preprocessing setting
(preprocess.masking.policy: span).
"""

from __future__ import annotations

from pydantic import Field

from bertfactory.config import StrictModel


class SpanBertSettings(StrictModel):
    """The span boundary objective's head (the encoder is the rest of the `model` section)."""

    max_span_tokens: int = Field(15, ge=1, description="relative positions the SBO head embeds: the first this "
                                 "many tokens of a masked span get an SBO target (the rest only the MLM loss)")
    position_size: int = Field(200, ge=1, description="width of the SBO head's relative position embeddings")
