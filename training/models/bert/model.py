"""BERT: the encoder (`BertModel`) and the pretraining model (`BertForPreTraining`, MLM + NSP); their configuration,
`BertConfig`, is declared in training/models/bert/settings.py (without torch) and importable from here too.

    from training.models.bert.model import BertConfig, BertForPreTraining
    model = BertForPreTraining(BertConfig(vocab_size=8000, hidden_size=128, num_layers=2, num_heads=2,
                                          intermediate_size=512, max_position_embeddings=128))
    out = model(input_ids, token_type_ids, attention_mask, masked_positions, masked_labels, nsp_labels)
    out["loss"].backward()

The encoder core (embeddings, attention, encoder layers) lives in sibling modules so that other members of the
family reuse it; parameter names of `BertModel` match the original BERT layout (see embeddings.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..core.architecture import Architecture
from .settings import MEMBER, BertConfig  # declared without torch (a recipe loads it); importers use either module
from ..core.attention import padding_mask
from ..core.embeddings import BertEmbeddings
from ..core.encoder import Encoder
from ..core.fused_loss import fused_linear_cross_entropy
from ..core.heads import MaskedLMHead, NextSentenceHead, Pooler
from ..core.varlen import encode_unpadded, gather_masked_packed, gather_masked_packed_fixed

IGNORE_INDEX = -100


def init_bert_weights(module: nn.Module, std: float) -> None:
    """BERT initialisation: linear and embedding weights ~ N(0, std), biases 0, LayerNorm weight 1 / bias 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=std)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, MaskedLMHead):
            nn.init.zeros_(m.bias)


class BertModel(nn.Module):
    """The encoder: embeddings -> (projection E -> H when the embeddings are factorised) -> N post-LN transformer
    layers. Also owns the [CLS] pooler (used by NSP/SOP and by sentence-level fine-tuning), which `forward` does
    not apply. Every member of the family with absolute positions (BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA, XLM)
    is this module under another BertConfig."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(
            config.vocab_size, config.embedding_width, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.hidden_dropout, config.pad_token_id, config.num_languages,
        )
        if config.embedding_width != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_width, config.hidden_size)
        self.encoder = Encoder(
            config.num_layers, share_layers=config.share_layers, num_layer_groups=config.num_layer_groups,
            hidden_size=config.hidden_size, num_heads=config.num_heads,
            intermediate_size=config.intermediate_size, hidden_dropout=config.hidden_dropout,
            attention_dropout=config.attention_dropout, layer_norm_eps=config.layer_norm_eps,
        )
        self.pooler = Pooler(config.hidden_size)
        init_bert_weights(self, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False,
                position_ids: torch.Tensor | None = None, language_ids: torch.Tensor | None = None,
                causal: bool = False, unpad: bool | str = False):
        """input_ids, token_type_ids, attention_mask: [B, T] (mask 1 = real, 0 = pad) -> last hidden [B, T, H];
        with output_hidden_states, (last, (embeddings, layer 1, ..., layer N)). `causal`: each token attends
        only to itself and earlier real tokens (XLM's CLM). position_ids / language_ids: see BertEmbeddings.
        `unpad` (varlen.py): True = run on the real tokens only, same outputs with zeros on padding; "packed" =
        the same, returning (packed states [embeddings, layer 1, ..., layer N] each [N, H], PackedSequences);
        "fixed" = as "packed" in the fixed layout (every slot a row, [B*T, H]; PackedSequences.fixed_rows)."""
        if token_type_ids is None or self.config.type_vocab_size == 1:
            # one segment embedding (RoBERTa): every token is segment 0, whatever the batch's segment ids say
            # (pair shards mark segment B with 1)
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if unpad:
            states, layout = encode_unpadded(self, input_ids, token_type_ids, attention_mask, position_ids,
                                             language_ids, causal, fixed=unpad == "fixed")
            if unpad in ("packed", "fixed"):
                return states, layout
            padded = tuple(layout.unpack(x) for x in states)
            return (padded[-1], padded) if output_hidden_states else padded[-1]
        embedded = self.embeddings(input_ids, token_type_ids, position_ids, language_ids)
        if hasattr(self, "embeddings_project"):
            embedded = self.embeddings_project(embedded)
        mask = None
        if causal:
            t = input_ids.shape[1]
            lower = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
            mask = padding_mask(attention_mask) & lower
        layers = self.encoder(embedded, attention_mask, mask=mask)
        last = layers[-1] if layers else embedded
        if output_hidden_states:
            return last, tuple([embedded, *layers])
        return last


def gather_masked(hidden: torch.Tensor, masked_positions: torch.Tensor, masked_labels: torch.Tensor):
    """hidden [B, T, H], positions/labels [B, P] (labels -100 = padding) -> (hidden at the N real masked
    positions [N, H], their labels [N]), in row-major (batch, then position) order."""
    b, t, h = hidden.shape
    real = masked_labels != IGNORE_INDEX
    flat_index = (masked_positions + torch.arange(b, device=hidden.device)[:, None] * t)[real]
    return hidden.reshape(b * t, h).index_select(0, flat_index), masked_labels[real]


def gather_masked_fixed(hidden: torch.Tensor, masked_positions: torch.Tensor, masked_labels: torch.Tensor):
    """Static-shape `gather_masked`: hidden at all B * P prediction slots [B*P, H] and their labels [B*P] (-100 on
    padding slots, which read position 0 and are ignored by the loss). No boolean indexing, so the shapes depend
    only on the batch's [B, P] and nothing waits for the device: what XLA needs to compile once, and what CUDA needs
    to avoid a host sync per step."""
    b, t, h = hidden.shape
    flat_index = (masked_positions + torch.arange(b, device=hidden.device)[:, None] * t).reshape(-1)
    return hidden.reshape(b * t, h).index_select(0, flat_index), masked_labels.reshape(-1)


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM head (decoder tied to the word embeddings) and, with config.sentence_head, the
    next-sentence (or sentence-order) head on the pooled [CLS]."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.mlm_head = MaskedLMHead(config.hidden_size, config.vocab_size, config.layer_norm_eps, config.embedding_width)
        if config.sentence_head:  # built before the heads are initialised: the RNG order of every earlier release
            self.nsp_head = NextSentenceHead(config.hidden_size)
        init_bert_weights(self.mlm_head, config.initializer_range)
        if config.sentence_head:
            init_bert_weights(self.nsp_head, config.initializer_range)
        # the default of forward's `unpad` (pretrain.unpad sets it; not part of the weights or the config)
        self.unpad_by_default = False
        # the unpadded path's layout (varlen.py): "packed" (the real tokens) or "fixed" (every slot, padding as
        # sequences of its own: static shapes, no host read); pretrain.unpad_layout sets it
        self.unpad_layout = "packed"
        # MLM logits at all B * P prediction slots instead of the N real ones (gather_masked_fixed); the same
        # loss, static shapes (pretrain.static_shapes sets it)
        self.static_shapes = False
        # training steps compute the decoder and its cross-entropy chunk by chunk without the [N, V] logits
        # (core/fused_loss.py; pretrain.fused_mlm_loss sets it); evaluation keeps the logits path
        self.fused_mlm_loss = False

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                nsp_labels: torch.Tensor | None = None, unpad: bool | None = None) -> dict[str, torch.Tensor | None]:
        """Returns loss (mlm_loss + nsp_loss, or mlm_loss alone without nsp_labels), mlm_loss, nsp_loss,
        mlm_logits [N, V] at the N real masked positions (None in a training step with `fused_mlm_loss`),
        nsp_logits [B, 2] (None without a sentence head, and then nsp_labels are ignored), mlm_correct and mlm_count.
        `unpad`: the encoder runs on the real tokens only and the heads read the packed rows (varlen.py, in
        `self.unpad_layout`); None = `self.unpad_by_default`."""
        if unpad is None:
            unpad = self.unpad_by_default
        if unpad:
            states, layout = self.bert(input_ids, token_type_ids, attention_mask, unpad=self.unpad_layout)
            gather = gather_masked_packed_fixed if self.static_shapes else gather_masked_packed
            masked_hidden, labels = gather(states[-1], layout, masked_positions, masked_labels)
            hidden = layout.gather(states[-1], torch.zeros_like(input_ids[:, :1]))  # [B, 1, H]: [CLS] for the pooler
        elif self.static_shapes:
            hidden = self.bert(input_ids, token_type_ids, attention_mask)
            masked_hidden, labels = gather_masked_fixed(hidden, masked_positions, masked_labels)
        else:
            hidden = self.bert(input_ids, token_type_ids, attention_mask)
            masked_hidden, labels = gather_masked(hidden, masked_positions, masked_labels)
        decoder = self.bert.embeddings.word_embeddings.weight
        if self.fused_mlm_loss and self.training and torch.is_grad_enabled():
            mlm_logits = None
            mlm_loss, mlm_correct, count_tensor = fused_linear_cross_entropy(
                self.mlm_head.transform(masked_hidden), decoder, self.mlm_head.bias, labels, IGNORE_INDEX)
        else:
            mlm_logits = self.mlm_head(masked_hidden, decoder)
            mlm_loss, mlm_correct, count_tensor = self._mlm_loss(mlm_logits, labels)
        nsp_logits = self.nsp_head(self.bert.pooler(hidden)) if self.config.sentence_head else None
        nsp_loss = (F.cross_entropy(nsp_logits.float(), nsp_labels)
                    if nsp_labels is not None and nsp_logits is not None else None)
        loss = mlm_loss + nsp_loss if nsp_loss is not None else mlm_loss
        return {
            "loss": loss,
            "mlm_loss": mlm_loss,
            "nsp_loss": nsp_loss,
            "mlm_logits": mlm_logits,
            "nsp_logits": nsp_logits,
            "mlm_correct": mlm_correct,
            "mlm_count": count_tensor,
        }

    def _mlm_loss(self, mlm_logits: torch.Tensor, labels: torch.Tensor):
        """-> (mean cross-entropy over the labelled rows, correct, count) from the logits."""
        valid = labels != IGNORE_INDEX
        if self.static_shapes:
            # mean over the real slots without a data-dependent shape or branch (0 when there are none)
            per_slot = F.cross_entropy(mlm_logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="none")
            count_tensor = valid.sum()
            mlm_loss = per_slot.sum() / count_tensor.clamp(min=1)
        else:
            count_tensor = torch.tensor(labels.numel(), device=mlm_logits.device)
            if labels.numel():
                mlm_loss = F.cross_entropy(mlm_logits.float(), labels)
            else:  # no masked token in the batch: a zero that still depends on the graph
                mlm_loss = mlm_logits.float().sum() * 0.0
        with torch.no_grad():
            mlm_correct = ((mlm_logits.argmax(-1) == labels) & valid).sum()
        return mlm_loss, mlm_correct, count_tensor

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def backbone(self) -> BertModel:
        """The encoder used for fine-tuning and features (see training/models/core/architecture.py)."""
        return self.bert

    def untrained_parameter_names(self) -> list[str]:
        """Without a sentence head nothing reads the pooler in pretraining (fine-tuning trains it): see
        training/models/core/architecture.py."""
        return [] if self.config.sentence_head else pooler_parameter_names(self, "bert.")


def pooler_parameter_names(model: nn.Module, prefix: str) -> list[str]:
    """The names of the [CLS] pooler's parameters under `prefix` (e.g. "bert."), as named_parameters gives them."""
    return [name for name, _ in model.named_parameters() if name.startswith(prefix + "pooler.")]


def chance_mlm_accuracy(vocab_size: int) -> float:
    return 1.0 / vocab_size if vocab_size > 0 else math.nan


ARCHITECTURE = Architecture(
    name="BertForPreTraining",
    config_from_dict=BertConfig.from_dict,
    build=BertForPreTraining,
    from_model_config=lambda model_cfg, vocab_size, pad_id: model_cfg.to_bert_config(vocab_size, pad_id),
    description="BERT-style encoder (absolute positions; BERT, RoBERTa, ALBERT, SpanBERT, XLM) with MLM and "
                "sentence-pair (NSP/SOP) heads",
    supports=MEMBER.supports,
)
