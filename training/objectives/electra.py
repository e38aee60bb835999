"""ELECTRA's objective: generator masked LM + disc_weight * replaced-token detection, joint or two-stage as the
model's config says (ElectraForPreTraining.forward computes both losses; see training/models/electra/model.py).

Returned scalars: loss, mlm_loss (generator), disc_loss (None in the generator-alone stage of two-stage
training), mlm_correct / mlm_count (generator), disc_correct / disc_count (discriminator, over real tokens).
"""

from __future__ import annotations

import torch


def electra(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    # nsp_labels of the shards are not passed: ELECTRA has no sentence-pair loss
    return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_positions"],
                 batch["masked_labels"], row_seeds=batch.get("row_seeds"))
