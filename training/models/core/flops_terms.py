"""The FLOPs of the parts the members share, per row, without torch: the pieces the members' `flops_terms`
(training/models/<member>/settings.py, `Member.flops`) add up, and training/flops.py divides by the row's length
(what is counted, and the formulas: training/flops.py's docstring).
"""

from __future__ import annotations

from typing import Any


def window_pairs(s: float, window: int) -> float:
    """(query, key) pairs of a row of s tokens where a query sees the keys at most `window` positions away on either
    side (itself included): s + 2 sum_i min(i, window), which is s^2 once the window spans the row."""
    before = s * (s - 1) / 2 if s - 1 <= window else window * (window + 1) / 2 + (s - 1 - window) * window
    return s + 2 * before


def bert_encoder(c: Any, s: float) -> float:
    """Forward FLOPs of one row through BertModel (E -> H projection + L dense layers)."""
    h, e = c.hidden_size, c.embedding_width
    projection = 2 * s * e * h if e != h else 0.0
    return projection + c.num_layers * (2 * s * (4 * h * h + 2 * h * c.intermediate_size) + 4 * s * s * h)


def lm_head(c: Any, predicted: float) -> float:
    """MaskedLMHead at `predicted` positions: dense H -> E, tied decoder E -> V."""
    return predicted * (2 * c.hidden_size * c.embedding_width + 2 * c.embedding_width * c.vocab_size)


def relative_stream(c: Any, q: float, k: float, r: float, segments: bool) -> float:
    """One query stream of a relative layer, without the key/value and table projections (shared by streams)."""
    h = c.hidden_size
    return (4 * q * h * h + 4 * q * h * c.intermediate_size + 4 * q * k * h + 2 * q * r * h
            + (4 * q * h if segments else 0.0))
