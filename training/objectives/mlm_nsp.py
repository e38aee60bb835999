"""BERT's objective: masked LM + next-sentence prediction (the loss is BertForPreTraining.forward's `loss`)."""

from __future__ import annotations

import torch


def mlm_nsp(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(**batch)
