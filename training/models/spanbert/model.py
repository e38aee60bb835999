"""SpanBERT (Joshi et al. 2020): the BERT encoder trained with masked LM + the span boundary objective (SBO) and no
next-sentence prediction. `SpanBertForPreTraining` = BertModel + the MLM head + the SBO head (span_boundary.py),
both decoding through the word-embedding matrix.

    from training.models.spanbert.model import SpanBertConfig, SpanBertForPreTraining
    model = SpanBertForPreTraining(SpanBertConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2,
                                                  intermediate_size=512, max_position_embeddings=128))
    out = model(input_ids, token_type_ids, attention_mask, masked_positions, masked_labels)
    out["loss"].backward()          # mlm_loss + sbo_loss

The masks come from the shards; span masking (preprocess.masking.policy: span) is what makes the SBO targets
spans, and its shards store each span's bounds (span_left / span_right from collate(); without them the spans are
reconstructed as runs of masked positions: span_boundary.py). The checkpoint's encoder is a plain BertModel
(`backbone()`), fine-tuned like BERT's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from pydantic.dataclasses import dataclass
from torch import nn

from ..bert.model import BertConfig, BertModel, gather_masked, init_bert_weights, pooler_parameter_names
from ..core.config_schema import MODEL_CONFIG, settings_dict
from .settings import MEMBER, SpanBertSettings  # noqa: F401  (SpanBertSettings: importers' path)
from ..core.heads import MaskedLMHead
from ..core.architecture import Architecture
from .span_boundary import SpanBoundaryHead, gather_span_boundaries, stored_span_boundaries


@dataclass(frozen=True, config=MODEL_CONFIG)
class SpanBertConfig(BertConfig):
    """BertConfig + the SBO head's sizes (SpanBertSettings, under the names checkpoints store)."""

    sbo_max_span_tokens: int = Field(15, ge=1, description="SpanBertSettings.max_span_tokens")
    sbo_position_size: int = Field(200, ge=1, description="SpanBertSettings.position_size")


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if labels.numel():
        return F.cross_entropy(logits.float(), labels)
    return logits.float().sum() * 0.0  # no target in the batch: a zero that still depends on the graph


class SpanBertForPreTraining(nn.Module):
    """BERT encoder + masked-LM head + span boundary head; no NSP head (SpanBERT trains single segments)."""

    def __init__(self, config: SpanBertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm_head = MaskedLMHead(config.hidden_size, config.vocab_size, config.layer_norm_eps, config.embedding_width)
        self.sbo_head = SpanBoundaryHead(config.hidden_size, config.vocab_size, config.sbo_max_span_tokens,
                                         config.sbo_position_size, config.layer_norm_eps, config.embedding_width)
        init_bert_weights(self.mlm_head, config.initializer_range)
        init_bert_weights(self.sbo_head, config.initializer_range)
        nn.init.zeros_(self.sbo_head.bias)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor, masked_labels: torch.Tensor, span_left: torch.Tensor | None = None,
                span_right: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Returns loss = mlm_loss + sbo_loss, both, mlm_logits [N, V] at the N real masked positions,
        sbo_logits [M, V] at the M of them with an SBO target, and mlm/sbo _correct and _count. span_left /
        span_right [B, P]: the stored bounds of each slot's span (collate()); None: runs of masked positions."""
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        word_embeddings = self.bert.embeddings.word_embeddings.weight
        masked_hidden, mlm_labels = gather_masked(hidden, masked_positions, masked_labels)
        mlm_logits = self.mlm_head(masked_hidden, word_embeddings)
        bounds = None if span_left is None else stored_span_boundaries(masked_positions, span_left, span_right)
        left, right, relative, sbo_labels = gather_span_boundaries(
            hidden, masked_positions, masked_labels, attention_mask, self.config.sbo_max_span_tokens, bounds)
        sbo_logits = self.sbo_head(left, right, relative, word_embeddings)
        mlm_loss = _cross_entropy(mlm_logits, mlm_labels)
        sbo_loss = _cross_entropy(sbo_logits, sbo_labels)
        with torch.no_grad():
            mlm_correct = (mlm_logits.argmax(-1) == mlm_labels).sum()
            sbo_correct = (sbo_logits.argmax(-1) == sbo_labels).sum()
        return {
            "loss": mlm_loss + sbo_loss,
            "mlm_loss": mlm_loss,
            "sbo_loss": sbo_loss,
            "mlm_logits": mlm_logits,
            "sbo_logits": sbo_logits,
            "mlm_correct": mlm_correct,
            "mlm_count": torch.tensor(mlm_labels.numel(), device=hidden.device),
            "sbo_correct": sbo_correct,
            "sbo_count": torch.tensor(sbo_labels.numel(), device=hidden.device),
        }

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def untrained_parameter_names(self) -> list[str]:
        """The pooler: no sentence-level loss in pretraining (see training/models/core/architecture.py)."""
        return pooler_parameter_names(self, "bert.")

    def backbone(self) -> BertModel:
        """The encoder used for fine-tuning and features (see training/models/core/architecture.py)."""
        return self.bert


def _from_model_config(model_cfg: Any, vocab_size: int, pad_id: int) -> SpanBertConfig:
    settings = settings_dict(model_cfg.spanbert)
    return SpanBertConfig(**model_cfg.to_bert_config(vocab_size, pad_id).to_dict(),
                          **{f"sbo_{name}": value for name, value in settings.items()})


ARCHITECTURE = Architecture(
    name="SpanBertForPreTraining",
    config_from_dict=SpanBertConfig.from_dict,
    build=SpanBertForPreTraining,
    from_model_config=_from_model_config,
    description="SpanBERT: BERT encoder with masked-LM and span boundary (SBO) heads, no NSP",
    supports=MEMBER.supports,
    settings=MEMBER.settings,
)
