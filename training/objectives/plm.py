"""XLNet's objective: permutation language modelling (see training/models/xlnet/model.py) on the ORIGINAL tokens of a
collate() batch; BERT's masks mean nothing to it, so they are undone first (original_ids).

Each row's factorisation order is a function of its `row_seeds` entry (the loader's, a hash of (seed, epoch, row)),
so a row gets the same order under any number of processes or micro-batches; batches without row_seeds (built by
hand) draw from torch's global RNG, which the trainer seeds and checkpoints. Either way a run is deterministic and
resumes bit-for-bit. With the stream loader (pretrain.stream_batches, training/streams.py) the batch carries
stream_slots / stream_continues and the model carries its content-stream memory (mem_len) across batches, from a
row to the next segment of the same document in the same batch slot. Trains `XLNetForPreTraining`; returns its
loss, plm_loss, plm_correct and plm_count (plus plm_logits/plm_labels and new_mems).
"""

from __future__ import annotations

import torch

from .original_ids import original_ids


def permutation_lm(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict:
    return model(original_ids(batch), batch["token_type_ids"], batch["attention_mask"], row_seeds=batch.get("row_seeds"),
                 stream_slots=batch.get("stream_slots"), stream_continues=batch.get("stream_continues"))
