"""The `model` section of a recipe (ModelConfig: the encoder architecture); the `pretrain` section is
training/pretrain_config.py.

Defaults are BERT-base as in Devlin et al. 2019 (12 layers, hidden 768, 12 heads, FFN 3072, 512 positions,
dropout 0.1). configs/local.yaml overrides them down to a tiny model for a 2-core CPU.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from bertfactory.config import StrictModel
from bertfactory.errors import ConfigError

from .electra_config import ElectraSettings
from .spanbert_config import SpanBertSettings
from .xlm_config import XlmSettings
from .xlnet_config import TransformerXLSettings, XLNetSettings
from .models.bert import BertConfig


class ModelConfig(StrictModel):
    """Architecture of the BERT encoder."""

    vocab_size: int | None = Field(None, ge=1, description="vocabulary size; null = the tokenizer's size from the shard manifest")
    hidden_size: int = Field(768, ge=1, description="width of every layer (H)")
    num_layers: int = Field(12, ge=1, description="number of transformer layers (L)")
    num_heads: int = Field(12, ge=1, description="attention heads per layer (A); must divide hidden_size")
    intermediate_size: int = Field(3072, ge=1, description="width of the feed-forward inner layer (4H in BERT)")
    max_position_embeddings: int = Field(512, ge=1, description="learned positions; must be >= the shards' sequence length")
    type_vocab_size: int = Field(2, ge=1, description="segment (token type) embeddings: 2 = A and B (BERT); 1 = one "
                                 "segment embedding for every token (RoBERTa: the shards' segment ids are ignored)")
    hidden_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on embeddings and sub-layer outputs")
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on attention probabilities")
    layer_norm_eps: float = Field(1e-12, gt=0.0, description="LayerNorm epsilon")
    initializer_range: float = Field(0.02, gt=0.0, description="std of the normal weight initialisation")
    embedding_size: int | None = Field(None, ge=1, description="ALBERT/ELECTRA factorised embeddings: width E of the "
                                       "embeddings, projected to hidden_size (null = hidden_size, no projection)")
    share_layers: Literal["none", "all", "attention", "ffn"] = Field(
        "none", description="ALBERT cross-layer sharing inside each layer group: all parameters, only attention, "
                            "only the feed-forward block, or none (BERT)")
    num_layer_groups: int = Field(1, ge=1, description="ALBERT: split the layers into this many groups of "
                                  "consecutive layers that share parameters (must divide num_layers)")
    num_languages: int = Field(0, ge=0, description="XLM: number of language embeddings (0 = none)")
    electra: ElectraSettings | None = Field(None, description="ELECTRA (objective electra): generator size, "
                                            "discriminator loss weight, two-stage training; null = the paper's "
                                            "defaults (training/electra_config.py). The other fields describe the "
                                            "discriminator")
    spanbert: SpanBertSettings | None = Field(None, description="SpanBERT (objective mlm_sbo): the span boundary "
                                              "head's sizes; null = SpanBERT's defaults (training/spanbert_config.py)")
    xlnet: XLNetSettings | None = Field(None, description="XLNet (objective plm): partial prediction and memory; "
                                        "null = the paper's defaults (training/xlnet_config.py)")
    transformer_xl: TransformerXLSettings | None = Field(
        None, description="Transformer-XL (objective txl_clm): memory length and segments per instance; null = "
                          "defaults (training/xlnet_config.py)")
    xlm: XlmSettings | None = Field(None, description="XLM (objectives clm, xlm_mlm, tlm): the language of "
                                    "monolingual shards and fine-tuning inputs; null = language 0 "
                                    "(training/xlm_config.py)")

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.num_layers % self.num_layer_groups:
            raise ValueError(f"num_layers {self.num_layers} must be divisible by num_layer_groups {self.num_layer_groups}")
        if self.share_layers == "none" and self.num_layer_groups != 1:
            raise ValueError("num_layer_groups > 1 needs share_layers all, attention or ffn")
        return self

    def to_bert_config(self, vocab_size: int, pad_token_id: int) -> BertConfig:
        """The architecture for a tokenizer of `vocab_size` tokens (ModelConfig.vocab_size, when set, must
        cover it; a larger value pads the embedding matrix, e.g. to a multiple of 64 for GPU efficiency)."""
        size = self.vocab_size if self.vocab_size is not None else vocab_size
        if size < vocab_size:
            raise ConfigError(f"model.vocab_size={size} is smaller than the tokenizer's vocabulary ({vocab_size} tokens)")
        fields = self.model_dump(exclude={"vocab_size", "electra", "spanbert", "xlm", "xlnet", "transformer_xl"})
        return BertConfig(vocab_size=size, pad_token_id=pad_token_id, **fields)
