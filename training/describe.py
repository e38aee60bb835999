"""Size and cost of a recipe's model without allocating it: parameter counts (total, embedding, non-embedding)
from the model built on the meta device, and model FLOPs per token of a pretraining step.

    bertfactory describe configs/local.yaml
    python -c "from training.describe import describe; from training.config import ModelConfig; \
print(describe(ModelConfig(), vocab_size=30522, seq_len=128, predicted_fraction=0.15))"

FLOPs per token: training/flops.py, one formula per member (ELECTRA's generator, XLNet's two streams, SBO,
Transformer-XL's memory, ModernBERT's GeGLU and its local layers' window, ...), the same function the MFU in
metrics.jsonl uses, checked against torch.utils.flop_counter on a real step of every objective
(tests/training/test_flops.py); ModernBERT-base's count against transformers' (tests/training/test_describe.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from bertfactory.errors import ConfigError

from .config import ModelConfig
from .flops import RELATIVE_OBJECTIVES, Term, dense_head_train_flops, estimate_flops
from .models.registry import get_architecture
from .objectives import get_objective_spec


@dataclass(frozen=True)
class ModelDescription:
    objective: str
    vocab_size: int
    seq_len: int
    predicted_fraction: float
    parameters: int  # unique parameters (the tied MLM decoder counted once)
    embedding_parameters: int  # word + position + token-type embeddings and their LayerNorm
    non_embedding_parameters: int
    forward_flops_per_token: float  # predicting heads at the predicted fraction only
    train_flops_per_token: float  # forward + backward (training/flops.py)
    # the same step with the predicting heads at every token, for comparison (None: a member that predicts
    # at every token or a fixed fraction anyway: clm, txl_clm, plm)
    dense_head_train_flops_per_token: float | None
    flops_terms: tuple[Term, ...]  # the parts of the step (training/flops.py)

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


def describe(model_cfg: ModelConfig, vocab_size: int, seq_len: int, predicted_fraction: float,
             objective: str = "mlm_nsp", rows_per_batch: int | None = None,
             memory_across_batches: bool = False) -> ModelDescription:
    if not 0.0 < predicted_fraction <= 1.0:
        raise ValueError(f"predicted_fraction must be in (0, 1] (got {predicted_fraction})")
    if objective not in RELATIVE_OBJECTIVES and seq_len > model_cfg.max_position_embeddings:
        raise ConfigError(f"preprocess.instances.max_seq_len {seq_len} exceeds model.max_position_embeddings="
                          f"{model_cfg.max_position_embeddings}: raise model.max_position_embeddings to >= {seq_len} "
                          "or lower max_seq_len")
    total, embedding = count_parameters(model_cfg, vocab_size, objective)
    est = estimate_flops(model_cfg, objective, vocab_size, seq_len, predicted_fraction, rows_per_batch,
                         memory_across_batches=memory_across_batches)
    return ModelDescription(
        objective=objective, vocab_size=model_cfg.vocab_size or vocab_size, seq_len=seq_len,
        predicted_fraction=predicted_fraction, parameters=total, embedding_parameters=embedding,
        non_embedding_parameters=total - embedding, forward_flops_per_token=est.forward,
        train_flops_per_token=est.train,
        dense_head_train_flops_per_token=dense_head_train_flops(model_cfg, objective, vocab_size, seq_len),
        flops_terms=est.terms,
    )
