"""ALBERT's objective: masked LM + sentence-order prediction (SOP, Lan et al. 2020).

The rows of `sop-pairs` shards hold two consecutive segments of one document, swapped with probability 0.5; their
`nsp_label` field (batch key `nsp_labels`) is the sentence-order label, 0 = in order, 1 = swapped. The sentence
head is BertForPreTraining's two-way `nsp_head` on the pooled [CLS] (same shape; HF AlbertForPreTraining's
`sop_classifier`), so the model is the same class as BERT's and only the labels' meaning differs. The losses are
reported as `mlm_loss` and `sop_loss`, the sentence-order accuracy as `sop_acc` (from `sop_correct`/`sop_count`).
"""

from __future__ import annotations

import torch

from .mlm_nsp import bert_inputs


def mlm_sop(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    out = model(*bert_inputs(batch))  # loss = mlm_loss + the two-way cross-entropy on the sentence-order labels
    logits, labels = out.pop("nsp_logits"), batch["nsp_labels"]
    with torch.no_grad():
        correct = (logits.argmax(-1) == labels).sum()
    return {**{k: v for k, v in out.items() if k != "nsp_loss"}, "sop_loss": out["nsp_loss"], "sop_logits": logits,
            "sop_correct": correct, "sop_count": torch.tensor(labels.numel(), device=labels.device)}
