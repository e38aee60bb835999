"""Transformer-XL (Dai et al. 2019): a causal language model with segment-level recurrence. Each layer attends
over [memory; segment], the memory being that layer's input states of the previous segment(s), detached (no
gradient crosses a segment boundary); positions are relative (relative_attention.py), so a state means the same
thing whether it is read from the memory or computed in the current segment.

    model = TransformerXLLM(TransformerXLConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2,
                                                intermediate_size=512, mem_len=64))
    out = model(segment_1, labels=labels_1)                     # loss, clm_*, new_mems
    out = model(segment_2, mems=out["new_mems"], labels=labels_2)
    model.evaluate_long(token_ids, segment_len=64)              # {"nll", "perplexity", "tokens"} over long text
    model(rows, labels=labels, attention_mask=mask, stream_slots=slots, stream_continues=continues)  # training rows,
                                                                # memory carried per batch slot across calls

Deviations from the paper's setup, for the family: a full softmax tied to the word embeddings (no adaptive
softmax), post-LN layers with BERT's GELU feed-forward, per-layer (untied) u and v.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from pydantic.dataclasses import dataclass
from torch import nn

from ..core.architecture import Architecture
from ..bert.model import IGNORE_INDEX, init_bert_weights
from ..core.config_schema import MODEL_CONFIG
from ..core.heads import summed_token_loss
from .settings import MEMBER, TransformerXLSettings
from ..core.relative_config import RelativeConfig, relative_config_from_model_config
from ..core.stream_memory import memory_of
from ..core.relative_attention import (
    RelativeTransformerLayer, init_relative_weights, shift_geometry, sinusoid_embeddings, update_memory, with_memory,
)


@dataclass(frozen=True, config=MODEL_CONFIG)
class TransformerXLConfig(TransformerXLSettings, RelativeConfig):
    """Architecture of a Transformer-XL LM (what `config.json` of a checkpoint stores under `model`):
    RelativeConfig's fields, then TransformerXLSettings'."""


def causal_allowed(qlen: int, mlen: int, device: torch.device | None = None) -> torch.Tensor:
    """[1, Q, M + Q] bool: query i (key position M + i) sees every memory state and the segment up to itself."""
    keys = torch.arange(mlen + qlen, device=device)
    return (keys[None, :] <= torch.arange(qlen, device=device)[:, None] + mlen)[None]


class TransformerXLLM(nn.Module):
    def __init__(self, config: TransformerXLConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.layer = nn.ModuleList(
            RelativeTransformerLayer(config.hidden_size, config.num_heads, config.intermediate_size, config.dropout,
                                     config.attention_dropout, config.layer_norm_eps, segments=False)
            for _ in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        init_bert_weights(self, config.initializer_range)
        init_relative_weights(self, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, mems: list[torch.Tensor] | None = None,
                labels: torch.Tensor | None = None, allowed: torch.Tensor | None = None,
                mem_valid: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                stream_slots: torch.Tensor | None = None, stream_continues: torch.Tensor | None = None
                ) -> dict[str, Any]:
        """One segment: input_ids [B, T]; mems: the previous call's `new_mems` (per layer [B, M, H]) or None.
        labels [B, T] (the next token of each position, -100 = no loss) -> loss (= clm_loss, mean cross-entropy),
        clm_loss, clm_correct, clm_count, new_mems; without labels -> logits [B, T, V], new_mems.
        new_mems (None when mem_len is 0): per layer the last mem_len of (memory, this segment's layer input),
        detached. allowed: [1|B, T, M + T] bool to replace the causal visibility (must stay causal: it is checked).
        mem_valid [B, M] bool: memory states that may be attended to (False = masked out, e.g. a reset stream).

        Training rows (what the txl_clm objective calls, so that DDP sees the whole step in one forward): with
        `attention_mask` [B, T] given, each row is cut into config.train_segments consecutive segments walked with
        the memory carried from one to the next; with `stream_slots` / `stream_continues` [B] (the stream loader,
        training/streams.py) the walk starts from the memory the slot's previous row left (reset where
        continues is 0) and leaves its final memory for the slot's next row. Returns the loss dict over all
        segments (loss = clm_loss, clm_correct, clm_count)."""
        if attention_mask is not None:
            return self._rows(input_ids, labels, attention_mask, stream_slots, stream_continues)
        b, t = input_ids.shape
        mlen = mems[0].shape[1] if mems else 0
        if allowed is None:
            allowed = causal_allowed(t, mlen, input_ids.device)
        elif bool((allowed & ~causal_allowed(t, mlen, input_ids.device)).any()):
            raise ValueError("allowed lets a query see a later key; Transformer-XL attention is causal")
        if mem_valid is not None and mlen:
            allowed = allowed & torch.cat([mem_valid[:, None, :], mem_valid.new_ones(b, 1, t)], dim=-1)
        geometry = shift_geometry(allowed, causal=True)
        positions = self.dropout(sinusoid_embeddings(geometry.distances(input_ids.device), self.config.hidden_size))
        h = self.dropout(self.word_embeddings(input_ids))
        new_mems: list[torch.Tensor] | None = [] if self.config.mem_len > 0 else None
        for i, layer in enumerate(self.layer):
            memory = mems[i] if mems else None
            if new_mems is not None:
                new_mems.append(update_memory(memory, h, self.config.mem_len))
            (h,) = layer([(h, geometry)], with_memory(memory, h), positions)
        h = self.dropout(h)
        if labels is None:
            return {"logits": self._logits(h), "new_mems": new_mems}
        logits = self._logits(h.reshape(b * t, -1))
        loss, correct, count = summed_token_loss(logits, labels.reshape(-1), IGNORE_INDEX)
        return {"loss": loss, "clm_loss": loss, "clm_correct": correct, "clm_count": count, "new_mems": new_mems}

    def _rows(self, ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor,
              stream_slots: torch.Tensor | None, stream_continues: torch.Tensor | None) -> dict[str, Any]:
        """Training rows in config.train_segments segments with a carried memory (see forward)."""
        segments = self.config.train_segments
        seg_len = -(-ids.shape[1] // segments)
        extra = seg_len * segments - ids.shape[1]
        if extra:
            ids = F.pad(ids, (0, extra), value=self.config.pad_token_id)
            labels = F.pad(labels, (0, extra), value=IGNORE_INDEX)
            attention_mask = F.pad(attention_mask, (0, extra), value=0)
        carried = stream_slots is not None and self.config.mem_len > 0
        mems = valid = None
        if carried:
            if stream_continues is None:
                raise ValueError("stream_slots without stream_continues: which rows continue their slot's stream?")
            mems, valid = memory_of(self).read(stream_slots, stream_continues, ids.device,
                                               self.word_embeddings.weight.dtype)
        nll_sum = correct = count = None
        for s in range(segments):
            window = slice(s * seg_len, (s + 1) * seg_len)
            out = self(ids[:, window], mems=mems, labels=labels[:, window], mem_valid=valid)
            if out["new_mems"] is not None:  # which of the kept states are real tokens (padding never is)
                real = attention_mask[:, window].to(torch.bool)
                joined = real if valid is None else torch.cat([valid, real], dim=1)
                valid = joined[:, -self.config.mem_len:]
            mems = out["new_mems"]
            seg_nll = out["clm_loss"] * out["clm_count"]  # back to a sum, so segments weigh by their token count
            nll_sum = seg_nll if nll_sum is None else nll_sum + seg_nll
            correct = out["clm_correct"] if correct is None else correct + out["clm_correct"]
            count = out["clm_count"] if count is None else count + out["clm_count"]
        if carried:
            memory_of(self).write(stream_slots, mems, valid)
        loss = nll_sum / count.clamp(min=1)
        return {"loss": loss, "clm_loss": loss, "clm_correct": correct, "clm_count": count}

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.word_embeddings.weight, self.lm_bias)

    @torch.no_grad()
    def evaluate_long(self, ids: torch.Tensor, segment_len: int) -> dict[str, float]:
        """Mean next-token NLL (nats) and perplexity over long text ids [N] or [B, N], walked in segments of
        `segment_len` that carry the memory, so every prediction sees up to mem_len earlier tokens besides its
        segment. Every token but the first is predicted once. Runs in eval mode (restores the previous mode)."""
        if segment_len < 1:
            raise ValueError(f"segment_len must be >= 1 (got {segment_len})")
        if ids.dim() == 1:
            ids = ids[None]
        if ids.shape[1] < 2:
            raise ValueError(f"evaluate_long needs at least 2 tokens, got {ids.shape[1]}")
        was_training = self.training
        self.eval()
        try:
            total = torch.zeros((), dtype=torch.float64, device=ids.device)
            tokens = 0
            mems = None
            for start in range(0, ids.shape[1] - 1, segment_len):
                segment = ids[:, start:start + segment_len]
                labels = ids[:, start + 1:start + 1 + segment_len]
                if labels.shape[1] < segment.shape[1]:  # the last position of the text has no next token
                    labels = F.pad(labels, (0, segment.shape[1] - labels.shape[1]), value=IGNORE_INDEX)
                out = self(segment, mems=mems, labels=labels)
                total += out["clm_loss"].double() * out["clm_count"]
                tokens += int(out["clm_count"])
                mems = out["new_mems"]
        finally:
            self.train(was_training)
        nll = float(total) / tokens
        return {"nll": nll, "perplexity": math.exp(nll), "tokens": tokens}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def untrained_parameter_names(self) -> list[str]:
        """None: the causal LM reads every parameter (see training/models/core/architecture.py)."""
        return []

    def backbone(self):
        """A causal LM has no bidirectional encoder to fine-tune on sentence tasks; say so instead of pretending."""
        from bertfactory.errors import ContractError

        raise ContractError("a Transformer-XL checkpoint is a causal language model with no encoder for fine-tuning; "
                            "evaluate it with TransformerXLLM.evaluate_long (perplexity over long text)")


def _from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> TransformerXLConfig:
    return relative_config_from_model_config(TransformerXLConfig, model_cfg, vocab_size, pad_token_id,
                                             "Transformer-XL", "transformer_xl")


ARCHITECTURE = Architecture(
    name="TransformerXLLM",
    config_from_dict=TransformerXLConfig.from_dict,
    build=TransformerXLLM,
    from_model_config=_from_model_config,
    description="Transformer-XL: causal LM with segment-level recurrence (no encoder for fine-tuning)",
    settings=MEMBER.settings,
)
