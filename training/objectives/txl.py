"""Transformer-XL's objective: causal language modelling with segment-level recurrence, on the ORIGINAL tokens
of a collate() batch (BERT's masks are undone first, see original_ids).

The model does the walk (TransformerXLLM.forward with an attention_mask): each row is cut into
model.config.train_segments consecutive equal segments, segment s trained with the memory segment s-1 left
(detached, so gradients stay inside a segment while context crosses it). The objective reads nothing from the
model but its forward, so under DistributedDataParallel the wrapper sees the whole step.

With the stream loader (pretrain.stream_batches, training/streams.py: `clm` shards served so that row r of batch
s+1 continues row r of batch s, as the paper's data iterator does) the batch carries stream_slots /
stream_continues, and the memory crosses BATCHES too: a row starts from the memory its slot's previous row left,
reset where the slot's stream starts a new document. Its stream_next label (the first token of the document's
next segment) is the target of the row's last token, so every token of a document but the last is predicted.

Labels: position t predicts token t+1; at the last real token stream_next when the batch has it, else none; and
none at the A|B junction of rows whose nsp_label is 1 (NotNext / swapped order), where the next token is not a
continuation. Returns loss (= clm_loss, mean cross-entropy over all predicted tokens of all segments), clm_loss,
clm_correct, clm_count.
"""

from __future__ import annotations

import torch

from ..models.bert.model import IGNORE_INDEX
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
    attention_mask = batch["attention_mask"]
    labels = next_token_labels(ids, attention_mask, batch.get("token_type_ids"), batch.get("nsp_labels"))
    if "stream_next" in batch:  # the row's last real token predicts the first token of the document's next row
        last = (attention_mask.sum(dim=1) - 1).clamp(min=0)[:, None]
        labels = labels.scatter(1, last, batch["stream_next"][:, None])
    return model(ids, labels=labels, attention_mask=attention_mask, stream_slots=batch.get("stream_slots"),
                 stream_continues=batch.get("stream_continues"))
