"""Gradient accumulation to a global batch: one optimiser step over `batch_size` sequences run as k equal
micro-batches (`pretrain.grad_accumulation`), with the same gradient as the whole batch at once.

    for micro, weights in split_batch(batch, k):
        out = objective(model, micro)
        weighted_loss(out, weights).backward()

How micro-batches are weighted (why not simply 1/k): an objective's loss is a mean *per micro-batch*, and the
means have different denominators. The MLM loss is a mean over the masked tokens, and micro-batches hold
different numbers of them, so `mlm_loss` gets the micro-batch's share of the global batch's masked tokens
(n_i / N, counted on the host from `masked_labels`); every other term of `loss` (NSP/SOP: a mean over
sequences) gets its share of the sequences (b_i / B = 1/k). The backpropagated loss is
    (b_i / B) * loss_i + (n_i / N - b_i / B) * mlm_loss_i,
and the sum over micro-batches is exactly the whole batch's mlm_loss + nsp_loss. This holds for the objectives
whose loss is mlm_loss plus per-sequence means (mlm, mlm_nsp, mlm_sop, ...); a term that is a mean over other
units (ELECTRA's discriminator loss: per real token; SpanBERT's SBO loss: per masked token) is weighted by the
sequence share, which equals the whole-batch mean only up to the spread of those counts over micro-batches.

A global batch of any size is expressible (batch_size = global sequences per step, e.g. 128 x 512 tokens = 65K
tokens, or LAMB's 64K sequences with grad_accumulation 512); only one micro-batch is on the device at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bertfactory.errors import ContractError

from .models.bert.model import IGNORE_INDEX


@dataclass(frozen=True)
class MicroWeights:
    sequences: float  # b_i / B
    masked_tokens: float  # n_i / N (= sequences when the batch has no masked tokens)


def split_batch(batch: dict[str, torch.Tensor], parts: int) -> list[tuple[dict[str, torch.Tensor], MicroWeights]]:
    """Slice every tensor of the batch along its first (batch) dimension into `parts` equal micro-batches."""
    sizes = {key: value.shape[0] for key, value in batch.items() if isinstance(value, torch.Tensor) and value.dim()}
    rows = next(iter(sizes.values()))
    if any(size != rows for size in sizes.values()):
        raise ContractError(f"grad_accumulation: batch tensors disagree on the batch dimension: {sizes}")
    if rows % parts:
        raise ContractError(f"grad_accumulation {parts} does not divide the batch of {rows} sequences")
    step = rows // parts
    labels = batch.get("masked_labels")
    total_masked = int((labels != IGNORE_INDEX).sum()) if labels is not None else 0
    micro = []
    for start in range(0, rows, step):
        part = {key: value[start:start + step] if key in sizes else value for key, value in batch.items()}
        share = step / rows
        if total_masked:
            masked_share = int((part["masked_labels"] != IGNORE_INDEX).sum()) / total_masked
        else:
            masked_share = share
        micro.append((part, MicroWeights(share, masked_share)))
    return micro


def weighted_loss(out: dict, weights: MicroWeights) -> torch.Tensor:
    """The micro-batch's contribution to the whole batch's loss (see the module docstring)."""
    loss = out["loss"] * weights.sequences
    mlm_loss = out.get("mlm_loss")
    if isinstance(mlm_loss, torch.Tensor) and mlm_loss.requires_grad and weights.masked_tokens != weights.sequences:
        loss = loss + mlm_loss * (weights.masked_tokens - weights.sequences)
    return loss


def combine_scalars(parts: list[tuple[dict[str, float], MicroWeights]], loss: float) -> dict[str, float]:
    """Step metrics of the whole batch from its micro-batches' host scalars: `loss` is the sum of the
    backpropagated `weighted_loss` values (given), mlm_loss is weighted by masked-token share, other losses by
    sequence share, and counts (*_correct / *_count) add up."""
    combined: dict[str, float] = {}
    for scalars, weights in parts:
        for key, value in scalars.items():
            if key == "mlm_loss":
                value = value * weights.masked_tokens
            elif key.endswith("_loss"):
                value = value * weights.sequences
            combined[key] = combined.get(key, 0.0) + value
    combined["loss"] = loss
    return combined
