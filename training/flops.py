"""Model FLOPs of a pretraining step per real token, for every member of the family: what `bertfactory describe`
prints and what the MFU in metrics.jsonl is computed from (training/pretrain_trainer.py).

    from training.flops import estimate_flops, train_flops_per_token
    train_flops_per_token(recipe.model, "electra", vocab_size=30522, seq_len=128, mask_rate=0.15)
    estimate_flops(recipe.model, "plm", 32000, 512, 0.15).terms          # the parts, forward and backward

What is counted: matrix products only (linear layers, attention's QK^T and AV, the relative-position and segment
scores, the vocabulary projections), 2 FLOPs per multiply-add, as torch.utils.flop_counter.FlopCounterMode
counts them (tests/training/test_flops.py checks every objective against it on a real step). LayerNorm, softmax,
GELU, dropout, embedding gathers, Gumbel sampling, rotary angles and the losses are not counted: they are elementwise
work of a few percent at most, not what a GPU's peak FLOP/s refers to. Attention is counted dense (S x S scores per
head, also under a causal or permutation mask), because that is what the padded kernels compute; the one exception is
ModernBERT's local layers, counted over their window (below), the work the model needs at any length.

Backward = 2x forward for a product whose input needs a gradient (dX and dW), 1x when only the weight does (the
projection of XLNet's / Transformer-XL's fixed sinusoidal distance table), 0 under no_grad (the frozen generator
of two-stage ELECTRA). Parameter sharing (ALBERT) changes nothing: a shared layer runs as often as an unshared one.

Each member's terms are its `Member.flops` (training/models/<member>/settings.py; the shared pieces:
training/models/core/flops_terms.py). Per row of S real tokens (H hidden, I FFN width, L layers, E embedding width,
V vocabulary, f the predicted fraction; the sum is divided by S):
    BERT layer          2 S (4 H^2 + 2 H I) + 4 S^2 H                          (projections + FFN, QK^T + AV)
    ModernBERT layer    2 S (4 H^2 + 3 H I) + 4 P H    the GeGLU FFN: H -> 2I, I -> H; no E -> H projection, no
                        biases (nothing to count either way). P = S^2 on a global layer (i % n == 0); on a local
                        layer P = the (query, key) pairs inside the window (w = local_attention / 2 each side),
                        S (2w + 1) - w (w + 1) once S > w: the work a windowed kernel does (flash-attn's window on
                        the unpadded CUDA path); the padded path's masked SDPA still computes S^2 there
    E -> H projection   2 S E H when E != H (ALBERT, ELECTRA's generator)
    MLM head            f S (2 H E + 2 E V)  logits at the masked positions only (clm: S - 1 positions)
    pooler + NSP/SOP    2 H^2 + 4 H          mlm_nsp, mlm_sop only
    SBO head            f S (2 (2 H + P) H + 2 H E + 2 E V)  P = the span position embedding size; every masked
                        token counted as an SBO target (tokens of a span longer than 15 or at a row edge get none)
    ELECTRA             generator (H_g = generator_size H, its own projection and MLM head at the masked positions)
                        + discriminator + RTD head 2 S (H^2 + H) at every token
    relative layer      (XLNet, Transformer-XL) per stream of Q queries over K keys (memory M + segment), distance
                        table of R entries: 2 Q H^2 (query) + 4 K H^2 (key, value) + 2 Q H^2 (output) + 4 Q H I
                        + 4 Q K H (QK^T, AV) + 2 Q R H (position scores) [+ 4 Q H segment scores, XLNet]; the
                        table's projection 2 R H^2 is paid once per batch (rows_per_batch)
    XLNet               content stream Q = S, query stream Q = S / K_pred (partial prediction) sharing its keys,
                        K = M + S, R = K + S; logits 2 H V at the S / K_pred targets. M = mem_len when the memory
                        is carried across batches (the stream loader), else 0
    Transformer-XL      train_segments segments of l = S / m tokens, K = M + l, R = K + 1; logits 2 H V at every
                        token (full softmax). M = mem_len in every segment when the memory is carried across
                        batches (the stream loader keeps it full size, masking invalid states), else
                        min(mem_len, s l) for segment s (memory inside one instance only)
XLM's language embeddings are a gather (no FLOPs); tlm and xlm_mlm are the MLM formula, clm predicts every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models.core.flops_terms import window_pairs  # noqa: F401  (importers' path)
from .models.members import member_of_objective, objective_info
from .models.registry import get_architecture

RELATIVE_OBJECTIVES = ("plm", "txl_clm")  # relative positions: no max_position_embeddings bound


@dataclass(frozen=True)
class Term:
    """One part of the step, FLOPs per real token."""

    name: str
    forward: float
    backward: float


@dataclass(frozen=True)
class FlopsEstimate:
    objective: str
    stage: str  # "joint", or ELECTRA two-stage's "generator" / "discriminator"
    seq_len: float
    mask_rate: float
    terms: tuple[Term, ...]

    @property
    def forward(self) -> float:
        return sum(t.forward for t in self.terms)

    @property
    def train(self) -> float:
        return sum(t.forward + t.backward for t in self.terms)


def shard_mask_rate(masked_lm_prob: float, max_predictions_per_seq: int | None, mean_len: float) -> float:
    """Predicted fraction of a row's tokens: masked_lm_prob, capped by max_predictions_per_seq (as masking.py's
    budget is)."""
    if max_predictions_per_seq is None or mean_len <= 0:
        return masked_lm_prob
    return min(masked_lm_prob, max_predictions_per_seq / mean_len)


# ------------------------------------------------------------------------------------------------ public


def estimate_flops(model_cfg: Any, objective: str, vocab_size: int, seq_len: float, mask_rate: float,
                   rows_per_batch: int | None = None, stage: str | None = None,
                   memory_across_batches: bool = False) -> FlopsEstimate:
    """Matrix-multiply FLOPs per real token of one training step of `objective` on the recipe's `model` section
    (training.config.ModelConfig; the architecture config is derived exactly as pretraining builds it), for rows
    of `seq_len` real tokens (the shards' mean) of which `mask_rate` are predicted (MLM members). rows_per_batch:
    rows per forward pass, for the relative members' once-per-batch distance-table projection (None leaves it
    out). stage: for two-stage ELECTRA "generator" or "discriminator" (default), else "joint".
    memory_across_batches: XLNet / Transformer-XL trained from the stream loader, which carries mem_len states
    into every segment (pretrain.stream_batches)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1 (got {seq_len})")
    if not 0.0 < mask_rate <= 1.0:
        raise ValueError(f"mask_rate must be in (0, 1] (got {mask_rate})")
    info = objective_info(objective)
    config = get_architecture(info.architecture).from_model_config(model_cfg, vocab_size, 0)
    two_stage = objective == "electra" and config.two_stage
    if stage is None:
        stage = "discriminator" if two_stage else "joint"
    if stage not in (("generator", "discriminator") if two_stage else ("joint",)):
        raise ValueError(f"stage {stage!r} does not exist for objective {objective!r}"
                         f"{' (two-stage ELECTRA)' if two_stage else ''}")
    terms = tuple(Term(name, forward / seq_len, factor * forward / seq_len)
                  for name, forward, factor in member_of_objective(objective).flops(
                      info, config, float(seq_len), mask_rate, stage, rows_per_batch, memory_across_batches))
    return FlopsEstimate(objective, stage, float(seq_len), mask_rate, terms)


def train_flops_per_token(model_cfg: Any, objective: str, vocab_size: int, seq_len: float, mask_rate: float,
                          rows_per_batch: int | None = None, steps: int | None = None,
                          memory_across_batches: bool = False) -> float:
    """Training FLOPs (forward + backward) per real token, see `estimate_flops`. Two-stage ELECTRA: the mean over
    a run of `steps` steps (generator_steps generator-alone steps, then the discriminator stage), or the
    discriminator stage alone without `steps`."""
    est = estimate_flops(model_cfg, objective, vocab_size, seq_len, mask_rate, rows_per_batch,
                         memory_across_batches=memory_across_batches)
    electra = getattr(model_cfg, "electra", None)
    if objective != "electra" or electra is None or not electra.two_stage or not steps:
        return est.train
    generator = estimate_flops(model_cfg, objective, vocab_size, seq_len, mask_rate, rows_per_batch, "generator")
    first = min(steps, electra.generator_steps)
    return (first * generator.train + (steps - first) * est.train) / steps


def dense_head_train_flops(model_cfg: Any, objective: str, vocab_size: int, seq_len: float) -> float | None:
    """For the members whose heads predict only at the masked positions: train FLOPs per token with those heads
    at every token (the comparison `describe` prints), else None."""
    if objective in (*RELATIVE_OBJECTIVES, "clm"):
        return None
    return estimate_flops(model_cfg, objective, vocab_size, seq_len, 1.0).train

