"""BERT's objective: masked LM + next-sentence prediction (the loss is BertForPreTraining.forward's `loss`)."""

from __future__ import annotations

import torch


def bert_inputs(batch: dict[str, torch.Tensor], nsp_labels: bool = True) -> tuple:
    """BertForPreTraining's positional inputs from a batch (the batch also carries keys other objectives read)."""
    return (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_positions"],
            batch["masked_labels"], batch["nsp_labels"] if nsp_labels else None)


def mlm_nsp(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(*bert_inputs(batch))
