"""ELECTRA (Clark et al. 2020): a small masked-LM generator proposes replacements for the masked tokens, and a
discriminator learns to tell, at every real token, whether it was replaced. Both are the family's BertModel.

    from training.models.electra.model import ElectraConfig, ElectraForPreTraining
    model = ElectraForPreTraining(ElectraConfig(vocab_size=30522, hidden_size=256, num_layers=12, num_heads=4,
                                                intermediate_size=1024, max_position_embeddings=512,
                                                embedding_size=128))
    out = model(input_ids, token_type_ids, attention_mask, masked_positions, masked_labels)
    out["loss"].backward()          # generator MLM + disc_weight * replaced-token detection
    encoder = model.backbone()      # the discriminator: what fine-tuning uses

Joint training (the paper's method):
- generator = BertModel of `generator_size` times the discriminator's hidden size, heads and FFN width (same
  layers) + MaskedLMHead, with logits only at the masked positions (sparse);
- replacements are drawn from the generator's softmax with the Gumbel-max trick (torch's global RNG, so the
  trainer's seed and its saved RNG state make them reproducible); no gradient flows through sampling; a sample
  equal to the original token is labelled "original";
- discriminator = BertModel + replaced-token-detection head (dense H->H, GELU, dense H->1) over ALL real tokens;
- loss = MLM_gen + disc_weight * mean binary cross-entropy over real tokens.
Generator and discriminator share the whole embedding block (word, position and token-type embeddings and their
LayerNorm, as the reference code's shared `electra/embeddings` scope); each keeps its own E -> H projection. The
block is owned by the discriminator and only *referenced* by the generator, so the state dict stores each tensor
once (safetensors refuses aliased tensors).

Two-stage training (config.two_stage, the paper's Section 3.2 baseline): for the first `generator_steps` training
forward passes only the generator learns (MLM); at the first pass after that the discriminator is initialised by
copying the generator's weights — embeddings, projection and every encoder layer, the whole encoder except the
discriminator's pooler (the generator has none) — which is why two-stage requires generator_size 1.0 (as the
paper does); from then on the generator runs under no_grad (frozen: no gradient reaches it, AdamW skips it) and
only the discriminator loss trains. Here the generator owns separate embeddings (copied into the discriminator at
the switch), because embeddings shared with a training discriminator would keep changing the "frozen" generator.
The pass counter is the persistent buffer `steps_done`, so checkpoints resume in the right stage.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import ValidationError, model_validator
from pydantic.dataclasses import dataclass
from torch import nn

from bertfactory.errors import ConfigError

from ..core.architecture import Architecture
from ..bert.model import IGNORE_INDEX, BertConfig, BertModel, gather_masked, init_bert_weights
from ..core.config_schema import MODEL_CONFIG, config_problems, settings_dict
from .settings import MEMBER, ElectraSettings
from ..core.heads import MaskedLMHead


@dataclass(frozen=True, config=MODEL_CONFIG)
class ElectraConfig(ElectraSettings, BertConfig):
    """The discriminator's BertConfig fields, then ElectraSettings' (see the module docstring)."""

    @model_validator(mode="after")
    def _valid_generator(self) -> "ElectraConfig":
        try:
            self.generator_config()
        except ValidationError as err:
            raise ValueError(f"the generator at generator_size {self.generator_size} is not a valid encoder: "
                             f"{config_problems(BertConfig, err)}") from None
        return self

    def discriminator_config(self) -> BertConfig:
        return BertConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(BertConfig)})

    def generator_config(self) -> BertConfig:
        """The discriminator scaled by generator_size in hidden size, heads and FFN width (the reference code's
        4 * H_gen FFN and H_gen / 64 heads give the same numbers for Small, Base and Large); same layers, and the
        discriminator's embedding width, since the embeddings are shared."""
        scale = self.generator_size
        return dataclasses.replace(
            self.discriminator_config(),
            hidden_size=max(1, round(self.hidden_size * scale)),
            num_heads=max(1, round(self.num_heads * scale)),
            intermediate_size=max(1, round(self.intermediate_size * scale)),
            embedding_size=self.embedding_width,
        )


class ReplacedTokenDetectionHead(nn.Module):
    """dense(H -> H) -> GELU -> dense(H -> 1): one logit per token, > 0 = "replaced" (names as HF's
    ElectraDiscriminatorPredictions)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dense_prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] -> [B, T]."""
        return self.dense_prediction(F.gelu(self.dense(hidden))).squeeze(-1)


def gumbel_sample(logits: torch.Tensor, row_seeds: torch.Tensor | None = None,
                  per_row: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of `logits` [N, V], distributed as softmax(logits): argmax(logits + Gumbel noise) (the
    reference code's sample_from_softmax, temperature 1). The noise comes from torch's global RNG on the logits'
    device, or with `row_seeds` [B] and `per_row` [B] (how many of the N predictions each batch row holds, in
    order) from one generator per batch row seeded with its seed: then a sample's replacements depend on the
    sample, not on the rank or batch slot that trains it (training/data.py row_seeds)."""
    if row_seeds is None:
        uniform = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    else:
        parts = []
        for seed, count in zip(row_seeds.tolist(), per_row.tolist()):
            generator = torch.Generator(device=logits.device).manual_seed(int(seed))
            parts.append(torch.rand((count, logits.shape[1]), generator=generator, device=logits.device,
                                    dtype=torch.float32))
        uniform = torch.cat(parts) if parts else logits.new_empty((0, logits.shape[1]), dtype=torch.float32)
    gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
    return (logits.float() + gumbel).argmax(-1)


def replace_masked(input_ids: torch.Tensor, masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                   tokens: torch.Tensor) -> torch.Tensor:
    """input_ids [B, T] with the N real masked positions (labels != -100, row-major as gather_masked) set to
    `tokens` [N]."""
    b, t = input_ids.shape
    real = masked_labels != IGNORE_INDEX
    flat_index = (masked_positions + torch.arange(b, device=input_ids.device)[:, None] * t)[real]
    return input_ids.reshape(-1).index_copy(0, flat_index, tokens.to(input_ids.dtype)).view(b, t)


class ElectraForPreTraining(nn.Module):
    """Generator (small BertModel + MLM head) and discriminator (BertModel + replaced-token detection head);
    see the module docstring."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.config = config
        self.discriminator = BertModel(config.discriminator_config())
        self.discriminator_head = ReplacedTokenDetectionHead(config.hidden_size)
        generator_config = config.generator_config()
        generator = BertModel(generator_config)
        del generator.pooler  # no sentence-level head in the generator
        if not config.two_stage:
            # Share the discriminator's embedding module by reference without registering it a second time:
            # registered twice, the state dict would hold every embedding tensor under two names (aliases that
            # safetensors refuses); as an instance attribute BertModel.forward still finds it as self.embeddings.
            del generator.embeddings
            object.__setattr__(generator, "embeddings", self.discriminator.embeddings)
        self.generator = generator
        self.generator_head = MaskedLMHead(generator_config.hidden_size, config.vocab_size, config.layer_norm_eps,
                                           config.embedding_width)
        init_bert_weights(self.discriminator_head, config.initializer_range)
        init_bert_weights(self.generator_head, config.initializer_range)
        if config.two_stage:
            self.register_buffer("steps_done", torch.zeros((), dtype=torch.long))

    # ------------------------------------------------------------------------------------------ two-stage

    def stage(self) -> str:
        """'joint', or for two-stage 'generator' (first generator_steps training passes) then 'discriminator'."""
        if not self.config.two_stage:
            return "joint"
        return "generator" if int(self.steps_done) < self.config.generator_steps else "discriminator"

    @torch.no_grad()
    def init_discriminator_from_generator(self) -> None:
        """Copy the generator's encoder (embeddings, E->H projection, every layer) into the discriminator; the
        discriminator's pooler (the generator has none) and heads keep their initialisation."""
        target = self.discriminator.state_dict()
        for name, tensor in self.generator.state_dict().items():
            target[name].copy_(tensor)

    # -------------------------------------------------------------------------------------------- forward

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor,
                masked_positions: torch.Tensor, masked_labels: torch.Tensor,
                nsp_labels: torch.Tensor | None = None,
                row_seeds: torch.Tensor | None = None) -> dict[str, torch.Tensor | None]:
        """input_ids [B, T] with the masks applied; masked_positions / masked_labels [B, P] (-100 = padding);
        nsp_labels is accepted and ignored (ELECTRA has no sentence-pair loss); row_seeds [B]: seeds of the rows'
        replacement draws (gumbel_sample; None = torch's global RNG). Returns loss, mlm_loss (generator),
        disc_loss, mlm_logits [N, V] (generator, at the N real masked positions), disc_logits [B, T],
        disc_labels [B, T] (1 = replaced), corrupted_ids [B, T] (the discriminator's input), mlm_correct /
        mlm_count, disc_correct / disc_count (over real tokens) and disc_replaced (real tokens labelled replaced);
        the disc_* entries are None in the generator stage of two-stage training."""
        stage = self.stage()
        if stage != "joint" and self.training:
            if int(self.steps_done) == self.config.generator_steps:
                self.init_discriminator_from_generator()
            self.steps_done += 1
        with torch.set_grad_enabled(torch.is_grad_enabled() and stage != "discriminator"):  # frozen generator
            generator_hidden = self.generator(input_ids, token_type_ids, attention_mask)
            masked_hidden, labels = gather_masked(generator_hidden, masked_positions, masked_labels)
            mlm_logits = self.generator_head(masked_hidden, self.generator.embeddings.word_embeddings.weight)
            count = labels.numel()
            if count:
                mlm_loss = F.cross_entropy(mlm_logits.float(), labels)
            else:  # no masked token in the batch: a zero that still depends on the graph
                mlm_loss = mlm_logits.float().sum() * 0.0
        device = input_ids.device
        out: dict[str, torch.Tensor | None] = {
            "mlm_loss": mlm_loss, "mlm_logits": mlm_logits, "mlm_count": torch.tensor(count, device=device),
            "disc_loss": None, "disc_logits": None, "disc_labels": None, "corrupted_ids": None,
            "disc_correct": None, "disc_count": None, "disc_replaced": None,
        }
        with torch.no_grad():
            out["mlm_correct"] = (mlm_logits.argmax(-1) == labels).sum()
        if stage == "generator":
            out["loss"] = mlm_loss
            return out

        with torch.no_grad():  # replacements carry no gradient (the generator is trained by its MLM loss only)
            per_row = (masked_labels != IGNORE_INDEX).sum(dim=1) if row_seeds is not None else None
            sampled = gumbel_sample(mlm_logits.detach(), row_seeds, per_row)
            corrupted = replace_masked(input_ids, masked_positions, masked_labels, sampled)
            original = replace_masked(input_ids, masked_positions, masked_labels, labels)
            real = attention_mask.bool()
            disc_labels = (corrupted != original) & real  # a sample equal to the original counts as original
        disc_logits = self.discriminator_head(self.discriminator(corrupted, token_type_ids, attention_mask))
        target = disc_labels.to(torch.float32)
        disc_loss = F.binary_cross_entropy_with_logits(disc_logits.float()[real], target[real])
        weighted = self.config.disc_weight * disc_loss
        out.update({
            "loss": weighted if stage == "discriminator" else mlm_loss + weighted,
            "disc_loss": disc_loss, "disc_logits": disc_logits, "disc_labels": disc_labels.long(),
            "corrupted_ids": corrupted,
        })
        with torch.no_grad():
            out["disc_correct"] = ((disc_logits > 0) == disc_labels)[real].sum()
            out["disc_count"] = real.sum()
            out["disc_replaced"] = disc_labels.sum()
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # the shared embeddings once

    def untrained_parameter_names(self) -> list[str]:
        """What the current stage leaves untrained (see training/models/core/architecture.py): the discriminator's pooler
        always (replaced-token detection is per token); in two-stage training the discriminator and its head
        during the generator stage, the frozen generator and its head after it."""
        stage = self.stage()
        idle = ("discriminator.pooler.",)
        if stage == "generator":
            idle = ("discriminator.", "discriminator_head.")
        elif stage == "discriminator":
            idle = ("discriminator.pooler.", "generator.", "generator_head.")
        return [name for name, _ in self.named_parameters() if name.startswith(idle)]

    def backbone(self) -> BertModel:
        """The discriminator encoder: what ELECTRA fine-tunes (see training/models/core/architecture.py)."""
        return self.discriminator


def electra_config_from_model_config(model_cfg: Any, vocab_size: int, pad_token_id: int) -> ElectraConfig:
    """A recipe's `model` section (training.config.ModelConfig: the discriminator, plus `model.electra`) ->
    ElectraConfig; `model.electra` null takes the paper's defaults."""
    encoder = model_cfg.to_bert_config(vocab_size, pad_token_id)
    try:
        return ElectraConfig(**encoder.to_dict(), **settings_dict(model_cfg.electra))
    except ValidationError as err:
        raise ConfigError(f"model / model.electra: {config_problems(ElectraConfig, err)}") from None


ARCHITECTURE = Architecture(
    name="ElectraForPreTraining",
    config_from_dict=ElectraConfig.from_dict,
    build=ElectraForPreTraining,
    from_model_config=electra_config_from_model_config,
    description="ELECTRA: a small MLM generator proposes replacements, a discriminator (the backbone) detects "
                "them at every token; shared embeddings; joint or two-stage training",
    settings=MEMBER.settings,
)
