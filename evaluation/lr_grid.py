"""A fine-tuning learning-rate grid for the encoder's size, for tasks whose settings name no learning rate
(`evaluate.finetune.size_scaled_grid`; `bertfactory evaluate --task-file` turns it on). docs/tasks.md.

    from evaluation.lr_grid import size_scaled_grid
    size_scaled_grid(128)   # [9.4e-05, 0.00028, 0.00085] a 2-layer 128-wide model (the tiny twins, the demo)
    size_scaled_grid(384)   # [2e-05, 3e-05, 5e-05]      MiniLM-L6-H384 (22.7 M parameters) and wider: BERT's grid

Why: one rate tuned for BERT-base (2e-5) is far too small for a narrow model, which then never leaves the
majority class in a few epochs (issue 21: a 128-wide model at 2e-5 scored exactly the majority rate); published
small models fine-tune at larger rates (ELECTRA-small 3e-4, BERT-mini/-tiny 1e-4 .. 3e-4). Below
PRETRAINED_WIDTH the centre rate falls with the width as 3e-5 x (768 / hidden)^1.25 (~2.8e-4 at 128), clamped to
[1e-5, 1e-3]; the grid is the centre / 3, the centre and the centre x 3, rounded to 2 significant digits, so that a
rate a factor ~3 off either way is still tried.

From PRETRAINED_WIDTH (384) up the encoder is a published pretrained checkpoint's size (MiniLM-L6-H384 at 22.7 M
parameters, BERT-base 768, BERT-large 1024; `bertfactory import-hf`), and the grid is the one such checkpoints are
fine-tuned at: BERT's {2e-5, 3e-5, 5e-5} (Devlin et al. 2019, appendix A.3, less 4e-5; 5e-5 is also the
Trainer's default). The curve's rates there (2.4e-5 .. 2.1e-4 at 384) are the tiny twins' rule carried past
them: its top rate is far above what such checkpoints are fine-tuned at (issue 32). Every width below 384 —
the demo's and the tiny twins' 128, the 256 and 312 of the small recipes — keeps the curve unchanged. The rate
with the best mean dev score over seeds is reported (evaluation.finetune).
"""

from __future__ import annotations

REFERENCE_WIDTH = 768
REFERENCE_RATE = 3e-5
EXPONENT = 1.25
LOWEST, HIGHEST = 1e-5, 1e-3
SPREAD = (1 / 3, 1.0, 3.0)
PRETRAINED_WIDTH = 384  # from here up: a pretrained checkpoint's width (MiniLM-L6-H384 and wider)
PRETRAINED_GRID = (2e-5, 3e-5, 5e-5)  # BERT's fine-tuning grid (less 4e-5)


def _two_digits(value: float) -> float:
    return float(f"{value:.2g}")


def size_scaled_grid(hidden_size: int) -> list[float]:
    """Three learning rates, ascending, for an encoder `hidden_size` wide (see the module docstring)."""
    if hidden_size < 1:
        raise ValueError(f"hidden_size must be >= 1 (got {hidden_size})")
    if hidden_size >= PRETRAINED_WIDTH:
        return list(PRETRAINED_GRID)
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
