"""Unpadded ("varlen") encoding of padded batches: the encoder runs on the real tokens only.

A batch [B, T] with attention_mask (1 real / 0 pad) holds N <= B*T real tokens. The unpadded path gathers them
into one packed sequence [N] (row-major: sequence 0's real tokens, then sequence 1's, ...), runs the embeddings,
every LayerNorm, the feed-forward blocks and all projections on [N, H], and attends per sequence through
`cu_seqlens` (offsets of each sequence in the packed order), so no FLOP is spent on padding outside attention.

    out = bert(input_ids, token_type_ids, attention_mask, unpad=True)        # BertModel: [B, T, H], 0 on padding
    out = model(**batch, unpad=True)                                          # BertForPreTraining: same dict

Attention (`varlen_attention`):
- CUDA, fp16/bf16 inputs (bf16 autocast), no attention dropout in effect (eval mode or attention_dropout 0),
  head_dim a multiple of 8 and <= 256, compute capability >= 8.0: `torch.nn.attention.varlen.varlen_attn` (the
  FlashAttention varlen kernel, imported lazily; it has no dropout argument, hence the dropout condition).
- otherwise (CPU, fp32, attention dropout during training): the exact reference. The packed q/k/v are scattered
  back into the [B, T] grid and attended with SDPA under the padding mask: the padded path's own attention
  arithmetic, so only the attention itself still pays for padding.

Two layouts (`PackedSequences`), the same attention on the real tokens:
- packed (`from_attention_mask`, pretrain.unpad_layout packed): N real tokens, no FLOP on padding. Building it needs
  the number of real tokens and the longest sequence on the host: one device->host read per forward, as in every
  unpadding implementation, and the packed shapes change with the batch.
- fixed (`fixed_rows`, pretrain.unpad_layout fixed): every [B, T] slot kept, in row-major order, and each row's
  padding declared a sequence of its own (cu_seqlens [2B + 1]: row b's real tokens, then its padding, possibly
  empty). Attention is still the varlen kernel, with no mask and with ModernBERT's window, but the projections and
  feed-forward blocks run on the padding too. In exchange every shape depends on [B, T] alone and nothing is read
  on the host: the step compiles into one graph and can be replayed as a CUDA graph (pretrain.compile_mode
  reduce-overhead). It needs each row's real tokens first (padding at the end, as the loader pads). Padding rows
  carry finite values that no loss reads.

Equivalence: on real tokens the outputs (and gradients) equal the padded path's up to float rounding. Dropout
masks are drawn over [N, ...] (or [B*T, ...]) instead of [B, T, ...], so with dropout on, the paths draw different
masks (equal in distribution, not in value).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PackedSequences:
    """Where the real tokens of a [B, T] batch sit in the packed order, and how to attend among them."""

    indices: torch.Tensor  # [N] int64: flat index (row-major over [B, T]) of each real token, in packed order
    cu_seqlens: torch.Tensor  # [B + 1] int32: sequence b is packed rows cu_seqlens[b] : cu_seqlens[b + 1]
    max_seqlen: int  # real tokens in the longest sequence
    real: torch.Tensor  # [B, T] bool: the attention mask (for the reference attention)
    causal: bool = False  # each token attends only to itself and the earlier real tokens of its sequence
    # sliding-window (local) attention: a token attends only to tokens at most this many columns away (ModernBERT's
    # local layers: local_attention // 2); the kernel counts the distance in packed rows, which is the same for a
    # sequence whose real tokens are contiguous (padding at the end, as the loader pads)
    window: int | None = None
    # the fixed layout (`fixed_rows`): packed row i is slot i of the [B, T] grid, padding included
    fixed: bool = False

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor, causal: bool = False,
                            fixed: bool = False) -> "PackedSequences":
        """attention_mask [B, T] (1 = real, 0 = padding; padding may sit anywhere, positions keep their column).
        `fixed`: the fixed layout (`fixed_rows`) instead of the real tokens alone."""
        if fixed:
            return cls.fixed_rows(attention_mask, causal)
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask must be [B, T], got shape {tuple(attention_mask.shape)}")
        real = attention_mask.to(torch.bool)
        lengths = real.sum(1, dtype=torch.int32)
        indices = real.reshape(-1).nonzero().squeeze(1)
        cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        max_seqlen = int(lengths.max()) if lengths.numel() else 0
        return cls(indices, cu_seqlens, max_seqlen, real, causal)

    @classmethod
    def fixed_rows(cls, attention_mask: torch.Tensor, causal: bool = False) -> "PackedSequences":
        """The fixed layout of attention_mask [B, T], whose rows hold their real tokens first (padding at the end):
        all B*T slots in row-major order; sequence 2b is row b's real tokens, sequence 2b + 1 its padding (empty
        for a full row), so cu_seqlens = [0, len_0, T, T + len_1, 2T, ..., B*T]. Built on the device from the
        mask alone: no host read, and shapes that depend only on [B, T]. The real-tokens-first condition is not
        checked here (that would read the mask on the host); the trainer checks its batches on the host."""
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask must be [B, T], got shape {tuple(attention_mask.shape)}")
        real = attention_mask.to(torch.bool)
        b, t = real.shape
        starts = torch.arange(b, dtype=torch.int32, device=real.device) * t
        bounds = torch.stack([starts, starts + real.sum(1, dtype=torch.int32)], 1).reshape(-1)
        cu_seqlens = torch.cat([bounds, bounds.new_full((1,), b * t)])
        indices = torch.arange(b * t, device=real.device)
        return cls(indices, cu_seqlens, t, real, causal, fixed=True)

    @property
    def batch_size(self) -> int:
        return self.real.shape[0]

    @property
    def seq_len(self) -> int:
        return self.real.shape[1]

    @property
    def num_tokens(self) -> int:
        return self.indices.numel()

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> [N, ...]: the real tokens (every slot in the fixed layout)."""
        flat = x.reshape(self.batch_size * self.seq_len, *x.shape[2:])
        return flat if self.fixed else flat.index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [B, T, ...] with zeros on padding (differentiable)."""
        if self.fixed:
            real = self.real.reshape(-1, *(1,) * (x.dim() - 1))
            return x.masked_fill(~real, 0).view(self.batch_size, self.seq_len, *x.shape[1:])
        grid = x.new_zeros(self.batch_size * self.seq_len, *x.shape[1:]).index_copy(0, self.indices, x)
        return grid.view(self.batch_size, self.seq_len, *x.shape[1:])

    def packed_index(self, positions: torch.Tensor) -> torch.Tensor:
        """Column positions [B, P] -> their rows in the packed order [B, P] (-1 where the position is padding; in
        the fixed layout a padding position has a row of its own)."""
        b, t = self.real.shape
        offsets = torch.arange(b, device=positions.device)[:, None] * t
        if self.fixed:
            return positions + offsets
        grid = torch.full((b * t,), -1, dtype=torch.long, device=self.indices.device)
        grid[self.indices] = torch.arange(self.num_tokens, device=self.indices.device)
        return grid[positions + offsets]

    def gather(self, packed: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Packed rows [N, H] at column positions [B, P] -> [B, P, H] (a padding position is an index error)."""
        rows = self.packed_index(positions)
        return packed.index_select(0, rows.reshape(-1)).view(*rows.shape, *packed.shape[1:])

    def key_mask(self) -> torch.Tensor:
        """Boolean [B, 1, 1 or T, T]: True where a query may attend to a key (the padded path's mask)."""
        mask = self.real[:, None, None, :]
        if self.causal:
            t = self.seq_len
            mask = mask & torch.ones(t, t, dtype=torch.bool, device=mask.device).tril()
        if self.window is not None:
            mask = mask & sliding_window_band(self.real, self.window)
        return mask


def sliding_window_band(real: torch.Tensor, window: int) -> torch.Tensor:
    """Boolean [B, 1, T, T] for real [B, T]: True where the key is at most `window` columns from the query. A
    padding query keeps every key (its output is never read), so that no query row is left without a key: a row
    with none makes softmax NaN, and NaN times a zero weight still reaches the real tokens' gradients."""
    t = real.shape[1]
    columns = torch.arange(t, device=real.device)
    band = (columns[:, None] - columns[None, :]).abs() <= window
    return band[None, None] | ~real[:, None, :, None]


def _use_varlen_kernel(q: torch.Tensor, dropout_p: float) -> bool:
    head_dim = q.shape[-1]
    return (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0
            and head_dim % 8 == 0 and head_dim <= 256 and torch.cuda.get_device_capability(q.device) >= (8, 0))


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: PackedSequences,
                        dropout_p: float) -> torch.Tensor:
    """Exact attention for packed q/k/v [N, heads, d]: SDPA over the re-padded [B, heads, T, d] tensors."""
    def grid(x: torch.Tensor) -> torch.Tensor:  # the fixed layout is the grid already (padding masked as keys)
        rows = x.view(layout.batch_size, layout.seq_len, *x.shape[1:]) if layout.fixed else layout.unpack(x)
        return rows.transpose(1, 2)

    context = F.scaled_dot_product_attention(grid(q), grid(k), grid(v), attn_mask=layout.key_mask(),
                                             dropout_p=dropout_p)
    return layout.pack(context.transpose(1, 2))


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: PackedSequences,
                     dropout_p: float) -> torch.Tensor:
    """q, k, v [N, heads, d] in the packed order -> context [N, heads, d]; each token attends to the real tokens
    of its own sequence (see the module docstring for which kernel runs)."""
    if _use_varlen_kernel(q, dropout_p):
        from torch.nn.attention.varlen import varlen_attn

        cu = layout.cu_seqlens.to(q.device)
        left = layout.window if layout.window is not None else -1
        return varlen_attn(q, k, v, cu, cu, layout.max_seqlen, layout.max_seqlen,
                           window_size=(left, 0 if layout.causal else left))
    return reference_attention(q, k, v, layout, dropout_p)


def encode_unpadded(bert: torch.nn.Module, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                    attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                    language_ids: torch.Tensor | None = None, causal: bool = False, fixed: bool = False):
    """Run a BertModel on the real tokens only -> (packed outputs [embeddings, layer 1, ..., layer N], each
    [N, H], and the layout; `fixed`: the fixed layout). Positions are the tokens' columns in the [B, T] batch, as
    in the padded path."""
    layout = PackedSequences.from_attention_mask(attention_mask, causal, fixed)
    b, t = input_ids.shape
    if position_ids is None:
        limit = bert.embeddings.position_embeddings.num_embeddings
        if t > limit:
            raise ValueError(f"sequence length {t} exceeds max_position_embeddings {limit}")
        position_ids = torch.arange(t, device=input_ids.device).expand(b, t)

    def packed_row(ids: torch.Tensor | None) -> torch.Tensor | None:  # [B, T] -> [1, N] for BertEmbeddings
        return None if ids is None else layout.pack(ids)[None]

    embedded = bert.embeddings(packed_row(input_ids), packed_row(token_type_ids), packed_row(position_ids),
                               packed_row(language_ids))[0]
    if hasattr(bert, "embeddings_project"):
        embedded = bert.embeddings_project(embedded)
    layers = bert.encoder(embedded, mask=layout)
    return [embedded, *layers], layout


def gather_masked_packed(packed: torch.Tensor, layout: PackedSequences, masked_positions: torch.Tensor,
                         masked_labels: torch.Tensor, ignore_index: int = -100):
    """`gather_masked` for packed hidden states [N, H]: (hidden at the real masked positions [M, H], their labels
    [M]), in the same row-major (batch, then position) order."""
    real = masked_labels != ignore_index
    return packed.index_select(0, layout.packed_index(masked_positions)[real]), masked_labels[real]


def gather_masked_packed_fixed(packed: torch.Tensor, layout: PackedSequences, masked_positions: torch.Tensor,
                               masked_labels: torch.Tensor):
    """Static-shape `gather_masked_packed` (pretrain.static_shapes with pretrain.unpad): the packed rows at all
    B * P prediction slots [B*P, H] and their labels [B*P], `ignore_index` on padding slots. A padding slot whose
    position is itself padding reads packed row 0 and is ignored by the loss. No boolean indexing: the head's shapes
    depend only on [B, P], so the compiled step keeps the head and loss in one graph and does not wait for the
    device there (the packed layout itself still reads the token count, the fixed layout nothing: see
    PackedSequences)."""
    rows = layout.packed_index(masked_positions).clamp(min=0)
    return packed.index_select(0, rows.reshape(-1)), masked_labels.reshape(-1)
