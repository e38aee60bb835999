"""BERT's configuration and row, without torch: `BertConfig` (what a checkpoint's config.json stores under `model`, and
the encoder keys of a recipe's `model` section, training/config.py), `encoder_shape_problems`, the checks both share,
and `MEMBER`, the row of BERT (with RoBERTa and ALBERT, options of the same architecture: core/member.py), from which
members.py builds the family's tables. Loading and validating a recipe imports this module, not the model
(training/models/bert/model.py), so it stays free of torch.

    from training.models.bert.settings import BertConfig
    config = BertConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
                        max_position_embeddings=128)
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from ..core.config_schema import MODEL_CONFIG, CheckpointConfig
from ..core.capabilities import FUSED_MLM_LOSS, STACKING, STATIC_SHAPES, UNPAD
from ..core.flops_terms import bert_encoder, lm_head
from ..core.member import MASKED_TEXT_FORMATS, HfRow, Member, ObjectiveInfo


@dataclass(frozen=True, config=MODEL_CONFIG)
class BertConfig(CheckpointConfig):
    """Architecture of a BERT encoder: what `config.json` of a checkpoint stores under `model`, and (but for
    vocab_size, pad_token_id and sentence_head, which pretraining fills in) the encoder keys of a recipe's `model`
    section (training/config.py). The required fields are those a checkpoint must state; a recipe defaults them to
    BERT-base."""

    vocab_size: int = Field(ge=1, description="rows of the word embeddings (>= the tokenizer's vocabulary)")
    hidden_size: int = Field(ge=1, description="width of every layer (H)")
    num_layers: int = Field(ge=1, description="number of transformer layers (L)")
    num_heads: int = Field(ge=1, description="attention heads per layer (A); must divide hidden_size")
    intermediate_size: int = Field(ge=1, description="width of the feed-forward inner layer (4H in BERT)")
    max_position_embeddings: int = Field(ge=1, description="learned positions; must be >= the shards' sequence "
                                         "length")
    type_vocab_size: int = Field(2, ge=1, description="segment (token type) embeddings: 2 = A and B (BERT); 1 = one "
                                 "segment embedding for every token (RoBERTa: the shards' segment ids are ignored)")
    hidden_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on embeddings and sub-layer outputs")
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0, description="dropout on attention probabilities")
    layer_norm_eps: float = Field(1e-12, gt=0.0, description="LayerNorm epsilon")
    initializer_range: float = Field(0.02, gt=0.0, description="std of the normal weight initialisation")
    pad_token_id: int = Field(0, ge=0, description="the tokenizer's [PAD] id (its word embedding stays zero-grad "
                              "padding_idx)")
    embedding_size: int | None = Field(None, ge=1, description="ALBERT/ELECTRA factorised embeddings: width E of the "
                                       "embeddings, projected to hidden_size (null = hidden_size, no projection): "
                                       "V*E + E*H parameters instead of V*H")
    share_layers: Literal["none", "all", "attention", "ffn"] = Field(
        "none", description="ALBERT cross-layer sharing inside each layer group: all parameters, only attention, "
                            "only the feed-forward block, or none (BERT)")
    num_layer_groups: int = Field(1, ge=1, description="ALBERT: split the layers into this many groups of "
                                  "consecutive layers that share parameters (must divide num_layers; layer i "
                                  "belongs to group i // (num_layers / num_layer_groups))")
    num_languages: int = Field(0, ge=0, description="XLM: number of language embeddings, one added to every token "
                               "(0 = none)")
    # built only for objectives with a sentence loss (training/objectives: ObjectiveSpec.sentence_head), so e.g. a
    # RoBERTa checkpoint holds no untrained NSP head; true by default: checkpoints written before the field existed
    # all have one
    sentence_head: bool = Field(True, description="the two-way sentence-pair head (NSP / SOP) on the pooled [CLS]")

    @model_validator(mode="after")
    def _consistent_shape(self) -> "BertConfig":
        problems = encoder_shape_problems(self)
        if not self.pad_token_id < self.vocab_size:
            problems.append(f"pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def embedding_width(self) -> int:
        return self.embedding_size if self.embedding_size is not None else self.hidden_size


def encoder_shape_problems(config: Any) -> list[str]:
    """What is inconsistent between the encoder fields of `config` (a BertConfig or a recipe's ModelConfig), each
    field valid on its own; an empty list when nothing is."""
    problems = []
    if config.hidden_size % config.num_heads:
        problems.append(f"hidden_size {config.hidden_size} is not divisible by num_heads {config.num_heads}")
    if config.num_layers % config.num_layer_groups:
        problems.append(f"num_layers {config.num_layers} is not divisible by num_layer_groups "
                        f"{config.num_layer_groups}")
    if config.share_layers == "none" and config.num_layer_groups != 1:
        problems.append("num_layer_groups > 1 needs share_layers all, attention or ffn")
    return problems

def bert_flops_terms(info: ObjectiveInfo, c: Any, s: float, predicted: float) -> list[tuple[str, float, float]]:
    """A row of s tokens through a BertModel member (BERT, RoBERTa, ALBERT, and SpanBERT's / XLM's encoders), its MLM
    head at `predicted` positions, and the pooler + sentence head where the objective trains one."""
    parts = [("encoder", bert_encoder(c, s), 2.0), ("LM head at the predicted positions", lm_head(c, predicted), 2.0)]
    if info.sentence_head:  # the pooler + two-way head runs only where a loss reads it (mlm_nsp, mlm_sop)
        parts.append(("pooler + sentence head", 2 * c.hidden_size * c.hidden_size + 4 * c.hidden_size, 2.0))
    return parts


# BERT, RoBERTa and ALBERT: one architecture, options of the encoder (docs/family.md)
MEMBER = Member(
    name="BERT", architecture="BertForPreTraining", model="training.models.bert.model",
    supports=frozenset({UNPAD, STATIC_SHAPES, STACKING, FUSED_MLM_LOSS}),
    objectives=(
        ObjectiveInfo(
            name="mlm_nsp", architecture="BertForPreTraining", instance_formats=("nsp-pairs",),
            needs="masked tokens and next-sentence labels (shard fields mask_positions/mask_tokens and nsp_label)",
            description="BERT: masked LM + next-sentence prediction", sentence_head=True, loss_function="mlm_nsp"),
        ObjectiveInfo(
            name="mlm", architecture="BertForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
            needs="masked tokens (shard fields mask_positions/mask_tokens)",
            description="RoBERTa: masked LM only, no sentence-pair loss", loss_function="mlm_only"),
        ObjectiveInfo(
            name="mlm_sop", architecture="BertForPreTraining", instance_formats=("sop-pairs",),
            needs="masked tokens and sentence-order labels (shard fields mask_positions/mask_tokens and nsp_label)",
            description="ALBERT: masked LM + sentence-order prediction", sentence_head=True, loss_function="mlm_sop"),
    ),
    flops=lambda info, c, s, f, stage, rows, carried: bert_flops_terms(info, c, s, f * s),
    hf=HfRow(adapter="bert", reads="BertModel, BertForPreTraining or BertForMaskedLM, RobertaForMaskedLM or "
             "RobertaModel, AlbertForPreTraining, AlbertForMaskedLM or AlbertModel",
             export="export_bert_to_hf", exports=("BertForPreTraining", "RobertaForMaskedLM", "AlbertForPreTraining"),
             layouts=("bert", "roberta", "albert"),
             imports=(("bert", "import_bert_from_hf"), ("roberta", "import_bert_layout"),
                      ("albert", "import_bert_layout"))),
)
