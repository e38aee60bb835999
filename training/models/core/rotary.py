"""Rotary position embeddings (RoPE; Su et al. 2021), as ModernBERT uses them: each query and key vector of a head
is rotated by angles proportional to its token's position, so attention scores depend on relative positions only.
No parameters: the angles follow from the position, the head width d and a base θ (ModernBERT: θ 160,000 in its
global layers, 10,000 in its local ones).

    cos, sin = rotary_angles(positions, head_dim=64, theta=10_000.0)   # positions [..., T] -> [..., T, d] each
    q = apply_rotary(q, cos[:, None], sin[:, None])                    # q [B, heads, T, d]

The arithmetic is transformers' (modeling_modernbert.py: `inv_freq = 1 / θ^(2i/d)`, the angles concatenated with
themselves, `rotate_half` pairing dimension i with i + d/2, the rotation done in float32), so exported models agree
to float rounding.
"""

from __future__ import annotations

import torch


def rotary_angles(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (any integer shape [...]) -> (cos, sin), each [..., head_dim] float32. head_dim must be even."""
    if head_dim % 2:
        raise ValueError(f"rotary position embeddings need an even head width, got {head_dim}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=positions.device, dtype=torch.float)
    inv_freq = 1.0 / (theta ** (exponents / head_dim))
    freqs = positions[..., None].float() * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., d] rotated by the angles whose cos / sin broadcast against it; computed in float32, returned in
    x's dtype (bf16 under autocast)."""
    wide = x.float()
    return (wide * cos + _rotate_half(wide) * sin).to(x.dtype)
