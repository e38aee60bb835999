"""Masked LM alone, without next-sentence prediction (as in RoBERTa). The model is built without a sentence-pair
head (ObjectiveSpec.sentence_head False), and its pooler stays as initialised until fine-tuning trains it."""

from __future__ import annotations

import torch

from .mlm_nsp import bert_inputs


def mlm_only(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(*bert_inputs(batch, nsp_labels=False))
