"""The original tokens of a collate() batch: its input_ids with every masked position given back its label.
Objectives that do not use BERT's masks (permutation LM, causal LM) train on these.

    ids = original_ids(batch)     # [B, T] int64, a new tensor
"""

from __future__ import annotations

import torch

from ..models.bert.model import IGNORE_INDEX


def original_ids(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """input_ids [B, T] with masked_labels written back at masked_positions (slots with label -100 are padding
    of the prediction lists and are skipped)."""
    ids = batch["input_ids"]
    positions, labels = batch["masked_positions"], batch["masked_labels"]
    real = labels != IGNORE_INDEX
    # add (label - current) at the real slots and 0 at the padding slots (which point at position 0): unlike an
    # overwrite this is right even when a real slot is position 0 too, and needs no boolean-index device sync
    delta = torch.where(real, labels - ids.gather(1, positions), torch.zeros_like(labels))
    return ids.scatter_add(1, positions, delta)
