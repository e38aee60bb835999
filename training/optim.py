"""Optimisers and learning-rate schedules of pretraining, chosen by `pretrain.optimizer` / `pretrain.schedule`.

    optimizer = build_optimizer(model, lr, weight_decay, betas, eps, name="lamb")
    scheduler = build_scheduler(optimizer, warmup_steps, max_steps, schedule="slanted_triangular")

Optimisers (biases and LayerNorm parameters never decay; `parameter_groups`):
- adamw: torch.optim.AdamW (BERT's recipe); on CUDA its fused kernel (`fused=True`: one launch for every
  parameter, and a device-side veto of a step through `found_inf`, which the trainer's sync-free step uses) when
  every parameter is a plain floating CUDA tensor, the foreach kernels otherwise (e.g. FSDP's DTensor shards);
  on the CPU torch's default (the per-parameter loop), so CPU trajectories are unchanged (`adamw_kernel`).
- lamb: `Lamb` below (You et al. 2020), following NVIDIA apex's FusedLAMB as NVIDIA's BERT recipe runs it
  (bias-corrected Adam moments, decoupled decay added to the update, trust ratio ||w|| / ||update|| set to 1
  when either norm is 0, no clamp; `use_nvlamb=False`: no trust ratio for the zero-decay group of biases and
  LayerNorm). Google's lamb_optimizer.py (google-research/albert) excludes the same parameters from layer
  adaptation (exclude_from_layer_adaptation defaults to exclude_from_weight_decay) but has no bias correction.
  Global gradient clipping is the trainer's (`clip_gradients`), as FusedLAMB's max_grad_norm would do.
  Under FSDP (training/fsdp.py) the parameters are DTensor shards: torch.linalg.vector_norm of a shard is a
  partial norm that DTensor all-reduces (sum of the squared shard norms, then the root) before the division, so
  the trust ratio is the full parameter's (tested against one process in tests/training/test_fsdp.py); it costs
  two scalar all-reduces per parameter and step. On CUDA (plain tensors) the step runs on torch._foreach
  kernels (a handful of launches per group instead of ~12 per parameter; `foreach=None` decides at the first step),
  on the CPU and on DTensors the per-parameter loop; the two agree within float rounding
  (tests/training/test_optim.py).
- adafactor: torch.optim.Adafactor (Shazeer & Stern 2018: factored second moments of matrices, relative step
  size scaled by max(eps2, RMS(param)), update clipping d=1, beta2_t = 1 - t^-0.8, no first moment). Its lr is
  the paper's relative step cap: step size = max(1e-3, RMS(param)) * min(lr_t, 1/sqrt(t)), with lr_t the
  scheduled learning_rate; pretrain.betas / eps (Adam's) are not used. Not with FSDP: torch's Adafactor fails on
  DTensor shards (pretrain.parallelism fsdp refuses it).

Schedules (multipliers of the peak learning rate at optimiser step s; warmup W, budget T = max_steps):
- linear: s/W during warmup, then (T - s)/(T - W), floored at 0 (BERT).
- constant: s/W during warmup, then 1.
- slanted_triangular: ULMFiT (Howard & Ruder 2018) with cut = W (i.e. cut_frac = W/T):
  p = s/cut before the cut, else 1 - (s - cut)/(cut * (1/cut_frac - 1)); multiplier (1 + p (ratio - 1)) / ratio.
- one_cycle: Smith's 1cycle tied to the budget: cosine from 1/div up to 1 over the W warmup steps, then cosine
  down to 1/(div * final_div) at T (as torch's OneCycleLR with anneal_strategy="cos"; momentum is not cycled).
- wsd: warmup-stable-decay ("trapezoidal"), ModernBERT's (Warner et al. 2024): s/W during warmup, 1 until the
  decay starts at S = max(W, T - D) with D = round(decay_fraction * T), then the "1-sqrt" cooldown of Hagele et
  al. 2024 that the paper chose over a linear one: 1 - sqrt((s - S)/(T - S)), 0 at T and after.
Each is a plain callable object in a LambdaLR, so scheduler state_dicts hold only numbers and resume exactly.
These are the one implementation of each schedule: fine-tuning uses them too (evaluation/finetune_schedule.py
states them in fractions of its steps).
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from bertfactory.errors import ConfigError

OPTIMIZERS = ("adamw", "lamb", "adafactor")
SCHEDULES = ("linear", "constant", "slanted_triangular", "one_cycle", "wsd")

logger = logging.getLogger(__name__)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weights that decay, and biases + LayerNorm parameters that do not (as in BERT)."""
    no_decay_ids = set()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            no_decay_ids.update(id(p) for p in module.parameters(recurse=False))
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if id(param) in no_decay_ids or name.split(".")[-1] == "bias":
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Lamb(torch.optim.Optimizer):
    """LAMB as in NVIDIA apex's FusedLAMB (see the module docstring). A group with `layer_adaptation=False`
    gets no trust ratio; `build_optimizer` sets it for the biases + LayerNorm group."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, layer_adaptation: bool = True,
                 foreach: bool | None = None):
        """`foreach`: True = torch._foreach kernels, False = the per-parameter loop, None = foreach when every
        parameter of a group is a plain CUDA tensor (decided per group at each step)."""
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ConfigError(f"Lamb: invalid hyperparameters lr={lr} betas={betas} eps={eps} weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      layer_adaptation=layer_adaptation, foreach=foreach))

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for param in params:
                state = self.state[param]
                if not state:
                    state["step"] = 0  # a Python int: bias corrections need no device->host sync
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["step"] += 1
            foreach = group.get("foreach")
            if foreach is None:
                foreach = bool(params) and all(_plain_cuda(p) for p in params)
            if foreach and params:
                self._foreach_step(group, params)
            else:
                for param in params:
                    self._single_step(group, param)
        return loss

    def _single_step(self, group: dict, param: torch.Tensor) -> None:
        beta1, beta2 = group["betas"]
        grad = param.grad
        state = self.state[param]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** state["step"]
        bias_correction2 = 1 - beta2 ** state["step"]
        update = (exp_avg / bias_correction1) / ((exp_avg_sq / bias_correction2).sqrt_().add_(group["eps"]))
        if group["weight_decay"] != 0:
            update.add_(param, alpha=group["weight_decay"])
        if group["layer_adaptation"]:
            weight_norm = torch.linalg.vector_norm(param)
            update_norm = torch.linalg.vector_norm(update)
            one = torch.ones_like(weight_norm)
            trust_ratio = torch.where((weight_norm > 0) & (update_norm > 0), weight_norm / update_norm, one)
            update.mul_(trust_ratio)
        param.add_(update, alpha=-group["lr"])

    def _foreach_step(self, group: dict, params: list[torch.Tensor]) -> None:
        """`_single_step` for all of a group's parameters at once, on torch._foreach kernels: the same arithmetic
        in the same order, so the result matches the loop within float rounding. The parameters' step counts
        are equal within a group (they start together), so the bias corrections are the group's."""
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        states = [self.state[p] for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        by_step: dict[int, list[int]] = {}
        for index, state in enumerate(states):  # one entry in practice; a restacked model may mix steps
            by_step.setdefault(state["step"], []).append(index)
        updates: list[torch.Tensor] = [None] * len(params)  # type: ignore[list-item]
        for step, indices in by_step.items():
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            denominators = torch._foreach_div([exp_avg_sqs[i] for i in indices], bias_correction2)
            torch._foreach_sqrt_(denominators)
            torch._foreach_add_(denominators, group["eps"])
            numerators = torch._foreach_div([exp_avgs[i] for i in indices], bias_correction1)
            torch._foreach_div_(numerators, denominators)
            for i, update in zip(indices, numerators):
                updates[i] = update
        if group["weight_decay"] != 0:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        if group["layer_adaptation"]:
            weight_norms = torch.stack(torch._foreach_norm(params))
            update_norms = torch.stack(torch._foreach_norm(updates))
            ratios = torch.where((weight_norms > 0) & (update_norms > 0), weight_norms / update_norms,
                                 torch.ones_like(weight_norms))
            torch._foreach_mul_(updates, list(ratios.unbind()))
        torch._foreach_add_(params, updates, alpha=-group["lr"])


def _plain_cuda(param: torch.Tensor) -> bool:
    """A floating CUDA tensor that is not a DTensor shard (FSDP): what the fused / foreach kernels take."""
    from torch.distributed.tensor import DTensor

    return param.is_cuda and param.is_floating_point() and not isinstance(param, DTensor)


def adamw_kernel(params: list[torch.Tensor]) -> dict[str, bool]:
    """torch.optim.AdamW's implementation switch for `params`: fused on CUDA when every parameter is a plain
    floating CUDA tensor, foreach on CUDA otherwise (DTensor shards), torch's default elsewhere (the CPU's
    per-parameter loop: the trajectories recorded on the CPU stay bit-for-bit)."""
    if params and all(_plain_cuda(p) for p in params):
        return {"fused": True}
    if any(p.is_cuda for p in params):
        return {"foreach": True}
    return {}


def build_optimizer(model: nn.Module, learning_rate: float, weight_decay: float, betas: tuple[float, float],
                    eps: float, name: str = "adamw") -> torch.optim.Optimizer:
    groups = parameter_groups(model, weight_decay)
    if name == "adamw":
        params = [p for group in groups for p in group["params"]]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=tuple(betas), eps=eps, **adamw_kernel(params))
    if name == "lamb":
        groups[1]["layer_adaptation"] = False  # biases + LayerNorm: no decay and no trust ratio
        return Lamb(groups, lr=learning_rate, betas=tuple(betas), eps=eps)
    if name == "adafactor":
        return torch.optim.Adafactor(groups, lr=learning_rate)
    raise ConfigError(f"pretrain.optimizer: unknown optimizer {name!r}; valid choices: {', '.join(OPTIMIZERS)}")


class WarmupLinearDecay:
    """lr multiplier at step s: s / warmup during warmup, then (max_steps - s) / (max_steps - warmup), floored
    at 0. A callable object (not a lambda) so the rule is explicit and the scheduler's state_dict stays plain."""

    def __init__(self, warmup_steps: int, max_steps: int):
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        remaining = self.max_steps - step
        return max(0.0, remaining / max(1, self.max_steps - self.warmup_steps))


class WarmupConstant:
    """s / warmup during warmup, then 1."""

    def __init__(self, warmup_steps: int):
        self.warmup_steps = warmup_steps

    def __call__(self, step: int) -> float:
        return step / self.warmup_steps if step < self.warmup_steps else 1.0


class SlantedTriangular:
    """ULMFiT's slanted triangular rate (Howard & Ruder 2018, eq. 3) with cut = warmup steps: rises linearly
    from 1/ratio to 1 until the cut, then falls linearly back to 1/ratio at max_steps (and stays there)."""

    def __init__(self, warmup_steps: int, max_steps: int, ratio: float):
        self.cut = warmup_steps
        self.max_steps = max_steps
        self.ratio = ratio

    def __call__(self, step: int) -> float:
        if step < self.cut:
            p = step / self.cut
        else:  # ULMFiT's cut * (1/cut_frac - 1) is max_steps - cut
            p = max(0.0, 1.0 - (step - self.cut) / max(1, self.max_steps - self.cut))
        return (1.0 + p * (self.ratio - 1.0)) / self.ratio


class OneCycle:
    """Smith's 1cycle over the budget: cosine from 1/div to 1 during warmup, cosine from 1 to 1/(div * final_div)
    at max_steps (held there after)."""

    def __init__(self, warmup_steps: int, max_steps: int, div_factor: float, final_div_factor: float):
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps
        self.initial = 1.0 / div_factor
        self.final = self.initial / final_div_factor

    @staticmethod
    def _cosine(start: float, end: float, fraction: float) -> float:
        return end + (start - end) * (1.0 + math.cos(math.pi * fraction)) / 2.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self._cosine(self.initial, 1.0, step / self.warmup_steps)
        fraction = min(1.0, (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        return self._cosine(1.0, self.final, fraction)


class WarmupStableDecay:
    """Warmup-stable-decay: s / warmup during warmup, then 1 (the stable phase) until the last
    round(decay_fraction * max_steps) steps, which fall to 0 at max_steps along 1 - sqrt(progress) (Hagele et al.
    2024's cooldown, as ModernBERT). A decay longer than the steps after warmup starts right after the warmup."""

    def __init__(self, warmup_steps: int, max_steps: int, decay_fraction: float):
        if not 0.0 < decay_fraction <= 1.0:
            raise ConfigError(f"pretrain.wsd_decay_fraction must lie in (0, 1], got {decay_fraction}")
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps
        # round, not floor: 0.1 of 1,000 steps is 100 steps whatever the float error of 0.1 * 1000
        self.decay_start = max(warmup_steps, max_steps - round(decay_fraction * max_steps))

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        if step < self.decay_start:
            return 1.0
        progress = min(1.0, (step - self.decay_start) / max(1, self.max_steps - self.decay_start))
        return 1.0 - math.sqrt(progress)


def schedule_rule(schedule: str, warmup_steps: int, max_steps: int, stlr_ratio: float = 32.0,
                  one_cycle_div_factor: float = 25.0, one_cycle_final_div_factor: float = 1e4,
                  wsd_decay_fraction: float = 0.1) -> Callable[[int], float]:
    if schedule == "linear":
        return WarmupLinearDecay(warmup_steps, max_steps)
    if schedule == "constant":
        return WarmupConstant(warmup_steps)
    if schedule == "slanted_triangular":
        return SlantedTriangular(warmup_steps, max_steps, stlr_ratio)
    if schedule == "one_cycle":
        return OneCycle(warmup_steps, max_steps, one_cycle_div_factor, one_cycle_final_div_factor)
    if schedule == "wsd":
        return WarmupStableDecay(warmup_steps, max_steps, wsd_decay_fraction)
    raise ConfigError(f"pretrain.schedule: unknown schedule {schedule!r}; valid choices: {', '.join(SCHEDULES)}")


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int, schedule: str = "linear",
                    **options: float) -> LambdaLR:
    """`options`: stlr_ratio, one_cycle_div_factor, one_cycle_final_div_factor, wsd_decay_fraction (see
    `schedule_rule`)."""
    return LambdaLR(optimizer, schedule_rule(schedule, warmup_steps, max_steps, **options))


def reset_learning_rate(scheduler: LambdaLR) -> None:
    """Set the optimiser's rates to what `scheduler`'s own rule gives at its step: after loading a checkpoint written
    under another budget (an extended run, training/extend.py), the rate held is the old schedule's."""
    step = scheduler.last_epoch
    groups = scheduler.optimizer.param_groups
    for group, base, rule in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * rule(step)
    scheduler._last_lr = [group["lr"] for group in groups]


def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the global L2 norm of all gradients; returns the norm before clipping as a 0-dim tensor on the
    gradients' device (not a float: that would wait for the GPU every step). Under FSDP the gradients are
    DTensor shards: torch reduces their norms over the ranks, and the norm comes back as a plain tensor."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    from torch.distributed.tensor import DTensor

    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def optimizer_from_config(model: nn.Module, cfg) -> torch.optim.Optimizer:
    """The optimiser a PretrainConfig asks for (pretrain.optimizer, learning_rate, weight_decay, betas, eps)."""
    return build_optimizer(model, cfg.learning_rate, cfg.weight_decay, cfg.betas, cfg.eps, name=cfg.optimizer)


def scheduler_from_config(optimizer: torch.optim.Optimizer, cfg) -> LambdaLR:
    """The schedule a PretrainConfig asks for (pretrain.schedule, warmup_steps, max_steps and its options). A
    warmup longer than the run (a recipe shortened with --set pretrain.max_steps=N for a quick try) warms up over
    the whole run instead: the recipe stays usable as it is, with a warning saying so."""
    warmup = cfg.warmup_steps
    if warmup > cfg.max_steps:
        logger.warning("pretrain.warmup_steps=%d is longer than pretrain.max_steps=%d: the learning rate warms up "
                       "over all %d steps (set pretrain.warmup_steps to change it)", warmup, cfg.max_steps, cfg.max_steps)
        warmup = cfg.max_steps
    return build_scheduler(optimizer, warmup, cfg.max_steps, cfg.schedule, stlr_ratio=cfg.stlr_ratio,
                           one_cycle_div_factor=cfg.one_cycle_div_factor,
                           one_cycle_final_div_factor=cfg.one_cycle_final_div_factor,
                           wsd_decay_fraction=cfg.wsd_decay_fraction)
