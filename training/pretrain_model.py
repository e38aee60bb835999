"""The model of a pretraining run: built from the seed (or warm-started from pretrain.init_from), switched to the
options the recipe asks for and its architecture declares (unpad, static_shapes), compiled, and under
parallelism fsdp sharded over the processes.

    model = build_model(data, cfg, device, dist, tokenizer_sha256, tokenizer_path)   # data: training/pretrain_data.py

The options were checked against the architecture's declared capabilities when the recipe was loaded
(training/recipe_checks.py); a checkpoint loaded later (training/resume.py) replaces these weights.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path

import numpy as np
import torch

from bertfactory.cpu_kernels import match_inductor
from bertfactory.errors import BertfactoryError, ConfigError

from .checkpoint import CONFIG_FILE, load_weights, MODEL_FILE, read_checkpoint_config, verify_weights
from .distributed import DistContext
from .fsdp import shard_model
from .models.core.embeddings import BertEmbeddings
from .pretrain_config import PretrainConfig
from .pretrain_data import TrainingData
from .trainer import freeze_untrained

logger = logging.getLogger("training.pretrain")  # the stage's log, whichever of its modules writes


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def warm_start(model: torch.nn.Module, directory: Path, architecture: str, tokenizer_sha256: str,
               tokenizer_path: Path | None = None) -> None:
    """pretrain.init_from: the weights of another model directory of the same architecture and tokenizer, or of a
    Hugging Face BERT directory (`sample:NAME` names a fetched one) with the same vocabulary as the shards'
    tokenizer (`tokenizer_path`): its encoder, the heads it lacks initialised fresh from pretrain.seed and logged."""
    from bertfactory.samples import resolve_input
    from .hf import is_hf_model_dir
    from .hf.bert import warm_start_from_hf

    directory = resolve_input(str(directory))
    if is_hf_model_dir(directory):
        fresh, left_out = warm_start_from_hf(model, directory, tokenizer_path)
        for part in fresh:
            logger.warning("%s initialised fresh: not in %s", part, directory)
        for part in left_out:
            logger.info("%s of %s left out: this objective trains none", part, directory)
        logger.info("pretrain: starting from the Hugging Face weights of %s", directory)
        return
    doc = read_checkpoint_config(directory)
    if doc["architecture"] != architecture:
        raise ConfigError(f"pretrain.init_from {directory} holds a {doc['architecture']}, but objective trains a "
                          f"{architecture}")
    if doc["tokenizer"]["sha256"] != tokenizer_sha256:
        raise ConfigError(f"pretrain.init_from {directory} was trained with another tokenizer (sha256 "
                          f"{doc['tokenizer']['sha256']}) than the shards' ({tokenizer_sha256}); token ids would differ")
    _check_position_tables(model, directory, doc["model"].get("max_position_embeddings"))
    stored = _check_same_model(model, directory, doc, architecture)
    verify_weights(directory, doc)  # a training checkpoint (checkpoints/step-N) as init_from
    ours = getattr(model.config, "sentence_head", None)
    if stored.get("sentence_head", ours) == ours:
        load_weights(model, directory / MODEL_FILE)
    else:  # another objective's sentence head (BERT's NSP under objective mlm, or none under mlm_nsp)
        _load_without_sentence_head(model, directory)
    logger.info("pretrain: starting from the weights of %s", directory)


# model fields a warm start may change: they decide how the weights are trained (dropout, loss weights, memory,
# stages), not what a weight means; max_position_embeddings is _check_position_tables's (a rotary member may grow
# it), the rotary bases and the window are what a length-extension phase retunes, the sentence head follows the
# objective (_load_without_sentence_head)
_WARM_START_MAY_CHANGE = frozenset({
    "hidden_dropout", "attention_dropout", "dropout", "initializer_range", "max_position_embeddings",
    "sentence_head", "global_rope_theta", "local_rope_theta", "local_attention", "disc_weight", "two_stage",
    "generator_steps", "predict_fraction", "mem_len", "train_segments", "language_id"})


def _check_same_model(model: torch.nn.Module, directory: Path, doc: dict, architecture: str) -> dict:
    """The recipe's model section must be init_from's, field for field (docs/recipes.md): a field of the same
    shapes but another meaning (num_heads splits the same Q/K/V matrices into other heads, layer_norm_eps) would
    otherwise load silently and compute something else, and one that changes shapes would fail as a list of
    tensor names. One ConfigError naming every differing recipe key. Returns init_from's config as a dict."""
    from .models.registry import get_architecture

    arch = get_architecture(architecture)
    stored = dataclasses.asdict(arch.config_from_dict(doc["model"], f"{directory / CONFIG_FILE} field 'model'"))
    ours = dataclasses.asdict(model.config)
    sub = dict.fromkeys((f.name for f in dataclasses.fields(arch.settings[1])), arch.settings[0]) \
        if arch.settings is not None else {}
    differ = [f"model.{sub[name] + '.' if name in sub else ''}{name} (init_from {stored[name]!r}, recipe "
              f"{ours[name]!r})" for name in ours
              if name in stored and name not in _WARM_START_MAY_CHANGE and stored[name] != ours[name]]
    if differ:
        raise ConfigError(f"pretrain.init_from {directory} is another model than the recipe's: {', '.join(differ)}; "
                          "set the model section to init_from's")
    return stored


def _load_without_sentence_head(model: torch.nn.Module, directory: Path) -> None:
    """init_from's weights where it was trained with another sentence loss than this objective: its NSP / SOP head
    is left out when this objective trains none, or starts fresh (from pretrain.seed) when init_from has none."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from .hf.files import load_mapped

    path = directory / MODEL_FILE
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ConfigError(f"pretrain.init_from: {path} is not a readable safetensors file: {err}") from None
    fresh, left_out = load_mapped(model, state, path, directory / CONFIG_FILE, {"nsp_head.": "sentence-pair head"})
    for part in fresh:
        logger.warning("%s initialised fresh: not in %s", part, directory)
    for part in left_out:
        logger.info("%s of %s left out: this objective trains none", part, directory)


def _check_position_tables(model: torch.nn.Module, directory: Path, stored: int | None) -> None:
    """A sequence-length extension phase (a longer model.max_position_embeddings than init_from's) warm-starts
    a rotary member (ModernBERT: no weight per position) as it is; a learned position table cannot change size
    by warm start, so that is refused here in one line instead of as a tensor-shape mismatch."""
    for module in model.modules():
        table = module.position_embeddings if isinstance(module, BertEmbeddings) else None
        if table is not None and stored is not None and table.num_embeddings != stored:
            raise ConfigError(
                f"pretrain.init_from {directory} has a learned position table of {stored} positions but "
                f"model.max_position_embeddings is {table.num_embeddings}: a learned-position model cannot change "
                f"its length by warm start; keep {stored}, or extend a rotary member (ModernBERT)")


def compile_model(model: torch.nn.Module, cfg: PretrainConfig) -> None:
    """pretrain.compile: torch.compile the model in place (parameter names and checkpoints stay the eager model's).
    The model's forward computes its loss (the objectives call it and read `loss`), so the loss is compiled with
    it. Shapes: dynamo specialises on the first batch's shape and, on a second one, recompiles once with the
    changing sizes symbolic (automatic dynamic shapes), so full-length rows (every recipe's batches at
    max_seq_len) or a few length buckets compile once or twice and never again; the trainer writes the number of
    graphs compiled so far to metrics.jsonl (`compiled_graphs`) to show it. Left to the recipe: without
    pretrain.static_shapes the sparse MLM head's boolean gather (data-dependent size) splits the graph and reads the
    number of masked tokens back every step, and pretrain.unpad's packed layout packs the real tokens with `nonzero`
    (one host read per forward; unpad_layout fixed reads nothing) - both logged here. Mode: pretrain.compile_mode.
    "default" (model.compile(), as before the option): no CUDA graphs and no max-autotune. "reduce-overhead": CUDA
    graphs, which need one static shape and no host read in the step (PretrainConfig refuses it without
    static_shapes, with unpad's packed layout or a batch ramp) and pay where a step is short enough for launch
    overhead to matter; each replay overwrites what the previous one returned, so the trainer marks every
    micro-step's start and copies what it keeps (TrainerSettings.cudagraphs, training/trainer.py).
    "max-autotune-no-cudagraphs": minutes of autotuning per shape. benchmarks/gpu_step.py --compile-mode measures
    the modes on its own step."""
    if not cfg.static_shapes and not cfg.unpad:
        logger.info("pretrain.compile without pretrain.static_shapes: the masked-token gather has a data-dependent "
                    "size, so the compiled step is split there and waits for the device once per step; "
                    "pretrain.static_shapes: true keeps it in one graph")
    if cfg.unpad and cfg.unpad_layout == "packed":
        logger.info("pretrain.compile with pretrain.unpad: the packing of the real tokens (nonzero, longest row) is "
                    "read on the host once per forward; the packed shapes become symbolic after the first change "
                    "(pretrain.unpad_layout fixed reads nothing and keeps one shape)")
    match_inductor()
    if cfg.compile_mode == "default":
        model.compile()
    else:
        model.compile(mode=cfg.compile_mode)


def build_model(data: TrainingData, cfg: PretrainConfig, device: torch.device, dist: DistContext,
                tokenizer_sha256: str, tokenizer_path: Path | None = None) -> torch.nn.Module:
    seed_everything(cfg.seed)
    model = data.architecture.build(data.arch_config).to(device)
    if cfg.init_from:  # a resumed checkpoint replaces these weights, as it replaces a random init
        failure = None
        try:  # init_from is a node's own path (run_checks.NODE_LOCAL_FIELDS): one node may lack it
            warm_start(model, Path(cfg.init_from), data.objective.architecture, tokenizer_sha256, tokenizer_path)
        except BertfactoryError as err:
            failure = err
        dist.fail_together(failure, "warm-start from pretrain.init_from")
    # each declared by the architecture (Architecture.supports, refused otherwise by training/recipe_checks.py);
    # the attributes are capabilities.MODEL_SWITCHES, which a model rebuilt mid-run (stacking) takes over
    if cfg.unpad:
        model.unpad_by_default = True
        model.unpad_layout = cfg.unpad_layout
    if cfg.static_shapes:
        model.static_shapes = True
    if cfg.fused_mlm_loss:
        model.fused_mlm_loss = True
    if cfg.compile:
        compile_model(model, cfg)
    if cfg.parallelism == "fsdp":  # before the optimiser: it must hold the shards (training/fsdp.py)
        freeze_untrained(model)  # FSDP2 takes the frozen set at sharding (Trainer._sync_trainable)
        model = shard_model(model, dist, device, cfg.fsdp, cfg.bf16)
    return model
