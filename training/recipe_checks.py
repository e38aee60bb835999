"""Cross-checks of a recipe's `model` and `pretrain` sections together: combinations each section accepts alone
but pretraining cannot run. flows/recipe.py's Recipe validator calls `model_pretrain_problems` (errors at load time,
naming the keys); training.pretrain.pretrain calls `check_model_and_pretrain` first, for callers that build the two
configs without a recipe.

    from training.recipe_checks import check_model_and_pretrain
    check_model_and_pretrain(model_cfg, pretrain_cfg)   # ConfigError naming the keys, or None

Checks on the `pretrain` section alone are PretrainConfig's validator (training/pretrain_config.py); checks that need
facts of the run (world size, shard lengths) run when pretraining starts (training/run_checks.py).
"""

from __future__ import annotations

from bertfactory.errors import ConfigError

# the torch-free declarations (not models.registry / objectives, which import the models): a recipe loads without torch
from .config import ModelConfig
from .models.core.capabilities import FUSED_MLM_LOSS, STACKING, STATIC_SHAPES, UNPAD
from .models.members import MEMBERS, member_of_objective, objective_info, objective_names, supporting, supports
from .pretrain_config import PretrainConfig


def _unsupported_option(option: str, cfg: PretrainConfig) -> str | None:
    """pretrain.<option> set for an objective whose architecture does not declare it (its member's
    `Member.supports`, training/models/members.py)."""
    architecture = objective_info(cfg.objective).architecture
    if supports(architecture, option):
        return None
    implementing = supporting(option)
    objectives = [name for name in objective_names() if objective_info(name).architecture in implementing]
    return (f"pretrain.{option} is only implemented for {', '.join(implementing) or 'no architecture'} (objectives "
            f"{', '.join(objectives)}); objective {cfg.objective} trains {architecture}")


def unread_member_settings(model_cfg: ModelConfig, cfg: PretrainConfig) -> list[str]:
    """A member's settings sub-section (model.electra, model.xlnet, ...) set in a recipe whose pretrain.objective
    trains another member: nothing reads it (a recipe with model.electra and the default objective trained BERT
    without a word). flows/recipe.py's Recipe validator calls it: a recipe says what its run trains."""
    trained = member_of_objective(cfg.objective)
    problems = []
    for member in MEMBERS:
        if member.settings is None or member is trained or getattr(model_cfg, member.settings[0]) is None:
            continue
        key = member.settings[0]
        problems.append(f"model.{key} is set, but pretrain.objective {cfg.objective} trains {trained.name}, which "
                        f"does not read it: set pretrain.objective to {member.name}'s "
                        f"({' or '.join(o.name for o in member.objectives)}), or drop model.{key}")
    return problems


def model_pretrain_problems(model_cfg: ModelConfig, cfg: PretrainConfig) -> list[str]:
    """Why these sections cannot pretrain together, one line per problem naming the keys; [] = they can."""
    problems = []
    if cfg.unpad and (problem := _unsupported_option(UNPAD, cfg)):
        problems.append(problem)
    if cfg.static_shapes and (problem := _unsupported_option(STATIC_SHAPES, cfg)):
        problems.append(problem)
    if cfg.fused_mlm_loss and (problem := _unsupported_option(FUSED_MLM_LOSS, cfg)):
        problems.append(problem)
    # refused here rather than at the first stack step, where the doubled model would fail to load the copies
    if cfg.stacking is not None and (problem := _unsupported_option(STACKING, cfg)):
        problems.append(problem)
    two_stage = model_cfg.electra is not None and model_cfg.electra.two_stage
    if two_stage and cfg.parallelism == "fsdp":
        # measured: FSDP2's root unit leaves the two-stage generator's own embeddings sharded in its forward
        # (DTensor and Tensor mixed in aten.embedding); joint ELECTRA, which shares one embedding block, shards fine
        problems.append("model.electra.two_stage is not supported with pretrain.parallelism fsdp (the generator's "
                        "own embeddings stay sharded in its forward); use parallelism ddp, or joint training")
    if two_stage and cfg.grad_accumulation > 1:
        # ElectraForPreTraining counts its generator-alone stage in forward passes, i.e. micro-batches
        problems.append("pretrain.grad_accumulation > 1 is not supported with model.electra.two_stage (its "
                        "generator_steps count forward passes, not optimiser steps); use grad_accumulation 1")
    return problems


def check_model_and_pretrain(model_cfg: ModelConfig, cfg: PretrainConfig) -> None:
    """ConfigError with the first of `model_pretrain_problems`, if any."""
    problems = model_pretrain_problems(model_cfg, cfg)
    if problems:
        raise ConfigError(problems[0])
