"""Transformer-XL's objective: causal language modelling with segment-level recurrence, on the ORIGINAL tokens
of a collate() batch (BERT's masks are undone first, see original_ids).

Each instance ([CLS] A [SEP] B [SEP], right-padded) is cut into m = model.config.train_segments consecutive
equal segments (the batch is padded up to a multiple of m); segment s is trained with the memory that segment
s-1 left (detached, so gradients stay inside a segment while context crosses it). Recurrence therefore spans
one instance: our shards hold independent instances in shuffled order, so the memory cannot continue across
batches. That needs shards of contiguous text streams laid out so that row r of batch s+1 continues row r of
batch s (the corpora issue's `clm` shards) and an objective that keeps the memory between steps.

Labels: position t predicts token t+1; none past the end of a row; and none at the A|B junction of rows whose
nsp_label is 1 (NotNext / swapped order), where the next token is not a continuation. Returns loss (= clm_loss,
mean cross-entropy over all predicted tokens of all segments), clm_loss, clm_correct, clm_count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.bert import IGNORE_INDEX
from .original_ids import original_ids


def next_token_labels(ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                      nsp_labels: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] -> labels [B, T]: ids[t + 1] where that token is real, else -100; -100 at the junction (last token
    of A) of rows with nsp_label 1."""
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
    if token_type_ids is not None and nsp_labels is not None:
        len_a = ((token_type_ids == 0) & (attention_mask == 1)).sum(dim=1)
        at_junction = torch.arange(ids.shape[1], device=ids.device)[None, :] == (len_a - 1)[:, None]
        labels = labels.masked_fill(at_junction & (nsp_labels == 1)[:, None], IGNORE_INDEX)
    return labels


def recurrent_clm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    ids = original_ids(batch)
    labels = next_token_labels(ids, batch["attention_mask"], batch.get("token_type_ids"), batch.get("nsp_labels"))
    segments = model.config.train_segments
    seg_len = -(-ids.shape[1] // segments)
    extra = seg_len * segments - ids.shape[1]
    if extra:
        ids = F.pad(ids, (0, extra), value=model.config.pad_token_id)
        labels = F.pad(labels, (0, extra), value=IGNORE_INDEX)
    mems = None
    nll_sum = correct = count = None
    for s in range(segments):
        window = slice(s * seg_len, (s + 1) * seg_len)
        out = model(ids[:, window], mems=mems, labels=labels[:, window])
        mems = out["new_mems"]
        seg_nll = out["clm_loss"] * out["clm_count"]  # back to a sum, so segments weigh by their token count
        nll_sum = seg_nll if nll_sum is None else nll_sum + seg_nll
        correct = out["clm_correct"] if correct is None else correct + out["clm_correct"]
        count = out["clm_count"] if count is None else count + out["clm_count"]
    loss = nll_sum / count.clamp(min=1)
    return {"loss": loss, "clm_loss": loss, "clm_correct": correct, "clm_count": count}
