"""SpanBERT's objective: masked LM + span boundary objective, no next-sentence prediction (the loss is
SpanBertForPreTraining.forward's `loss` = mlm_loss + sbo_loss). Shard rows' nsp_label is not read.

The SBO reads each masked span's stored bounds (batch keys span_left / span_right, from the shards' mask_spans
column that masking policy span writes). Shards without it (another policy, or span shards written before the
column existed) still train: the spans are then reconstructed as runs of masked positions, which is said once in
the log."""

from __future__ import annotations

import logging

import torch

SBO_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions", "masked_labels")
SPAN_BOUND_INPUTS = ("span_left", "span_right")

log = logging.getLogger(__name__)
_said_fallback = False


def mlm_sbo(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    global _said_fallback
    inputs = {name: batch[name] for name in SBO_INPUTS}
    if all(name in batch for name in SPAN_BOUND_INPUTS):
        inputs.update({name: batch[name] for name in SPAN_BOUND_INPUTS})
    elif not _said_fallback:
        _said_fallback = True
        log.warning("mlm_sbo: the shards store no span bounds (column mask_spans, which masking policy span "
                    "writes; these shards use another policy or predate it): the span boundary objective "
                    "reconstructs the spans as runs of consecutive masked positions")
    return model(**inputs)
