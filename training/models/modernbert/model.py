"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer"): the family's encoder core built the modern
way, trained with masked LM alone (objective `modernbert_mlm`, 30 % masking in its recipes).

    from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM
    model = ModernBertForMaskedLM(ModernBertConfig(vocab_size=8000, hidden_size=128, num_layers=3, num_heads=2,
                                                   intermediate_size=192, max_position_embeddings=1024))
    out = model(input_ids, token_type_ids, attention_mask, masked_positions, masked_labels)   # as BERT's
    out["loss"].backward()

What differs from BERT, each an option of the shared core (embeddings.py, attention.py, encoder.py, heads.py):
- rotary position embeddings (rotary.py) in every attention layer, no learned positions, no segment embeddings;
- alternating attention: layer i attends globally when i % global_attn_every_n_layers == 0 (RoPE base
  global_rope_theta), else to the tokens at most local_attention / 2 positions away (sliding window, base
  local_rope_theta);
- pre-LN layers, a LayerNorm after the embeddings (so the first layer's attention has no input norm) and a final
  LayerNorm after the last layer; no bias in any projection or LayerNorm;
- GeGLU feed-forward: dense H -> 2I, GELU(first half) * second half, dense I -> H;
- the MLM head: dense (no bias) -> GELU -> LayerNorm (no bias) -> decoder tied to the word embeddings, with bias.
The forward pass is BertForPreTraining's (logits only at the masked positions, the unpadded path, static shapes);
this model has no sentence-pair head. Dropout: `hidden_dropout` after the embedding norm and after each block's
output projection, `attention_dropout` on the attention probabilities (the published model uses none).
transformers' ModernBertForMaskedLM computes the same logits (training/hf/modernbert.py). The [CLS] pooler is
there for fine-tuning (the backbone interface); no pretraining loss reads it.

Unpadded (`unpad=True`, pretrain.unpad): the real tokens packed to [N, H], attention per sequence through varlen.py
with the window on the local layers; the rotary angles follow the tokens' columns, as in the padded path.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from pydantic import Field, ValidationError, model_validator
from pydantic.dataclasses import dataclass
from torch import nn

from bertfactory.errors import ConfigError

from ..core.architecture import Architecture
from ..core.attention import padding_mask
from ..bert.model import BertConfig, BertForPreTraining
from ..core.config_schema import MODEL_CONFIG, config_problems, settings_dict
from .settings import MEMBER, ModernBertSettings
from ..core.embeddings import BertEmbeddings
from ..core.encoder import Encoder, LayerStyle
from ..core.heads import MaskedLMHead, Pooler
from ..core.rotary import rotary_angles
from ..core.varlen import PackedSequences, sliding_window_band

MODERN_LAYERS = LayerStyle(pre_norm=True, bias=False, gated_ffn=True, first_attention_norm=False)


@dataclass(frozen=True, config=MODEL_CONFIG)
class ModernBertConfig(ModernBertSettings, BertConfig):
    """BertConfig's encoder fields (with ModernBERT's defaults where BERT's differ), then ModernBertSettings'.
    Fields of other members (factorised embeddings, layer sharing, languages, a sentence head, segments) are
    refused."""

    max_position_embeddings: int = Field(ge=1, description="the longest sequence the model takes (positions are "
                                         "rotary, so nothing is learned per position; transformers' value)")
    type_vocab_size: int = Field(1, ge=1, description="must be 1: ModernBERT has no segment embeddings (segment "
                                 "ids are not read)")
    hidden_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout after the embedding norm and after "
                                  "each block's output projection")
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on attention probabilities")
    layer_norm_eps: float = Field(1e-5, gt=0.0, description="LayerNorm epsilon")
    sentence_head: bool = Field(False, description="must be false: ModernBERT trains masked LM alone")

    @model_validator(mode="after")
    def _modern_encoder(self) -> "ModernBertConfig":
        problems = []
        for name, allowed, why in (
            ("type_vocab_size", 1, "ModernBERT has no segment embeddings"),
            ("embedding_size", None, "no factorised embeddings"),
            ("share_layers", "none", "no cross-layer sharing"),
            ("num_languages", 0, "no language embeddings"),
            ("sentence_head", False, "masked LM only, no sentence-pair head"),
        ):
            if getattr(self, name) != allowed:
                problems.append(f"{name} must be {allowed!r} ({why}), got {getattr(self, name)!r}")
        if (self.hidden_size // self.num_heads) % 2:
            problems.append(f"hidden_size / num_heads = {self.hidden_size // self.num_heads} must be even (rotary "
                            "embeddings rotate pairs of dimensions)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def is_global(self, layer: int) -> bool:
        return layer % self.global_attn_every_n_layers == 0


def init_modernbert_weights(model: nn.Module, config: ModernBertConfig, prefix: str = "") -> None:
    """ModernBERT's initialisation (transformers' ModernBertPreTrainedModel._init_weights): normal weights truncated
    at 2 std, std initializer_range for the embeddings and the input projections (query/key/value, the GeGLU's
    dense, the pooler), initializer_range / sqrt(2 L) for the output projections and the head's dense layer;
    LayerNorm weights 1, biases 0. `prefix`: the module's name in the model (the output projections are found by
    name)."""
    std = config.initializer_range
    out_std = std / math.sqrt(2.0 * config.num_layers)
    for name, module in model.named_modules(prefix=prefix):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            scale = out_std if name.endswith(("output.dense", "mlm_head.dense")) else std
            nn.init.trunc_normal_(module.weight, mean=0.0, std=scale, a=-2 * scale, b=2 * scale)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, MaskedLMHead):
            nn.init.zeros_(module.bias)


class ModernBertModel(nn.Module):
    """The encoder (BertModel's interface: `forward(input_ids, token_type_ids, attention_mask, ...)`, `pooler`,
    `config`): embeddings -> LayerNorm -> L pre-LN layers, global and sliding-window attention alternating, each
    with its rotary base -> final LayerNorm. Hidden states are (embeddings, layer 1, ..., layer L), the last one
    after the final norm (it is the encoder output)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(
            config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size,
            config.layer_norm_eps, config.hidden_dropout, config.pad_token_id, learned_positions=False,
            token_types=False, norm_bias=False,
        )
        self.encoder = Encoder(
            config.num_layers, style=MODERN_LAYERS, hidden_size=config.hidden_size, num_heads=config.num_heads,
            intermediate_size=config.intermediate_size, hidden_dropout=config.hidden_dropout,
            attention_dropout=config.attention_dropout, layer_norm_eps=config.layer_norm_eps,
        )
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=False)
        self.pooler = Pooler(config.hidden_size)
        init_modernbert_weights(self, config)

    def _per_layer(self, positions: torch.Tensor, global_mask, local_mask, rotary_shape) -> list:
        """(mask, rotary) per layer: both attention kinds' rotary angles computed once."""
        head_dim = self.config.hidden_size // self.config.num_heads
        angles = {}
        for kind, theta in (("global", self.config.global_rope_theta), ("local", self.config.local_rope_theta)):
            cos, sin = rotary_angles(positions, head_dim, theta)
            angles[kind] = (rotary_shape(cos), rotary_shape(sin))
        return [(global_mask, angles["global"]) if self.config.is_global(i) else (local_mask, angles["local"])
                for i in range(self.config.num_layers)]

    def _check_length(self, seq_len: int) -> None:
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {seq_len} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False,
                position_ids: torch.Tensor | None = None, unpad: bool | str = False):
        """input_ids, attention_mask: [B, T] (mask 1 = real, 0 = pad; token_type_ids are not read) -> last hidden
        [B, T, H]; with output_hidden_states, (last, (embeddings, layer 1, ..., layer L)). position_ids [B, T]
        default to the columns 0..T-1. `unpad`: True = run on the real tokens only, same outputs with zeros on
        padding; "packed" = the same, returning (packed states, each [N, H], PackedSequences) (varlen.py); "fixed" =
        as "packed" in the fixed layout (every slot a row, [B*T, H]; PackedSequences.fixed_rows)."""
        b, t = input_ids.shape
        self._check_length(t)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(t, device=input_ids.device).expand(b, t)
        window = self.config.local_attention // 2
        if unpad:
            layout = PackedSequences.from_attention_mask(attention_mask, fixed=unpad == "fixed")
            embedded = self.embeddings(layout.pack(input_ids)[None], None)[0]  # [N, H]
            per_layer = self._per_layer(layout.pack(position_ids), layout,
                                        dataclasses.replace(layout, window=window), lambda x: x[:, None])
            layers = self.encoder(embedded, per_layer=per_layer)
            states = [embedded, *layers[:-1], self.final_norm(layers[-1])]
            if unpad in ("packed", "fixed"):
                return states, layout
            padded = tuple(layout.unpack(x) for x in states)
            return (padded[-1], padded) if output_hidden_states else padded[-1]
        embedded = self.embeddings(input_ids, None)
        global_mask = padding_mask(attention_mask)
        local_mask = global_mask & sliding_window_band(attention_mask.bool(), window)
        layers = self.encoder(embedded, per_layer=self._per_layer(position_ids, global_mask, local_mask,
                                                                  lambda x: x[:, None]))
        last = self.final_norm(layers[-1])
        if output_hidden_states:
            return last, (embedded, *layers[:-1], last)
        return last


class ModernBertForMaskedLM(BertForPreTraining):
    """ModernBertModel + ModernBERT's MLM head. BertForPreTraining's forward, loss and metrics (masked LM alone:
    config.sentence_head is always false), interface and capabilities over another encoder and head."""

    def __init__(self, config: ModernBertConfig):
        nn.Module.__init__(self)  # not BertForPreTraining's: that builds BERT's encoder and head
        self.config = config
        self.bert = ModernBertModel(config)
        self.mlm_head = MaskedLMHead(config.hidden_size, config.vocab_size, config.layer_norm_eps, bias=False)
        init_modernbert_weights(self.mlm_head, config, prefix="mlm_head")
        self.unpad_by_default = False  # pretrain.unpad sets it (see BertForPreTraining)
        self.unpad_layout = "packed"  # pretrain.unpad_layout sets it (see BertForPreTraining)
        self.static_shapes = False  # pretrain.static_shapes sets it
        self.fused_mlm_loss = False  # pretrain.fused_mlm_loss sets it


def modernbert_config_from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> ModernBertConfig:
    """A recipe's `model` section (training.config.ModelConfig: the encoder, plus `model.modernbert`) ->
    ModernBertConfig; `model.modernbert` null takes ModernBERT-base's attention pattern and rotary bases."""
    encoder = {**model_cfg.to_bert_config(vocab_size, pad_token_id).to_dict(), "sentence_head": False}
    try:
        return ModernBertConfig(**encoder, **settings_dict(model_cfg.modernbert))
    except ValidationError as err:
        raise ConfigError(f"model / model.modernbert: {config_problems(ModernBertConfig, err)}") from None


ARCHITECTURE = Architecture(
    name="ModernBertForMaskedLM",
    config_from_dict=ModernBertConfig.from_dict,
    build=ModernBertForMaskedLM,
    from_model_config=modernbert_config_from_model_config,
    description="ModernBERT: pre-LN encoder without biases, rotary positions, GeGLU, global and sliding-window "
                "attention alternating, final norm; masked LM",
    supports=MEMBER.supports,
    settings=MEMBER.settings,
)
