"""XLNet (Yang et al. 2019): permutation language modelling with two-stream self-attention over relative
attention (relative_attention.py), and a content-stream-only encoder for fine-tuning.

Pretraining (`XLNetForPreTraining.forward`): per sequence a factorisation order z over its real (non-padding)
tokens is sampled; the sequence itself is not reordered, only the attention masks change:
  - content stream h (initialised with the word embeddings): token i sees j iff z-rank(j) <= z-rank(i);
  - query stream g (initialised with a learned vector w): target i sees j iff z-rank(j) < z-rank(i), i.e. it
    knows its own position (through the relative encodings) but never its own content.
Partial prediction: only the last 1/K of the order (K = `predict_fraction`, max(1, n // K) of n real tokens) are
targets. The query stream is computed only at the targets (g at position i depends on g at i and on h, never on
g elsewhere, so this is exact) and logits only there, through the tied word embeddings plus a bias.

    model = XLNetForPreTraining(XLNetConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2,
                                            intermediate_size=512))
    out = model(input_ids, token_type_ids, attention_mask)     # order drawn from torch's global RNG
    out["loss"].backward()
    hidden = model.encode(input_ids, token_type_ids, attention_mask)   # fine-tuning path, [B, T, H]

Padding never takes part: it is no key for anybody, no target, and ranks after every real token.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic.dataclasses import dataclass
from torch import nn

from ..core.architecture import Architecture
from ..bert.model import IGNORE_INDEX, init_bert_weights
from ..core.config_schema import MODEL_CONFIG
from .settings import MEMBER, XLNetSettings
from ..core.relative_config import RelativeConfig, relative_config_from_model_config
from ..core.heads import Pooler, summed_token_loss
from ..core.relative_attention import (
    RelativeGeometry, RelativeTransformerLayer, gather_geometry, init_relative_weights, shift_geometry,
    sinusoid_embeddings, update_memory, with_memory,
)
from ..core.stream_memory import memory_of


@dataclass(frozen=True, config=MODEL_CONFIG)
class XLNetConfig(XLNetSettings, RelativeConfig):
    """Architecture of an XLNet model (what `config.json` of a checkpoint stores under `model`): RelativeConfig's
    fields, then XLNetSettings'."""


# ------------------------------------------------------------------------------ factorisation order and masks


_MASK32 = 0xFFFFFFFF


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (int64 tensors holding values in [0, 2^32); the products stay below 2^63)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def row_uniforms(row_seeds: torch.Tensor, length: int) -> torch.Tensor:
    """[B] int64 seeds -> [B, length] float64 in [0, 1): a counter-based hash of (seed, position), the same on
    every device and whatever else is in the batch."""
    positions = torch.arange(length, device=row_seeds.device, dtype=torch.int64)
    seeds = row_seeds.to(torch.int64)
    seed32 = _hash32(_hash32(seeds & _MASK32) ^ ((seeds >> 32) & _MASK32))  # both halves of a 63-bit seed
    mixed = _hash32(seed32[:, None] ^ (positions[None, :] * 0x9E3779B1 & _MASK32))
    return mixed.to(torch.float64) / 2.0 ** 32


def sample_factorisation_order(attention_mask: torch.Tensor, generator: torch.Generator | None = None,
                               row_seeds: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] (1 real / 0 pad) -> rank [B, T]: position of each token in its sequence's factorisation order,
    a uniform random permutation of 0..n-1 over the n real tokens; padding gets ranks n..T-1 (after all real
    tokens). With `row_seeds` [B] (the loader's, training/data.py) each row's order is a function of its seed
    alone, so a row gets the same order whichever process, batch size or micro-batch trains it; otherwise drawn
    on the CPU from `generator` (default: torch's global RNG). Either way reproducible whatever the device."""
    b, t = attention_mask.shape
    if row_seeds is not None:
        keys = row_uniforms(row_seeds, t).to(attention_mask.device)
    else:
        keys = torch.rand(b, t, generator=generator).to(attention_mask.device)
    keys = keys.masked_fill(attention_mask == 0, 2.0)  # padding sorts last
    order = keys.argsort(dim=1, stable=True)  # order[b, r] = position with rank r
    rank = torch.empty_like(order)
    return rank.scatter_(1, order, torch.arange(t, device=order.device).expand(b, t).contiguous())


def permutation_masks(rank: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(content, query) visibility [B, T, T] bool, [b, i, j] True where i may attend to j: content iff j is real
    and rank(j) <= rank(i); query iff j is real and rank(j) < rank(i)."""
    real_key = attention_mask.to(torch.bool)[:, None, :]
    earlier_or_self = rank[:, None, :] <= rank[:, :, None]
    earlier = rank[:, None, :] < rank[:, :, None]
    return earlier_or_self & real_key, earlier & real_key


def prediction_targets(input_ids: torch.Tensor, rank: torch.Tensor, attention_mask: torch.Tensor,
                       predict_fraction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The last max(1, n // K) real tokens of each order: (positions [B, P], labels [B, P]) with
    P = max(1, T // K) (a static size, so no device sync); unused slots have label -100. Targets are listed in
    sequence order."""
    b, t = input_ids.shape
    n_real = attention_mask.sum(dim=1, keepdim=True)
    n_pred = (n_real // predict_fraction).clamp(min=1)
    is_target = (rank >= n_real - n_pred) & attention_mask.to(torch.bool)
    p = max(1, t // predict_fraction)
    positions = (~is_target).to(torch.int8).argsort(dim=1, stable=True)[:, :p]  # targets first, in sequence order
    labels = input_ids.gather(1, positions).masked_fill(~is_target.gather(1, positions), IGNORE_INDEX)
    return positions, labels


def _segment_differs(token_type_ids: torch.Tensor, mlen: int) -> torch.Tensor:
    """[B, T, M + T] bool: query segment != key segment; memory counts as segment 0 (as in XLNet)."""
    keys = token_type_ids
    if mlen:
        keys = torch.cat([token_type_ids.new_zeros(token_type_ids.shape[0], mlen), token_type_ids], 1)
    return token_type_ids[:, :, None] != keys[:, None, :]


def _with_memory_columns(allowed: torch.Tensor, mlen: int, mem_valid: torch.Tensor | None = None) -> torch.Tensor:
    """Every query may attend to every (valid: mem_valid [B, M], default all) memory state."""
    if not mlen:
        return allowed
    columns = allowed.new_ones(*allowed.shape[:-1], mlen)
    if mem_valid is not None:
        columns = columns & mem_valid[:, None, :]
    return torch.cat([columns, allowed], dim=-1)


# ---------------------------------------------------------------------------------------------------- models


class XLNetModel(nn.Module):
    """The XLNet transformer: word embeddings (no absolute positions), relative-attention layers with segment
    encodings, the query stream's learned initial state `mask_emb` (w), and a [CLS] pooler for sentence-level
    fine-tuning (no pretraining loss trains it). `forward` is the encoder interface of BertModel."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.mask_emb = nn.Parameter(torch.zeros(config.hidden_size))
        self.layer = nn.ModuleList(
            RelativeTransformerLayer(config.hidden_size, config.num_heads, config.intermediate_size, config.dropout,
                                     config.attention_dropout, config.layer_norm_eps, segments=True)
            for _ in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.pooler = Pooler(config.hidden_size)
        init_bert_weights(self, config.initializer_range)
        init_relative_weights(self, config.initializer_range)
        nn.init.normal_(self.mask_emb, mean=0.0, std=config.initializer_range)

    def _positions(self, geometry: RelativeGeometry, device: torch.device) -> torch.Tensor:
        return self.dropout(sinusoid_embeddings(geometry.distances(device), self.config.hidden_size))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False):
        """Content stream only, plain bidirectional attention over the real tokens: [B, T] -> last hidden
        [B, T, H]; with output_hidden_states, (last, (embeddings, layer 1, ..., layer N))."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        t = input_ids.shape[1]
        allowed = attention_mask.to(torch.bool)[:, None, :].expand(-1, t, -1)
        geometry = shift_geometry(allowed, causal=False, segment_differs=_segment_differs(token_type_ids, 0))
        positions = self._positions(geometry, input_ids.device)
        h = self.dropout(self.word_embeddings(input_ids))
        states = [h]
        for layer in self.layer:
            (h,) = layer([(h, geometry)], h, positions)
            states.append(h)
        if output_hidden_states:
            return h, tuple(states)
        return h

    def two_stream(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                   rank: torch.Tensor, target_positions: torch.Tensor, mems: list[torch.Tensor] | None = None,
                   mem_valid: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor] | None]:
        """Both streams for factorisation order `rank` [B, T]: (content stream h [B, T, H], query stream g at
        `target_positions` [B, P, H], new_mems: per layer the last mem_len content-stream inputs, detached, or
        None when mem_len is 0). mems: per layer [B, M, H] states of the previous segment, visible to every
        query, segment 0 (XLNet's convention); pass unpadded continuous text when carrying memory. mem_valid
        [B, M] bool: the memory states that may be attended to (False: masked out, e.g. a stream that restarts)."""
        b, t = input_ids.shape
        mlen = mems[0].shape[1] if mems else 0
        content, query = permutation_masks(rank, attention_mask)
        differs = _segment_differs(token_type_ids, mlen)
        content_geometry = shift_geometry(_with_memory_columns(content, mlen, mem_valid), causal=False,
                                          segment_differs=differs)
        rows = target_positions[:, :, None].expand(-1, -1, mlen + t)  # the query stream exists at the targets only
        query_geometry = gather_geometry(_with_memory_columns(query, mlen, mem_valid).gather(1, rows), target_positions + mlen, t,
                                         differs.gather(1, rows))
        positions = self._positions(content_geometry, input_ids.device)
        h = self.dropout(self.word_embeddings(input_ids))
        g = self.dropout(self.mask_emb.to(h.dtype).expand(b, target_positions.shape[1], -1))
        new_mems: list[torch.Tensor] | None = [] if self.config.mem_len > 0 else None
        for i, layer in enumerate(self.layer):
            memory = mems[i] if mems else None
            if new_mems is not None:
                new_mems.append(update_memory(memory, h, self.config.mem_len))
            h, g = layer([(h, content_geometry), (g, query_geometry)], with_memory(memory, h), positions)
        return h, g, new_mems


class XLNetForPreTraining(nn.Module):
    """XLNet with the permutation-LM head: tied word embeddings + an output bias, applied at the targets only."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.config = config
        self.transformer = XLNetModel(config)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, mems: list[torch.Tensor] | None = None,
                perm_seed: int | None = None, generator: torch.Generator | None = None,
                rank: torch.Tensor | None = None, row_seeds: torch.Tensor | None = None,
                mem_valid: torch.Tensor | None = None, stream_slots: torch.Tensor | None = None,
                stream_continues: torch.Tensor | None = None) -> dict[str, Any]:
        """input_ids: ORIGINAL tokens [B, T] (no [MASK]s). The order comes from `rank` if given, else is drawn
        from per-row `row_seeds` [B], `generator`, a fresh one seeded with `perm_seed`, or torch's global RNG.
        mems / mem_valid: an explicit memory (per layer [B, M, H]) and which of its states are real.
        stream_slots / stream_continues [B] (the stream loader, training/streams.py; needs mem_len > 0): the memory
        is the one the slot's previous row left (reset where continues is 0), and this row's memory is kept for
        the slot's next row (training/models/core/stream_memory.py). Returns loss (= plm_loss,
        mean cross-entropy over the targets), plm_loss, plm_correct, plm_count (scalar tensors), plm_logits
        [B * P, V] (rows of unused target slots included, their labels are plm_labels == -100), plm_labels
        [B * P], and new_mems (None unless mem_len > 0)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if rank is None:
            if generator is None and perm_seed is not None:
                generator = torch.Generator().manual_seed(perm_seed)
            rank = sample_factorisation_order(attention_mask, generator, row_seeds)
        positions, labels = prediction_targets(input_ids, rank, attention_mask, self.config.predict_fraction)
        carried = stream_slots is not None and self.config.mem_len > 0
        if carried:
            if stream_continues is None:
                raise ValueError("stream_slots without stream_continues: which rows continue their slot's stream?")
            mems, mem_valid = memory_of(self).read(stream_slots, stream_continues, input_ids.device,
                                                   self.transformer.word_embeddings.weight.dtype)
        _, g, new_mems = self.transformer.two_stream(input_ids, token_type_ids, attention_mask, rank, positions, mems,
                                                     mem_valid)
        if carried:  # which kept states are real tokens (padding never is): the memory's then this row's
            real = attention_mask.to(torch.bool)
            joined = real if mem_valid is None else torch.cat([mem_valid, real], dim=1)
            memory_of(self).write(stream_slots, new_mems, joined[:, -self.config.mem_len:])
        g = self.transformer.dropout(g)
        logits = F.linear(g.reshape(-1, g.shape[-1]), self.transformer.word_embeddings.weight, self.lm_bias)
        labels = labels.reshape(-1)
        loss, correct, count = summed_token_loss(logits, labels, IGNORE_INDEX)
        return {"loss": loss, "plm_loss": loss, "plm_correct": correct, "plm_count": count,
                "plm_logits": logits, "plm_labels": labels, "new_mems": new_mems}

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Fine-tuning path: content stream only (no query stream, no permutation) -> last hidden [B, T, H]."""
        return self.transformer(input_ids, token_type_ids, attention_mask)

    def backbone(self) -> XLNetModel:
        return self.transformer

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def untrained_parameter_names(self) -> list[str]:
        """The [CLS] pooler (fine-tuning's): the permutation LM never reads it (see training/models/core/architecture.py)."""
        return [name for name, _ in self.named_parameters() if name.startswith("transformer.pooler.")]


def _from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> XLNetConfig:
    return relative_config_from_model_config(XLNetConfig, model_cfg, vocab_size, pad_token_id, "XLNet", "xlnet")


ARCHITECTURE = Architecture(
    name="XLNetForPreTraining",
    config_from_dict=XLNetConfig.from_dict,
    build=XLNetForPreTraining,
    from_model_config=_from_model_config,
    description="XLNet: permutation LM with two-stream relative attention; the content stream is the backbone",
    settings=MEMBER.settings,
)
