"""XLNet's objective: permutation language modelling (see training/models/xlnet.py) on the ORIGINAL tokens of a
collate() batch; BERT's masks mean nothing to it, so they are undone first (original_ids).

The factorisation orders are drawn from torch's global RNG (CPU), which the trainer seeds and checkpoints, so a
run is deterministic and resumes bit-for-bit. Trains `XLNetForPretraining`; returns its loss, plm_loss,
plm_correct and plm_count (plus plm_logits/plm_labels and new_mems).
"""

from __future__ import annotations

import torch

from .original_ids import original_ids


def permutation_lm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(original_ids(batch), batch["token_type_ids"], batch["attention_mask"])
