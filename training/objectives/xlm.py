"""XLM's objectives (Lample & Conneau 2019, section 3) on XlmForPreTraining, all through its one tied LM head:

- `clm`: causal LM. Every token attends only to itself and the tokens before it (causal=True) and predicts the
  next token, at every real position but the last. Trains on the shards' text with the masks undone
  (original_ids): CLM does not use BERT's masks.
- `xlm_mlm`: masked LM on monolingual shard batches.
- `tlm`: translation LM: masked LM over `[CLS] source [SEP] target [SEP]` batches with a language id per token
  and positions restarting at the target (keys position_ids and language_ids: training/data.py
  translation_inputs, over the tlm-pairs rows of preprocessing/segments.py tlm_pair).
- `xlm_mlm_tlm`: the paper's joint schedule: MLM on monolingual batches and TLM on pair batches in alternate
  steps (training/xlm_data.py serves them); a batch with `position_ids` is a TLM batch.

Languages: clm and xlm_mlm pass the batch's `language_ids` (each row's language, per token, from multilingual
shards: training/data.py language_inputs) when it has them; without (shards of one language, schema v1) the model
gives every token model.xlm.language_id. Nothing here reads the model's config (under DDP `model` is the wrapper).

Metrics: clm_loss/clm_acc, mlm_loss/mlm_acc (xlm_mlm), tlm_loss/tlm_acc; xlm_mlm_tlm reports mlm_* on its MLM
steps and tlm_* on its TLM steps (the trainer averages each loss over the steps that report it).
"""

from __future__ import annotations

import torch

from ..models.bert.model import IGNORE_INDEX
from .original_ids import original_ids


def _named(out: dict, name: str) -> dict:
    return {"loss": out["loss"], f"{name}_loss": out["loss"], f"{name}_logits": out["logits"],
            f"{name}_correct": out["correct"], f"{name}_count": out["count"]}


def next_token_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T-1] = 0..T-2 and labels [B, T-1] = the token at t+1 where that token is real, else -100."""
    b, t = input_ids.shape
    positions = torch.arange(t - 1, device=input_ids.device).expand(b, t - 1)
    labels = torch.where(attention_mask[:, 1:] != 0, input_ids[:, 1:], IGNORE_INDEX)
    return positions, labels


def clm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    ids = original_ids(batch)
    positions, labels = next_token_targets(ids, batch["attention_mask"])
    out = model(input_ids=ids, token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"],
                masked_positions=positions, masked_labels=labels, language_ids=batch.get("language_ids"), causal=True)
    return _named(out, "clm")


def xlm_mlm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    out = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"], masked_positions=batch["masked_positions"],
                masked_labels=batch["masked_labels"], language_ids=batch.get("language_ids"))
    return _named(out, "mlm")


def tlm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    out = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"], masked_positions=batch["masked_positions"],
                masked_labels=batch["masked_labels"], position_ids=batch["position_ids"],
                language_ids=batch["language_ids"])
    return _named(out, "tlm")


def xlm_mlm_tlm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    """One step of the joint schedule: TLM on a pair batch (it carries position_ids), MLM on a monolingual one."""
    return tlm(model, batch) if "position_ids" in batch else xlm_mlm(model, batch)
