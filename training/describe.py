"""Size and cost of a recipe's model without allocating it: parameter counts (total, embedding, non-embedding)
from the model built on the meta device, and model FLOPs per token of a pretraining step.

    bertfactory describe configs/local.yaml
    python -c "from training.describe import describe; from training.config import ModelConfig; \
print(describe(ModelConfig(), vocab_size=30522, seq_len=128, predicted_fraction=0.15))"

FLOPs count multiply-adds as 2 and only the matrix products (what runs on the GEMM units; LayerNorm, softmax,
GELU and the embedding gathers are a few percent at most). Per token of a forward pass, with hidden H, FFN width
I, L layers, sequence length S:
    encoder   L * (2 * (4 H^2 + 2 H I)  +  2 * 2 S H)       projections + FFN, then QK^T and AV
    factorised embeddings (E != H, ALBERT)  2 E H           the E -> H projection
    MLM head  f * 2 * (H E + E V)                           only at the predicted fraction f of tokens (E = H
                                                            without factorisation)
Shared layers (ALBERT) cost the same FLOPs as unshared ones: sharing saves parameters, not compute.
A training step costs 3x the forward pass (backward = 2x forward). The MLM head term is where predicting only at
masked positions saves work: a dense head pays it at every token (f = 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .config import ModelConfig
from .models.registry import get_architecture
from .objectives import get_objective_spec


@dataclass(frozen=True)
class ModelDescription:
    vocab_size: int
    seq_len: int
    predicted_fraction: float
    parameters: int  # unique parameters (the tied MLM decoder counted once)
    embedding_parameters: int  # word + position + token-type embeddings and their LayerNorm
    non_embedding_parameters: int
    forward_flops_per_token: float  # with MLM logits at the predicted fraction only
    train_flops_per_token: float  # forward + backward
    dense_head_train_flops_per_token: float  # the same step with MLM logits at every token, for comparison

    def to_dict(self) -> dict:
        return asdict(self)


def meta_model(model_cfg: ModelConfig, vocab_size: int, objective: str = "mlm_nsp") -> torch.nn.Module:
    """The pretraining model of `objective` with every tensor on the meta device: shapes without memory."""
    arch = get_architecture(get_objective_spec(objective).architecture)
    config = arch.from_model_config(model_cfg, vocab_size, 0)
    with torch.device("meta"):
        return arch.build(config)


def count_parameters(model_cfg: ModelConfig, vocab_size: int, objective: str = "mlm_nsp") -> tuple[int, int]:
    """(total, embedding) parameters of the pretraining model, counted on the meta device (no memory is
    allocated, so BERT-large costs nothing to count). Tied and shared tensors count once; embedding parameters
    are those of the embedding modules (word, position, token type, language, their LayerNorm), not the E -> H
    projection of factorised embeddings."""
    model = meta_model(model_cfg, vocab_size, objective)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    embedding = sum(p.numel() for name, p in model.named_parameters()
                    if "embeddings." in name and "embeddings_project" not in name)
    return total, embedding


def flops_per_token(model_cfg: ModelConfig, vocab_size: int, seq_len: int, predicted_fraction: float) -> float:
    """Forward-pass matrix-multiply FLOPs per input token (see the module docstring for the formula)."""
    h, i, n_layers = model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.num_layers
    vocab = model_cfg.vocab_size or vocab_size
    e = model_cfg.embedding_size or h
    encoder = n_layers * (2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq_len * h)
    projection = 2 * e * h if e != h else 0
    mlm_head = predicted_fraction * 2 * (h * e + e * vocab)
    return float(encoder + projection + mlm_head)


def describe(model_cfg: ModelConfig, vocab_size: int, seq_len: int, predicted_fraction: float,
             objective: str = "mlm_nsp") -> ModelDescription:
    if not 0.0 < predicted_fraction <= 1.0:
        raise ValueError(f"predicted_fraction must be in (0, 1] (got {predicted_fraction})")
    if seq_len > model_cfg.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds model.max_position_embeddings={model_cfg.max_position_embeddings}")
    total, embedding = count_parameters(model_cfg, vocab_size, objective)
    forward = flops_per_token(model_cfg, vocab_size, seq_len, predicted_fraction)
    dense = flops_per_token(model_cfg, vocab_size, seq_len, 1.0)
    return ModelDescription(
        vocab_size=model_cfg.vocab_size or vocab_size, seq_len=seq_len, predicted_fraction=predicted_fraction,
        parameters=total, embedding_parameters=embedding, non_embedding_parameters=total - embedding,
        forward_flops_per_token=forward, train_flops_per_token=3 * forward,
        dense_head_train_flops_per_token=3 * dense,
    )
