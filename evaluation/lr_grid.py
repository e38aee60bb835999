"""A fine-tuning learning-rate grid for the encoder's size, for tasks whose settings name no learning rate
(`evaluate.finetune.size_scaled_grid`; `bertfactory evaluate --task-file` turns it on). docs/tasks.md.

    from evaluation.lr_grid import size_scaled_grid
    size_scaled_grid(768)   # [1e-05, 3e-05, 9e-05]      BERT-base: BERT's own grid is 2e-5 .. 5e-5
    size_scaled_grid(128)   # [9.4e-05, 0.00028, 0.00085] a 2-layer 128-wide model

Why: one rate tuned for BERT-base (2e-5) is far too small for a narrow model, which then never leaves the
majority class in a few epochs (issue 21: a 128-wide model at 2e-5 scored exactly the majority rate); published
small models fine-tune at larger rates (ELECTRA-small 3e-4, BERT-mini/-tiny 1e-4 .. 3e-4). The centre rate falls
with the width as 3e-5 x (768 / hidden)^1.25 (3e-5 at 768, ~2.8e-4 at 128), clamped to [1e-5, 1e-3]; the grid is the
centre / 3, the centre and the centre x 3, rounded to 2 significant digits, so that a rate a factor ~3 off either
way is still tried. The rate with the best mean dev score over seeds is reported (evaluation.finetune).
"""

from __future__ import annotations

REFERENCE_WIDTH = 768
REFERENCE_RATE = 3e-5
EXPONENT = 1.25
LOWEST, HIGHEST = 1e-5, 1e-3
SPREAD = (1 / 3, 1.0, 3.0)


def _two_digits(value: float) -> float:
    return float(f"{value:.2g}")


def size_scaled_grid(hidden_size: int) -> list[float]:
    """Three learning rates, ascending, for an encoder `hidden_size` wide (see the module docstring)."""
    if hidden_size < 1:
        raise ValueError(f"hidden_size must be >= 1 (got {hidden_size})")
    centre = REFERENCE_RATE * (REFERENCE_WIDTH / hidden_size) ** EXPONENT
    centre = min(max(centre, LOWEST), HIGHEST)
    return [_two_digits(centre * factor) for factor in SPREAD]


def encoder_width(encoder) -> int | None:
    """The hidden size of an encoder module (its `config.hidden_size`, or `d_model` for relative members)."""
    config = getattr(encoder, "config", None)
    for name in ("hidden_size", "d_model"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None
