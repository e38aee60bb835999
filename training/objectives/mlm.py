"""Masked LM alone, without next-sentence prediction (as in RoBERTa). The NSP head still runs (its logits are
returned) but gets no loss, so its weights stay at their initialisation."""

from __future__ import annotations

import torch


def mlm_only(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(**{**batch, "nsp_labels": None})
