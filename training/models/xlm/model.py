"""XLM (Lample & Conneau 2019): the BERT encoder with a learned language embedding added to every token, trained
with causal LM (CLM), masked LM on monolingual text (MLM) or translation LM on sentence pairs (TLM). XLM has no
sentence-pair head; all three objectives predict tokens through the one masked-LM head (tied decoder), at the
positions the objective gathers:

    from training.models.xlm.model import XlmConfig, XlmForPreTraining
    model = XlmForPreTraining(XlmConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2,
                                        intermediate_size=512, max_position_embeddings=128, num_languages=2))
    out = model(input_ids, token_type_ids, attention_mask, positions, labels,      # labels -100 = no target
                position_ids=None, language_ids=None, causal=False)
    out["loss"].backward()

`language_ids` default to the config's `language_id` at every token (shards of one language, or schema v1 without a
language column); batches of multilingual shards carry each row's language per token (training/data.py
language_inputs, mapped by training/xlm_data.py); TLM passes per-token ids and positions that restart at the
target sentence; CLM passes causal=True. Objectives: training/objectives/xlm.py.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import model_validator
from pydantic.dataclasses import dataclass
from torch import nn

from bertfactory.errors import ConfigError

from ..bert.model import BertConfig, BertModel, gather_masked, init_bert_weights, pooler_parameter_names
from ..core.config_schema import MODEL_CONFIG
from .settings import MEMBER, XlmLanguage, XlmSettings  # noqa: F401  (XlmSettings: importers' path)
from ..core.heads import MaskedLMHead
from ..core.architecture import Architecture


@dataclass(frozen=True, config=MODEL_CONFIG)
class XlmConfig(XlmLanguage, BertConfig):
    """BertConfig with num_languages >= 1, then the default `language_id`."""

    @model_validator(mode="after")
    def _languages(self) -> "XlmConfig":
        if self.num_languages < 1:
            raise ValueError(f"num_languages must be >= 1 (got {self.num_languages})")
        if not self.language_id < self.num_languages:
            raise ValueError(f"language_id {self.language_id} is not one of the {self.num_languages} languages "
                             f"(0..{self.num_languages - 1})")
        return self


class XlmModel(BertModel):
    """BertModel that fills in the config's language at every token when the caller passes no language_ids (so
    that it keeps BertModel's calling convention for fine-tuning)."""

    config: XlmConfig

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False,
                position_ids: torch.Tensor | None = None, language_ids: torch.Tensor | None = None,
                causal: bool = False, **kwargs: Any):
        if language_ids is None:
            language_ids = torch.full_like(input_ids, self.config.language_id)
        return super().forward(input_ids, token_type_ids, attention_mask, output_hidden_states,
                               position_ids=position_ids, language_ids=language_ids, causal=causal, **kwargs)


class XlmForPreTraining(nn.Module):
    """XLM encoder + the masked-LM head (decoder tied to the word embeddings); no NSP head."""

    def __init__(self, config: XlmConfig):
        super().__init__()
        self.config = config
        self.bert = XlmModel(config)
        self.mlm_head = MaskedLMHead(config.hidden_size, config.vocab_size, config.layer_norm_eps, config.embedding_width)
        init_bert_weights(self.mlm_head, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                position_ids: torch.Tensor | None = None, language_ids: torch.Tensor | None = None,
                causal: bool = False) -> dict[str, torch.Tensor]:
        """Predicts masked_labels [B, P] (-100 = no target) at masked_positions [B, P]. Returns loss (mean
        cross-entropy over the N targets), logits [N, V], correct and count."""
        hidden = self.bert(input_ids, token_type_ids, attention_mask, position_ids=position_ids,
                           language_ids=language_ids, causal=causal)
        gathered, labels = gather_masked(hidden, masked_positions, masked_labels)
        logits = self.mlm_head(gathered, self.bert.embeddings.word_embeddings.weight)
        if labels.numel():
            loss = F.cross_entropy(logits.float(), labels)
        else:  # no target in the batch: a zero that still depends on the graph
            loss = logits.float().sum() * 0.0
        with torch.no_grad():
            correct = (logits.argmax(-1) == labels).sum()
        return {"loss": loss, "logits": logits, "correct": correct,
                "count": torch.tensor(labels.numel(), device=hidden.device)}

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def untrained_parameter_names(self) -> list[str]:
        """The pooler: no sentence-level loss in pretraining (see training/models/core/architecture.py)."""
        return pooler_parameter_names(self, "bert.")

    def backbone(self) -> XlmModel:
        """The encoder used for fine-tuning and features (see training/models/core/architecture.py)."""
        return self.bert


def _from_model_config(model_cfg: Any, vocab_size: int, pad_id: int) -> XlmConfig:
    language_id = model_cfg.xlm.language_id if model_cfg.xlm is not None else 0
    if model_cfg.num_languages < 1:
        raise ConfigError("model.num_languages must be >= 1 for XLM's language embeddings (objectives clm, tlm, "
                          f"xlm_mlm); got {model_cfg.num_languages}")
    if language_id >= model_cfg.num_languages:
        raise ConfigError(f"model.xlm.language_id={language_id} is not one of the model.num_languages="
                          f"{model_cfg.num_languages} languages (0..{model_cfg.num_languages - 1})")
    languages = model_cfg.xlm.languages if model_cfg.xlm is not None else None
    if languages is not None and len(languages) > model_cfg.num_languages:
        raise ConfigError(f"model.xlm.languages names {len(languages)} languages ({', '.join(languages)}) but "
                          f"model.num_languages={model_cfg.num_languages} embeddings; set num_languages to "
                          f"{len(languages)}")
    return XlmConfig(**model_cfg.to_bert_config(vocab_size, pad_id).to_dict(), language_id=language_id)


ARCHITECTURE = Architecture(
    name="XlmForPreTraining",
    config_from_dict=XlmConfig.from_dict,
    build=XlmForPreTraining,
    from_model_config=_from_model_config,
    description="XLM: BERT encoder + language embeddings with one tied LM head for CLM, MLM and TLM, no NSP",
    supports=MEMBER.supports,
    settings=MEMBER.settings,
)
