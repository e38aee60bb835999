"""pretrain.freeze_encoder_steps: a head warm-up. For the first N optimiser steps only what is not the model's
encoder trains; from step N on, everything. The use: continuing a published encoder (TAPT, flows/tapt.py) whose
MLM head is missing and starts random - without the warm-up the random head's gradients reach the encoder from the
first step.

    freeze = install_encoder_freeze(model, cfg.freeze_encoder_steps)   # before the Trainer is built
    trainer = Trainer(model, ...)
    freeze.follow(trainer)                                              # training/pretrain_trainer.py does both

What is frozen: the parameters of `model.backbone()` - the encoder fine-tuning and feature extraction use (BERT:
embeddings, layers, pooler), named as the whole model's named_parameters() names them, so a tensor the backbone
shares with a head counts as the backbone's. BERT's MLM decoder IS the word-embedding matrix (tied, passed to the
head at call time, training/models/core/heads.py): training the decoder would move the encoder's input embeddings,
so it stays frozen with them, and the warm-up trains the head's transform (dense, LayerNorm) and its output bias
only (with mlm_nsp, also the NSP classifier; the pooler is the backbone's). ELECTRA: the discriminator's backbone,
and the embeddings its generator shares, are frozen; the generator's layers and both heads train.

How: the model's `untrained_parameter_names()` - the set the trainer already freezes every step (requires_grad
off) and gives DDP the rest of (training/trainer.py, `_sync_trainable`) - is extended with the encoder while
`trainer.step < N`. So a frozen tensor gets no gradient: AdamW / LAMB / Adafactor skip it entirely (no moment, no
step count, no weight decay: its bytes do not change), the gradient clipping norm is the head's alone, and the
backward pass stops at the head (a cheap warm-up). At step N the set shrinks, the trainer unfreezes the encoder
(and re-wraps DDP over every parameter); its optimiser state starts then, as a fresh parameter's would. The set
is a function of the step alone, so a run resumed inside or after the warm-up continues exactly as an
uninterrupted one, and every DDP rank freezes the same tensors at the same step. The learning-rate schedule is the
run's, counted from step 0 for every parameter: the encoder starts at the schedule's value of step N.
Not with parallelism fsdp or stacking (refused by PretrainConfig): both fix the trained set once.
"""

from __future__ import annotations

import logging
from typing import Callable

from torch import nn

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def encoder_parameter_names(model: nn.Module) -> list[str]:
    """The names (as `model.named_parameters()` gives them) of the parameters of `model.backbone()`, tied ones
    included under the name the whole model lists them by."""
    encoder = {id(p) for p in model.backbone().parameters()}
    return [name for name, param in model.named_parameters() if id(param) in encoder]


class EncoderFreeze:
    """Extends `model.untrained_parameter_names()` with the encoder while the followed step is below `steps`."""

    def __init__(self, model: nn.Module, steps: int):
        if steps < 1:
            raise ValueError(f"a head warm-up needs at least one step (got {steps})")
        self.steps = steps
        self.encoder = frozenset(encoder_parameter_names(model))
        self.trained_during_warmup = [n for n, _ in model.named_parameters() if n not in self.encoder]
        if not self.trained_during_warmup:
            raise ValueError("pretrain.freeze_encoder_steps: this model has nothing outside its encoder to warm up")
        self._own = model.untrained_parameter_names  # the architecture's own rule (bound method)
        self._step: Callable[[], int] = lambda: 0  # until follow(): a new trainer starts at step 0
        self._logged: bool | None = None
        # an instance attribute: the trainer calls it on the bare module (inside DDP / compile, the same object)
        model.untrained_parameter_names = self.untrained_parameter_names

    def follow(self, trainer) -> None:
        """Read the step from `trainer` (`trainer.step`: optimiser steps completed, restored on resume)."""
        self._step = lambda: trainer.step

    def active(self) -> bool:
        return self._step() < self.steps

    def untrained_parameter_names(self) -> list[str]:
        own = list(self._own())
        frozen = self.active()
        if frozen != self._logged:
            self._logged = frozen
            if frozen:
                logger.info("pretrain: head warm-up: the encoder (%d parameter tensors, embeddings and the tied MLM "
                            "decoder included) is frozen until step %d; training %s", len(self.encoder), self.steps,
                            ", ".join(self.trained_during_warmup))
            else:
                logger.info("pretrain: step %d: head warm-up over, the encoder trains from now on", self._step())
        if not frozen:
            return own
        return own + sorted(self.encoder.difference(own))


def install_encoder_freeze(model: nn.Module, steps: int) -> EncoderFreeze | None:
    """An EncoderFreeze on `model` for `steps` steps; None (model unchanged) when steps is 0."""
    return EncoderFreeze(model, steps) if steps else None
