"""The model of a pretraining run: built from the seed (or warm-started from pretrain.init_from), switched to the
options the recipe asks for and its architecture declares (unpad, static_shapes), compiled, and under
parallelism fsdp sharded over the processes.

    model = build_model(data, cfg, device, dist, tokenizer_sha256)   # data: training/pretrain_data.py

The options were checked against the architecture's declared capabilities when the recipe was loaded
(training/recipe_checks.py); a checkpoint loaded later (training/resume.py) replaces these weights.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch

from bertfactory.errors import ConfigError

from .checkpoint import load_weights, MODEL_FILE, read_checkpoint_config
from .distributed import DistContext
from .fsdp import shard_model
from .pretrain_config import PretrainConfig
from .pretrain_data import TrainingData
from .trainer import freeze_untrained

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def warm_start(model: torch.nn.Module, directory: Path, architecture: str, tokenizer_sha256: str) -> None:
    """pretrain.init_from: the weights of another model directory of the same architecture and tokenizer."""
    doc = read_checkpoint_config(directory)
    if doc["architecture"] != architecture:
        raise ConfigError(f"pretrain.init_from {directory} holds a {doc['architecture']}, but objective trains a "
                          f"{architecture}")
    if doc["tokenizer"]["sha256"] != tokenizer_sha256:
        raise ConfigError(f"pretrain.init_from {directory} was trained with another tokenizer (sha256 "
                          f"{doc['tokenizer']['sha256']}) than the shards' ({tokenizer_sha256}); token ids would differ")
    load_weights(model, directory / MODEL_FILE)
    logger.info("pretrain: starting from the weights of %s", directory)


def build_model(data: TrainingData, cfg: PretrainConfig, device: torch.device, dist: DistContext,
                tokenizer_sha256: str) -> torch.nn.Module:
    seed_everything(cfg.seed)
    model = data.architecture.build(data.arch_config).to(device)
    if cfg.init_from:  # a resumed checkpoint replaces these weights, as it replaces a random init
        warm_start(model, Path(cfg.init_from), data.objective.architecture, tokenizer_sha256)
    # both declared by the architecture (Architecture.supports, refused otherwise by training/recipe_checks.py)
    if cfg.unpad:
        model.unpad_by_default = True
    if cfg.static_shapes:
        model.static_shapes = True
    if cfg.compile:
        model.compile()  # in place: parameter names and checkpoints stay those of the eager model
    if cfg.parallelism == "fsdp":  # before the optimiser: it must hold the shards (training/fsdp.py)
        freeze_untrained(model)  # FSDP2 takes the frozen set at sharding (Trainer._sync_trainable)
        model = shard_model(model, dist, device, cfg.fsdp, cfg.bf16)
    return model
