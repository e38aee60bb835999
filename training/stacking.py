"""Progressive stacking (Gong et al. 2019, "Efficient Training of BERT by Progressively Stacking"): train a
shallow model, then double its depth by copying its layers on top of themselves (layer i -> layer L + i), keep
training, repeat.

    new_model, new_optimizer = stack_layers(model, optimizer)           # L layers -> 2L layers

In a recipe (`pretrain.stacking`), `model.num_layers` is the depth of the first stage and the model doubles after
each listed optimiser step, so it ends with num_layers * 2**len(stages) layers:

    model: {num_layers: 1, ...}
    pretrain: {stacking: {stages: [300, 700]}, ...}                     # 1 -> 2 -> 4 layers

Choices:
- Optimizer state is copied: a new parameter starts with its source's AdamW moments (exp_avg, exp_avg_sq) and
  step count. The new layer is an exact copy of its source, so the source's moments are the best estimate of its
  gradient statistics and its updates continue at the size of the source's. Fresh state (step 0) would instead
  give every coordinate of the new layers a first update of size lr (Adam's m/sqrt(v) = sign(g)), a shock at the
  stack step. Learning-rate schedule and hyperparameters carry over unchanged (same groups, same step).
- ALBERT sharing: with share_layers != none the number of layer groups doubles too, so the new layers form new
  groups that are copies of the old ones (a stacked model with G groups of n layers has 2G groups of n layers).
- Resume: a checkpoint taken after a stack holds the deeper model (its config.json records the current
  num_layers); the pretraining stage replays the stacks due up to the checkpoint's step on the freshly built
  model before loading it (`stacks_due`). The parameters of a stacked model are in the order a fresh
  `build_optimizer(new_model)` gives them, so the saved optimizer state loads onto the same parameters.
- Stacking consumes no random numbers (the new model is built on the meta device), so the dropout stream and
  the data order are those of an unstacked run.
- Which members stack: the architectures that declare STACKING (training/models/core/architecture.py: BERT with
  RoBERTa and ALBERT, SpanBERT, XLM); a recipe asking it of another is refused when it loads
  (training/recipe_checks.py). ELECTRA (its generator's depth follows the discriminator's) and ModernBERT (layer 0
  has no attention norm, and a layer's global / local kind follows its index) do not.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch import nn

from bertfactory.cpu_kernels import match_inductor
from bertfactory.errors import ConfigError, ContractError

from .distributed import unwrap
from .models.bert.model import BertConfig
from .models.core.capabilities import MODEL_SWITCHES
from .models.registry import architecture_of
from .optim import parameter_groups
from .stacking_config import StackingConfig


def stacks_due(stages: list[int], step: int) -> int:
    """How many times the model has been stacked once `step` optimiser steps are done."""
    return sum(1 for s in stages if s <= step)


def stacked_config(config: BertConfig, times: int = 1) -> BertConfig:
    """The config after stacking `times` times: 2**times as many layers (and layer groups, when shared)."""
    factor = 2 ** times
    groups = config.num_layer_groups * factor if config.share_layers != "none" else config.num_layer_groups
    return dataclasses.replace(config, num_layers=config.num_layers * factor, num_layer_groups=groups)


def _layer_prefix(model: nn.Module) -> tuple[str, int]:
    """('bert.encoder.layer.', number of layer modules) of the model's backbone encoder."""
    layers = model.backbone().encoder.layer
    for name, module in model.named_modules():
        if module is layers:
            return name + ".", len(layers)
    raise ContractError(f"{type(model).__name__}: its backbone's encoder layers are not a submodule of the model")


def _source_name(name: str, prefix: str, modules: int) -> str:
    """The parameter of the unstacked model that parameter `name` of the stacked model copies."""
    if not name.startswith(prefix):
        return name
    index, rest = name[len(prefix):].split(".", 1)
    return f"{prefix}{int(index) % modules}.{rest}"


def stack_layers(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Double the depth of a BERT-style model (layer module m copied to M + m; config updated) and build its
    optimizer with the copied state (see the module docstring). The inputs are left unchanged."""
    config = getattr(model, "config", None)
    if not isinstance(config, BertConfig):
        raise ContractError(f"progressive stacking needs a model whose config is a BertConfig; {type(model).__name__} "
                            f"has {type(config).__name__}")
    prefix, modules = _layer_prefix(model)
    new_config = stacked_config(config)
    old_state = model.state_dict()
    new_state = {}
    for name, tensor in old_state.items():
        new_state[name] = tensor.detach().clone()
        if name.startswith(prefix):
            index, rest = name[len(prefix):].split(".", 1)
            new_state[f"{prefix}{int(index) + modules}.{rest}"] = tensor.detach().clone()
    with torch.device("meta"):  # no initialisation work and no random numbers drawn: every tensor is replaced
        stacked = architecture_of(model).build(new_config)
    stacked.load_state_dict(new_state, strict=True, assign=True)
    stacked.train(model.training)
    for switch in MODEL_SWITCHES:  # pretrain.unpad, static_shapes, fused_mlm_loss: the run's options stay on
        if hasattr(model, switch):
            setattr(stacked, switch, getattr(model, switch))
    return stacked, _stacked_optimizer(model, stacked, optimizer, prefix, modules)


def _stacked_optimizer(model: nn.Module, stacked: nn.Module, optimizer: torch.optim.Optimizer, prefix: str,
                       modules: int) -> torch.optim.Optimizer:
    old_names = {id(p): n for n, p in model.named_parameters()}
    old_saved = optimizer.state_dict()  # params numbered in group order
    old_index, old_group = {}, {}
    for g, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            old_index[old_names[id(p)]] = len(old_index)
            old_group[old_names[id(p)]] = g
    # the groups in the order build_optimizer gives a fresh model of the stacked config (what resume rebuilds)
    groups = parameter_groups(stacked, optimizer.param_groups[0]["weight_decay"])  # options: restored below
    if len(groups) != len(optimizer.param_groups):
        raise ContractError("stack_layers expects an optimizer built by training.optim.build_optimizer")
    new_names = {id(p): n for n, p in stacked.named_parameters()}
    state, saved_groups, index = {}, [], 0
    for g, (group, old_options) in enumerate(zip(groups, old_saved["param_groups"])):
        numbers = []
        for p in group["params"]:
            source = _source_name(new_names[id(p)], prefix, modules)
            if old_group.get(source) != g:
                raise ContractError(f"stack_layers: parameter {new_names[id(p)]} would change optimizer group")
            if old_index[source] in old_saved["state"]:  # parameters that never had a gradient have no state
                state[index] = {k: v.clone() if isinstance(v, torch.Tensor) else v
                                for k, v in old_saved["state"][old_index[source]].items()}
            numbers.append(index)
            index += 1
        saved_groups.append({**old_options, "params": numbers})
    new_optimizer = type(optimizer)(groups)
    new_optimizer.load_state_dict({"state": state, "param_groups": saved_groups})
    return new_optimizer


def stack_trainer(trainer, build_scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
                  compile_model: bool = False) -> None:
    """Stack `trainer.model` and replace the trainer's model, optimizer and scheduler (the schedule continues
    at the same step and learning rate). `compile_model`: torch.compile the new model in place, as the old one."""
    model, optimizer = stack_layers(unwrap(trainer.model), trainer.optimizer)  # the trainer wraps it anew (DDP)
    learning_rates = [group["lr"] for group in optimizer.param_groups]
    scheduler = build_scheduler(optimizer)  # a new scheduler steps once and resets lr: restore state and lr
    scheduler.load_state_dict(trainer.scheduler.state_dict())
    for group, lr in zip(optimizer.param_groups, learning_rates):
        group["lr"] = lr
    if compile_model:
        match_inductor()
        model.compile()
    trainer.model, trainer.optimizer, trainer.scheduler = model, optimizer, scheduler


class StackingSchedule:
    """pretrain.stacking wired into the trainer: `stack_if_due(trainer)` after every step, `replay(trainer, step)`
    before loading a checkpoint (the run had stacked the model that many times by then). Both return whether
    they stacked, so the caller picks up `trainer.model` (and its config, which records the current depth)."""

    def __init__(self, cfg: StackingConfig | None, model_config: object,
                 build_scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
                 compile_model: bool = False):
        self.stages = list(cfg.stages) if cfg is not None else []
        if self.stages and not isinstance(model_config, BertConfig):
            raise ConfigError(f"pretrain.stacking needs a BERT-style model (BertConfig); this objective's model "
                              f"has {type(model_config).__name__}")
        self.build_scheduler = build_scheduler
        self.compile_model = compile_model

    def stack_if_due(self, trainer) -> bool:
        if trainer.step not in self.stages:
            return False
        stack_trainer(trainer, self.build_scheduler, self.compile_model)
        return True

    def replay(self, trainer, step: int) -> bool:
        times = stacks_due(self.stages, step)
        for _ in range(times):
            stack_trainer(trainer, self.build_scheduler, self.compile_model)
        return times > 0
