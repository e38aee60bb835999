"""Relative multi-head attention shared by Transformer-XL and XLNet: sinusoidal relative positions with a content
bias u and a position bias v (Dai et al. 2019, section 3.3), an optional memory of the previous segment (hidden
states, stop-gradient, prepended to the keys/values), and XLNet's relative segment encodings (Yang et al. 2019,
section 2.5: one learned vector for "same segment", one for "different segment", scored against query + bias).

For query i and key j the attention score is, per head, with W_k,R the position projection:

    ( (q_i + u) . k_j  +  (q_i + v) . W_k,R R[d_ij]  +  (q_i + b) . s_ij ) / sqrt(d_head),   d_ij = pos(i) - pos(j)

How it is computed (no loops over positions): the position term is one batched matmul of every query against
the table of all needed distances ([B, N, Q, R]); the score for each (i, j) is then read out of it either by a
strided view (the "rel_shift" trick without its copy; queries are the consecutive last Q keys) or by a gather
(queries at arbitrary positions, e.g. XLNet's query stream at the prediction targets). Position and segment
terms plus the visibility mask form one additive bias for `scaled_dot_product_attention`, which computes the
content term, softmax, dropout and the weighted sum (a fused kernel on GPUs). Everything that depends only on the
batch (visibility, segment equality, gather indices, the distance table) is built once per batch in a
`RelativeGeometry` and shared by all layers.

    geometry = shift_geometry(allowed, causal=True)                 # allowed: [B|1, Q, K] bool
    positions = sinusoid_embeddings(geometry.distances(device), hidden_size)
    layer = RelativeTransformerLayer(hidden_size, num_heads, intermediate_size, 0.1, 0.1, 1e-12, segments=False)
    (out,) = layer([(hidden, geometry)], with_memory(memory, hidden), positions)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .attention import ResidualOutput
from .encoder import Intermediate


# ----------------------------------------------------------------------------------------- positions and memory


def relative_distances(klen: int, qlen: int, causal: bool, device: torch.device | None = None) -> torch.Tensor:
    """The distance table [R] (float32) for Q = qlen queries that are the last of K = klen keys: descending from
    klen to 0 (causal, R = klen + 1) or to -(qlen - 1) (bidirectional, R = klen + qlen). Entry 0 (distance klen)
    is never attended to; it makes the strided read-out of `RelativeGeometry.relative_scores` exact."""
    count = klen + 1 if causal else klen + qlen
    return torch.arange(klen, klen - count, -1, device=device, dtype=torch.float32)


def sinusoid_embeddings(distances: torch.Tensor, dim: int) -> torch.Tensor:
    """[R] distances -> [R, dim] = [sin(d * f), cos(d * f)] with f_k = 1 / 10000^(2k / dim) (Transformer-XL)."""
    if dim % 2:
        raise ValueError(f"sinusoidal relative embeddings need an even size, got {dim}")
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=distances.device, dtype=torch.float32) / dim))
    angles = distances.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def with_memory(memory: torch.Tensor | None, hidden: torch.Tensor) -> torch.Tensor:
    """Keys/values input: the memory (detached, so no gradient ever reaches the previous segment) then `hidden`."""
    if memory is None:
        return hidden
    return torch.cat([memory.detach().to(hidden.dtype), hidden], dim=1)


def update_memory(memory: torch.Tensor | None, hidden: torch.Tensor, mem_len: int) -> torch.Tensor | None:
    """The next segment's memory: the last `mem_len` states of (memory, hidden), detached; None for mem_len 0."""
    if mem_len <= 0:
        return None
    joined = hidden.detach() if memory is None else torch.cat([memory.detach().to(hidden.dtype), hidden.detach()], 1)
    return joined[:, -mem_len:]


# ----------------------------------------------------------------------------------------- per-batch geometry


@dataclass
class RelativeGeometry:
    """Who sees whom and at which distance, for one batch; shared by every layer.

    allowed [B|1, 1, Q, K] bool (True = query may attend to key); empty_rows [B|1, 1, Q, 1] (queries that see no
    key get a zero context instead of attending uniformly, which would leak what they must not see);
    segment_differs [B|1, 1, Q, K] bool or None; relative_index [B|1, 1, Q, K] (gather read-out: column of the
    distance table, which starts at distance K) or None for the strided read-out, where queries are the last Q
    keys; num_distances: the length of the distance table this geometry needs (`distances()`)."""

    allowed: torch.Tensor
    empty_rows: torch.Tensor
    segment_differs: torch.Tensor | None
    relative_index: torch.Tensor | None
    num_distances: int
    causal: bool
    _bias_cache: dict[torch.dtype, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def klen(self) -> int:
        return self.allowed.shape[-1]

    @property
    def qlen(self) -> int:
        return self.allowed.shape[-2]

    def distances(self, device: torch.device | None = None) -> torch.Tensor:
        """The distance table [num_distances], descending from K."""
        if self.causal:
            return relative_distances(self.klen, 0, True, device)
        return relative_distances(self.klen, self.num_distances - self.klen, False, device)

    def mask_bias(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask (0 / a large negative that stays finite when added to a score, so no row becomes NaN)."""
        if dtype not in self._bias_cache:
            blocked = torch.finfo(dtype).min / 2
            self._bias_cache[dtype] = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device
                                                  ).masked_fill_(~self.allowed, blocked)
        return self._bias_cache[dtype]

    def relative_scores(self, by_distance: torch.Tensor) -> torch.Tensor:
        """[B, N, Q, R] scores of every query against the distance table -> [B, N, Q, K] score of query i against
        key j at their distance."""
        b, n, q, r = by_distance.shape
        k = self.klen
        if r < self.num_distances:
            raise ValueError(f"distance table has {r} entries, this geometry needs {self.num_distances}")
        if self.relative_index is not None:
            return by_distance.gather(-1, self.relative_index.expand(b, n, q, k))
        # Query i (key position K - Q + i) at key j has distance K - Q + i - j, table column Q - i + j: in the
        # row-major buffer that is offset i * R + Q - i + j = Q + i * (R - 1) + j, a strided view (rows do not
        # overlap since R - 1 >= K). Entries of non-allowed pairs read neighbouring cells; the mask drops them.
        by_distance = by_distance.contiguous()
        sb, sn = by_distance.stride()[:2]
        return by_distance.as_strided((b, n, q, k), (sb, sn, r - 1, 1), by_distance.storage_offset() + q)


def _geometry(allowed: torch.Tensor, segment_differs: torch.Tensor | None, relative_index: torch.Tensor | None,
              num_distances: int, causal: bool) -> RelativeGeometry:
    allowed = allowed[:, None]
    return RelativeGeometry(
        allowed=allowed,
        empty_rows=~allowed.any(dim=-1, keepdim=True),
        segment_differs=None if segment_differs is None else segment_differs[:, None],
        relative_index=relative_index,
        num_distances=num_distances,
        causal=causal,
    )


def shift_geometry(allowed: torch.Tensor, causal: bool, segment_differs: torch.Tensor | None = None
                   ) -> RelativeGeometry:
    """Queries are the last Q of the K keys (keys = memory, then the queries' own segment). allowed and
    segment_differs: [B|1, Q, K] bool. `causal` promises that no query is allowed a key after itself, which
    halves the distance table (K + 1 entries instead of K + Q)."""
    q, k = allowed.shape[-2:]
    if q > k:
        raise ValueError(f"{q} queries cannot be the last queries of {k} keys")
    return _geometry(allowed, segment_differs, None, k + 1 if causal else k + q, causal)


def gather_geometry(allowed: torch.Tensor, query_positions: torch.Tensor, qlen: int,
                    segment_differs: torch.Tensor | None = None) -> RelativeGeometry:
    """Queries at arbitrary key positions. allowed, segment_differs: [B, P, K] bool; query_positions [B, P]: the
    key index each query sits at (in [K - qlen, K)); qlen: length of the current segment, so that the distance
    table is the bidirectional one of `shift_geometry(..., causal=False)` over the same keys (one table serves
    both)."""
    k = allowed.shape[-1]
    index = k - query_positions[:, :, None] + torch.arange(k, device=allowed.device)[None, None, :]
    return _geometry(allowed, segment_differs, index[:, None], k + qlen, False)


# -------------------------------------------------------------------------------------------------- modules


@dataclass
class ProjectedKeys:
    """What all query streams of one layer share: key/value heads [B, N, K, d], position keys [N, d, R]."""

    key: torch.Tensor
    value: torch.Tensor
    positions: torch.Tensor


class RelativeMultiHeadAttention(nn.Module):
    """Projections without bias (a key bias would get no gradient, a query bias duplicates u and v), the
    per-head biases u (`content_bias`), v (`position_bias`) and, with `segments`, XLNet's b (`segment_bias`) and
    segment vectors s_same / s_diff (`segment_embeddings` [2, N, d], index 0 = same segment)."""

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float, segments: bool):
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.dropout = attention_dropout
        self.query = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key = nn.Linear(hidden_size, hidden_size, bias=False)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        self.position = nn.Linear(hidden_size, hidden_size, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.position_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim))
        self.segment_bias = nn.Parameter(torch.zeros(num_heads, self.head_dim)) if segments else None
        self.segment_embeddings = nn.Parameter(torch.zeros(2, num_heads, self.head_dim)) if segments else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def project_keys(self, keys: torch.Tensor, positions: torch.Tensor) -> ProjectedKeys:
        """keys [B, K, H] (memory + segment), positions [R, H] (embedded distance table)."""
        r = self.position(positions).view(-1, self.num_heads, self.head_dim).permute(1, 2, 0)
        return ProjectedKeys(self._heads(self.key(keys)), self._heads(self.value(keys)), r)

    def attend(self, queries: torch.Tensor, keys: ProjectedKeys, geometry: RelativeGeometry) -> torch.Tensor:
        """queries [B, Q, H] -> context [B, Q, H] (before the output projection)."""
        b, q_len, _ = queries.shape
        q = self._heads(self.query(queries))
        dtype = q.dtype
        scale = self.head_dim ** -0.5
        # SDPA scales only its own q.k term, so the bias terms are scaled here (on the small query side)
        by_distance = torch.matmul((q + self.position_bias.to(dtype)[:, None]) * scale, keys.positions.to(dtype))
        bias = geometry.relative_scores(by_distance)
        if self.segment_embeddings is not None:
            if geometry.segment_differs is None:
                raise ValueError("this attention uses segment encodings; the geometry has no segment_differs")
            by_segment = torch.matmul((q + self.segment_bias.to(dtype)[:, None]) * scale,
                                      self.segment_embeddings.to(dtype).permute(1, 2, 0))  # [B, N, Q, 2]
            bias = bias + torch.where(geometry.segment_differs, by_segment[..., 1:], by_segment[..., :1])
        bias = bias + geometry.mask_bias(dtype)
        context = F.scaled_dot_product_attention(
            q + self.content_bias.to(dtype)[:, None], keys.key, keys.value, attn_mask=bias,
            dropout_p=self.dropout if self.training else 0.0,
        )
        context = context.masked_fill(geometry.empty_rows, 0.0)
        return context.transpose(1, 2).reshape(b, q_len, self.num_heads * self.head_dim)


class RelativeTransformerLayer(nn.Module):
    """Post-LN layer: relative attention -> output projection + residual + LayerNorm -> GELU FFN + residual +
    LayerNorm. Several query streams (XLNet's content and query streams) share the keys and every weight."""

    def __init__(self, hidden_size: int, num_heads: int, intermediate_size: int, dropout: float,
                 attention_dropout: float, layer_norm_eps: float, segments: bool):
        super().__init__()
        self.attention = RelativeMultiHeadAttention(hidden_size, num_heads, attention_dropout, segments)
        # no bias on the attention output projection, as the XLNet and Transformer-XL reference code (`o`, `o_net`)
        self.attention_output = ResidualOutput(hidden_size, hidden_size, dropout, layer_norm_eps, bias=False)
        self.intermediate = Intermediate(hidden_size, intermediate_size)
        self.output = ResidualOutput(intermediate_size, hidden_size, dropout, layer_norm_eps)

    def forward(self, streams: Sequence[tuple[torch.Tensor, RelativeGeometry]], keys: torch.Tensor,
                positions: torch.Tensor) -> list[torch.Tensor]:
        """streams: (queries [B, Q_s, H], geometry) per stream; keys [B, K, H] (see `with_memory`); positions
        [R, H]. Returns the new state of each stream."""
        projected = self.attention.project_keys(keys, positions)
        contexts = [self.attention.attend(x, projected, geometry) for x, geometry in streams]
        if len(streams) == 1:
            attended = self.attention_output(contexts[0], streams[0][0])
            return [self.output(self.intermediate(attended), attended)]
        # the position-wise part is shared: one pass over the streams side by side
        lengths = [x.shape[1] for x, _ in streams]
        attended = self.attention_output(torch.cat(contexts, 1), torch.cat([x for x, _ in streams], 1))
        return list(self.output(self.intermediate(attended), attended).split(lengths, dim=1))


def init_relative_weights(module: nn.Module, std: float) -> None:
    """N(0, std) for the relative-attention biases and segment vectors (Linear/Embedding/LayerNorm are left to
    `init_bert_weights`)."""
    for m in module.modules():
        if isinstance(m, RelativeMultiHeadAttention):
            for p in (m.content_bias, m.position_bias, m.segment_bias, m.segment_embeddings):
                if p is not None:
                    nn.init.normal_(p, mean=0.0, std=std)
