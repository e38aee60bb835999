"""What the distillation losses read from an encoder: every hidden state and, on request, every layer's
pre-softmax attention scores (through the opt-in `SelfAttention.score_sink`; the default SDPA path is untouched).

    states, scores = encoder_outputs(model.bert, batch, with_scores=True)
    # states: (embeddings, layer 1, ..., layer N) each [B, T, H]; scores: [layer 1, ..., layer N] each [B, h, T, T]
    pairs = attended_pairs(model.bert.config, batch["attention_mask"])   # [layer 1, ..., layer N] each [B, 1, T, T]

The recorded scores are q.k / sqrt(d) for every (query, key) pair, also the pairs a layer's mask then hides: padding,
and on ModernBERT's local layers every key further than local_attention / 2 from the query. `attended_pairs` says
which pairs each layer does attend, so a loss compares scores only where both layers use them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from training.models.core.attention import SelfAttention
from training.models.core.varlen import sliding_window_band

from .layer_map import attention_kinds


@contextmanager
def recording_scores(encoder: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Collect the pre-softmax scores of every SelfAttention of `encoder`, in call order (= layer order)."""
    sink: list[torch.Tensor] = []
    modules = [m for m in encoder.modules() if isinstance(m, SelfAttention)]
    for m in modules:
        m.score_sink = sink
    try:
        yield sink
    finally:
        for m in modules:
            m.score_sink = None


def encoder_outputs(backbone: nn.Module, batch: dict[str, torch.Tensor], with_scores: bool = False
                    ) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor] | None]:
    """(hidden states incl. embeddings, per-layer scores or None) of a BertModel-interface encoder."""
    args = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    if not with_scores:
        _, states = backbone(*args, output_hidden_states=True)
        return states, None
    with recording_scores(backbone) as sink:
        _, states = backbone(*args, output_hidden_states=True)
    return states, list(sink)


def attended_pairs(config, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the (query, key) pairs it attends, [B, 1, T, T] bool: both real tokens, and on a ModernBERT local
    layer also at most local_attention / 2 columns apart (the band its own mask uses, varlen.sliding_window_band)."""
    real = attention_mask.to(torch.bool)
    both = (real[:, :, None] & real[:, None, :])[:, None]
    kinds = attention_kinds(config)
    local = both & sliding_window_band(real, config.local_attention // 2) if "local" in kinds else None
    return [local if kind == "local" else both for kind in kinds]
