"""Size and cost of a recipe's model without allocating it: parameter counts (total, embedding, non-embedding)
from the model built on the meta device, and model FLOPs per token of a pretraining step.

    bertfactory describe configs/local.yaml
    python -c "from training.describe import describe; from training.config import ModelConfig; \
print(describe(ModelConfig(), vocab_size=30522, seq_len=128, predicted_fraction=0.15))"

FLOPs count multiply-adds as 2 and only the matrix products (what runs on the GEMM units; LayerNorm, softmax,
GELU and the embedding gathers are a few percent at most). Per token of a forward pass, with hidden H, FFN width
I, L layers, sequence length S:
    encoder   L * (2 * (4 H^2 + 2 H I)  +  2 * 2 S H)       projections + FFN, then QK^T and AV
    MLM head  f * 2 * (H^2 + H V)                           only at the predicted fraction f of tokens
A training step costs 3x the forward pass (backward = 2x forward). The MLM head term is where predicting only at
masked positions saves work: a dense head pays it at every token (f = 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .config import ModelConfig
from .models.bert import BertForPreTraining


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


def meta_model(model_cfg: ModelConfig, vocab_size: int) -> BertForPreTraining:
    """The model with every tensor on the meta device: shapes without memory."""
    config = model_cfg.to_bert_config(vocab_size, pad_token_id=0)
    with torch.device("meta"):
        return BertForPreTraining(config)


def count_parameters(model_cfg: ModelConfig, vocab_size: int) -> tuple[int, int]:
    """(total, embedding) parameters of BertForPreTraining for this architecture, counted on the meta device (no
    memory is allocated, so BERT-large costs nothing to count)."""
    model = meta_model(model_cfg, vocab_size)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once
    embedding = sum(p.numel() for p in model.bert.embeddings.parameters())
    return total, embedding


def flops_per_token(model_cfg: ModelConfig, vocab_size: int, seq_len: int, predicted_fraction: float) -> float:
    """Forward-pass matrix-multiply FLOPs per input token (see the module docstring for the formula)."""
    h, i, n_layers = model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.num_layers
    vocab = model_cfg.vocab_size or vocab_size
    encoder = n_layers * (2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq_len * h)
    mlm_head = predicted_fraction * 2 * (h * h + h * vocab)
    return float(encoder + mlm_head)


def describe(model_cfg: ModelConfig, vocab_size: int, seq_len: int, predicted_fraction: float) -> ModelDescription:
    if not 0.0 < predicted_fraction <= 1.0:
        raise ValueError(f"predicted_fraction must be in (0, 1] (got {predicted_fraction})")
    if seq_len > model_cfg.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds model.max_position_embeddings={model_cfg.max_position_embeddings}")
    total, embedding = count_parameters(model_cfg, vocab_size)
    forward = flops_per_token(model_cfg, vocab_size, seq_len, predicted_fraction)
    dense = flops_per_token(model_cfg, vocab_size, seq_len, 1.0)
    return ModelDescription(
        vocab_size=model_cfg.vocab_size or vocab_size, seq_len=seq_len, predicted_fraction=predicted_fraction,
        parameters=total, embedding_parameters=embedding, non_embedding_parameters=total - embedding,
        forward_flops_per_token=forward, train_flops_per_token=3 * forward,
        dense_head_train_flops_per_token=3 * dense,
    )
