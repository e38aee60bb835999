"""SpanBERT's objective: masked LM + span boundary objective, no next-sentence prediction (the loss is
SpanBertForPreTraining.forward's `loss` = mlm_loss + sbo_loss). Shard rows' nsp_label is not read."""

from __future__ import annotations

import torch

SBO_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions", "masked_labels")


def mlm_sbo(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(**{name: batch[name] for name in SBO_INPUTS})
