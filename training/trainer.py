"""The training loop shared by every objective: batches -> objective(model, batch) -> backward (over
`grad_accumulation` micro-batches, training/accumulation.py) -> clip -> optimiser step (skipped on non-finite or
spiking losses, training/step_guard.py) -> schedule step, with windowed metrics appended to metrics.jsonl, a
tqdm progress bar and periodic checkpoints. Everything that decides the trajectory (weights, optimizer, scheduler,
RNG states, data position, the open metrics window, the step guard's loss history) is in `state_dict()`, so a run
resumed from a checkpoint continues bit-for-bit on CPU.

Host reads. On the CPU (and on CUDA where the step guard must veto on the host, see `_defers_reads`) each step's
losses, counts and gradient norm are read back in one transfer before the update, so the guard decides on it.
On XLA, and on CUDA with an optimiser that can veto on the device (fused AdamW, training/optim.py) and no
pretrain.spike_factor, nothing is read inside a step: the scalars stay on the device (`_pending`) and are read in
one transfer when the metrics window is written (every log_every steps, `_flush_pending`). On that CUDA path a
step whose gradient norm is not finite is still skipped - by the optimiser on the device (`found_inf`, as
torch's GradScaler drives it) - and the guard counts it, logs it and enforces its limits when the values are read,
up to log_every steps later (a non-finite loss with a finite norm, which cannot happen in practice, is detected
there but its update applied, as on XLA). Under DDP the ranks' scalars are averaged at that read.

CUDA graphs (pretrain.compile_mode reduce-overhead, `settings.cudagraphs`): every replay of the compiled graphs
overwrites the memory of what the previous replay returned, and the deferred reads keep a step's scalars for up to
log_every steps. So each micro-step starts with torch.compiler.cudagraph_mark_step_begin() and copies (`.clone()`)
the scalars it keeps into tensors of its own; between the micro-steps of one step it also copies the gradients,
since autograd keeps the backward graph's output itself as a parameter's first gradient of the step (the later
micro-steps add into the copy in place). The copies hold the same values; without CUDA graphs nothing is copied.

Used by training.pretrain (`run_pretrain`); see there for how it is wired.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from bertfactory.io import append_jsonl

from .backends import autocast_context
from .checkpoint import FORMAT_VERSION, rng_state, set_rng_state
from .data import PretrainBatches
from .distributed import DistContext, unwrap
from .fsdp import full_optimizer_state, is_sharded, load_full_optimizer_state
from .objectives import Objective
from .accumulation import combine_scalars, split_batch, weighted_loss
from .optim import clip_gradients
from .prefetch import per_thread, pinned, prefetch_batches
from .step_guard import StepGuard
from .tracking import MetricsSink
from .trainer_settings import TrainerSettings

logger = logging.getLogger(__name__)

def freeze_untrained(module: torch.nn.Module) -> frozenset[str]:
    """requires_grad off for the parameters `module.untrained_parameter_names()` lists, on for the others; returns
    the frozen names (training/models/registry.py)."""
    untrained = frozenset(module.untrained_parameter_names())
    for name, param in module.named_parameters():
        param.requires_grad_(name not in untrained)
    return untrained


def _is_loss(key: str) -> bool:
    """Losses an objective reports (`loss`, `mlm_loss`, `disc_loss`, ...): averaged per step into metrics.jsonl."""
    return key == "loss" or key.endswith("_loss")


def _is_count(key: str) -> bool:
    """`<name>_correct` / `<name>_count` pairs: summed over the window, reported as `<name>_acc`."""
    return key.endswith("_correct") or key.endswith("_count")


@dataclass
class Window:
    """Sums over the steps since the last metrics line."""

    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0
    mlm_correct: int = 0
    mlm_count: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # other objectives' *_correct / *_count
    # steps that reported each loss, where fewer than `steps` (XLM's xlm_mlm_tlm: mlm_loss and tlm_loss in turn)
    loss_steps: dict[str, int] = field(default_factory=dict)

    def add(self, out: dict, tokens: int, seconds: float) -> None:
        self.steps += 1
        self.tokens += tokens
        self.seconds += seconds
        for key, value in out.items():
            if value is None:
                continue
            if _is_loss(key):
                self.sums[key] = self.sums.get(key, 0.0) + float(value)
                self.loss_steps[key] = self.loss_steps.get(key, 0) + 1
            elif key == "mlm_correct":
                self.mlm_correct += int(value)
            elif key == "mlm_count":
                self.mlm_count += int(value)
            elif _is_count(key):
                self.counts[key] = self.counts.get(key, 0) + int(value)

    def means(self) -> dict[str, float]:
        means = {key: value / self.loss_steps.get(key, self.steps) for key, value in self.sums.items()}
        if self.mlm_count:
            means["mlm_acc"] = self.mlm_correct / self.mlm_count
        for key, count in sorted(self.counts.items()):
            name = key[: -len("_count")]
            if key.endswith("_count") and count:
                means[f"{name}_acc"] = self.counts.get(f"{name}_correct", 0) / count
        means["tokens_per_s"] = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return means

    def to_state(self) -> dict[str, Any]:
        return {"steps": self.steps, "tokens": self.tokens, "seconds": self.seconds, "mlm_correct": self.mlm_correct,
                "mlm_count": self.mlm_count, "sums": dict(self.sums), "counts": dict(self.counts),
                "loss_steps": dict(self.loss_steps)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "Window":
        return cls(**{**state, "sums": dict(state["sums"]), "counts": dict(state.get("counts", {})),
                      "loss_steps": dict(state.get("loss_steps", {k: state["steps"] for k in state["sums"]}))})


def check_real_tokens_first(batch: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
    """`batch` itself if every row of its (host) attention_mask holds its real tokens first, padding at the end,
    as pretrain.unpad_layout fixed needs (training/models/core/varlen.py); ValueError naming the step and row
    otherwise."""
    mask = batch["attention_mask"]
    rising = (mask[:, 1:] > mask[:, :-1]).any(1)
    if bool(rising.any()):
        row = int(rising.nonzero()[0, 0])
        raise ValueError(f"step {step + 1}: row {row} of the batch has a real token after padding; "
                         f"pretrain.unpad_layout fixed needs the real tokens first (use unpad_layout packed)")
    return batch


def is_compiled(module: torch.nn.Module) -> bool:
    """`module.compile()` was called on it (pretrain.compile, training/pretrain_model.py)."""
    return getattr(module, "_compiled_call_impl", None) is not None


def compiled_graphs() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process so far, first compilations and recompilations
    alike (torch._dynamo.utils.counters["stats"]["unique_graphs"]): flat after warm-up = no recompiles."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _device_veto(optimizer: torch.optim.Optimizer) -> bool:
    """The optimiser skips a step on the device when given a `found_inf` flag: torch's Adam / AdamW with every
    group fused (the flag the fused kernel reads; the other implementations refuse it)."""
    return (isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
            and all(group.get("fused") for group in optimizer.param_groups))


class Trainer:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, batches: PretrainBatches,
                 objective: Objective, device: torch.device, settings: TrainerSettings,
                 dist: DistContext | None = None, guard: StepGuard | None = None, defer_reads: bool | None = None):
        """`settings`: the loop's plain values (training/trainer_settings.py). `dist`: the torchrun context (None =
        one process). `guard`: decides which updates to skip (None = non-finite losses and norms only); it is
        training state, saved with the checkpoint. `defer_reads`: read the steps' scalars only when a metrics line
        is written (no host sync inside a step, see the module docstring); None = on CUDA when the optimiser can
        veto a non-finite step on the device and the guard has no spike factor (`_defers_reads`)."""
        # the model trained: the bare model (`module`), DDP-wrapped under torchrun by `_sync_trainable`, which
        # also freezes what the objective leaves untrained (they must agree, see there)
        self.model = model
        self._trained_set: tuple[int, frozenset[str]] | None = None
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.batches = batches
        self.objective = objective
        self.device = device
        self.settings = settings
        self.autocast = autocast_context(device, settings.bf16)
        self.dist = dist if dist is not None else DistContext()
        self.guard = guard if guard is not None else StepGuard()  # skips non-finite / spiking steps
        self.last_step_skipped = False
        # XLA (training/xla.py): batches padded to `settings.static_width`, no host read inside the step; the
        # steps' scalars wait on the device in `_pending` until the metrics window is written
        self.xla = device.type == "xla"
        self._pending: list[tuple[int, dict, int, float]] = []
        # CUDA (or a test on the CPU): the same deferred reads without XLA, the optimiser vetoing on the device
        self.defer_reads = (not self.xla and (self._defers_reads() if defer_reads is None else defer_reads))
        if self.defer_reads and not _device_veto(optimizer):
            raise ValueError("Trainer(defer_reads=True) needs an optimiser that skips a step on the device "
                             "(torch.optim.AdamW or Adam with fused=True)")
        self.step = 0  # optimiser steps completed
        self.tokens_seen = 0
        self.train_seconds = 0.0
        self.window = Window()
        self.last_metrics: dict[str, Any] = {}
        self.sink = MetricsSink(settings.tracking)  # TensorBoard / MLflow beside metrics.jsonl
        self._sync_trainable()

    def _defers_reads(self) -> bool:
        """The deferred reads by default: on CUDA, with an optimiser that vetoes non-finite steps on the device
        (fused AdamW) and a guard with no spike factor. A spike veto needs the loss on the host before the update,
        and LAMB / Adafactor / the foreach AdamW of FSDP shards take no `found_inf`: those keep the per-step read
        (one device->host copy per step, so the guard still decides before each update)."""
        return self.device.type == "cuda" and self.guard.spike_factor is None and _device_veto(self.optimizer)

    @property
    def module(self) -> torch.nn.Module:
        """The bare model (inside the DDP wrapper): what checkpoints store and stacking deepens."""
        return unwrap(self.model)

    def _sync_trainable(self) -> None:
        """Freeze the parameters the model says its objective leaves untrained now (`untrained_parameter_names`:
        e.g. the pooler without a sentence loss, the idle half of two-stage ELECTRA) and, under torchrun, (re)wrap
        it in DDP over exactly the others. DDP expects a gradient for every parameter it holds in every step, so a
        change of that set (two-stage ELECTRA's switch) or of the model (progressive stacking) needs a new wrapper.
        Frozen parameters have no gradient either way, so the trajectory is the one of an unfrozen run. Under FSDP
        the set is frozen once, before fully_shard (training/pretrain_model.py): FSDP2 cannot take requires_grad changes
        of its sharded parameters later (so the stage-changing two-stage ELECTRA is refused with FSDP)."""
        module = self.module
        if is_sharded(module):  # frozen before sharding (pretrain, freeze_untrained); FSDP2 keeps that set
            self.model = module
            return
        untrained = frozenset(module.untrained_parameter_names())
        if self._trained_set == (id(module), untrained):
            return
        freeze_untrained(module)
        if self.dist.enabled:
            if module is not self.model:
                self.model = module
                gc.collect()  # the old wrapper's reducer removes its gradient hooks when it is freed
            self.model = self.dist.wrap(module, self.device)
        else:
            self.model = module
        self._trained_set = (id(module), untrained)
        if untrained:
            logger.info("pretrain: %d parameter tensors are not trained by this objective now (e.g. %s)",
                        len(untrained), sorted(untrained)[0])

    # ------------------------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """Under FSDP a collective (the optimiser state is gathered): every rank calls it."""
        self._flush_pending()
        pos = self.batches.position(self.step)
        return {
            "version": FORMAT_VERSION,
            "step": self.step,
            "data": {"next_step": self.step, "epoch": pos.epoch, "batch_in_epoch": pos.batch_in_epoch,
                     "variant": pos.variant, "batch_size": self.batches.batch_size, "seed": self.batches.seed},
            "tokens_seen": self.tokens_seen,
            "train_seconds": self.train_seconds,
            "window": self.window.to_state(),
            "last_metrics": dict(self.last_metrics),
            "optimizer": self._optimizer_state(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(),
            "step_guard": self.guard.state_dict(),
            **({"stream_memory": self._stream_memory_state()} if self.carries_memory else {}),
        }

    @property
    def carries_memory(self) -> bool:
        """The loader serves document streams (training/streams.py): the model's memory of every batch slot is
        training state, and saving it is a collective under DDP (every rank calls state_dict)."""
        return bool(getattr(self.batches, "carries_memory", False))

    def _stream_memory_state(self) -> dict[str, Any] | None:
        """The carried memory of every slot of the global batch (training/models/core/stream_memory.py), gathered
        from the ranks in slot order (rank r holds slots r*B/W..), so it resumes under any number of processes."""
        memory = getattr(unwrap(self.model), "stream_memory", None)
        local = memory.state() if memory is not None else None
        parts = [local]
        if self.dist.enabled:
            parts = [None] * self.dist.world_size
            torch.distributed.all_gather_object(parts, local)
        if any(part is None for part in parts):  # no memory (mem_len 0, or no step taken yet)
            return None
        return {"layers": [torch.cat(layer) for layer in zip(*(part["layers"] for part in parts))],
                "valid": torch.cat([part["valid"] for part in parts])}

    def _load_stream_memory(self, state: dict[str, Any] | None) -> None:
        """This rank's slots of a saved carried memory (see _stream_memory_state)."""
        from .models.core.stream_memory import memory_of

        module = unwrap(self.model)
        if state is None or not state["layers"]:
            module.stream_memory = None
            return

        per_rank, start = self.batches.local_batch_size, self.dist.rank * self.batches.local_batch_size
        if state["valid"].shape[0] != self.batches.batch_size:
            raise ValueError(f"the checkpoint's stream memory holds {state['valid'].shape[0]} slots, the batch has "
                             f"{self.batches.batch_size}")
        mine = slice(start, start + per_rank)
        module.stream_memory = None
        memory_of(module).load_state({"layers": [layer[mine] for layer in state["layers"]],
                                      "valid": state["valid"][mine]}, self.device)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.tokens_seen = int(state["tokens_seen"])
        self.train_seconds = float(state["train_seconds"])
        self.window = Window.from_state(state["window"])
        self.last_metrics = dict(state.get("last_metrics", {}))
        # the kernel switches (fused / foreach) stay this run's: they change the rounding, not the trajectory, and
        # a checkpoint written on another device would otherwise bring its own (e.g. the CPU's loop onto CUDA)
        kernels = [{k: group[k] for k in ("fused", "foreach") if k in group} for group in self.optimizer.param_groups]
        if is_sharded(self.model):  # the full state of any checkpoint, each rank keeping its shards
            load_full_optimizer_state(self.model, self.optimizer, state["optimizer"])
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        for group, own in zip(self.optimizer.param_groups, kernels):
            group.update(own)
        scheduler = dict(state["scheduler"])
        if "lr_lambdas" in scheduler:  # the rule is this run's config (an extended run's budget), not the saved one
            scheduler["lr_lambdas"] = [None] * len(scheduler["lr_lambdas"])
        self.scheduler.load_state_dict(scheduler)
        set_rng_state(state["rng"])
        if self.carries_memory:
            self._load_stream_memory(state.get("stream_memory"))
        if "step_guard" in state:  # checkpoints written before the guard existed start it afresh
            self.guard.load_state_dict(state["step_guard"])

    # -------------------------------------------------------------------------------------------- loop

    def train_step(self, batch: dict[str, torch.Tensor]) -> dict:
        """One optimiser step over `batch` (in `grad_accumulation` micro-batches); its update is skipped when the
        step guard rejects the loss or gradient norm (`self.last_step_skipped`)."""
        self._sync_trainable()
        self.model.train()
        slices = self.settings.grad_accumulation
        parts = [(batch, None)] if slices == 1 else split_batch(batch, slices)
        step_scalars, total_loss = [], None
        owned_grads: set[int] = set()  # CUDA graphs: the gradients copied out of the graphs' memory in this step
        for index, (micro, weights) in enumerate(parts):
            micro = {k: v.to(self.device, non_blocking=True) for k, v in micro.items()}
            if self.settings.cudagraphs:  # a new replay: what the previous one returned may be overwritten now
                torch.compiler.cudagraph_mark_step_begin()
            # DDP: gradients are all-reduced once per optimiser step, in the last micro-batch's backward
            local = index < len(parts) - 1 and hasattr(self.model, "no_sync")
            with self.model.no_sync() if local else contextlib.nullcontext():
                with self.autocast:
                    out = self.objective(self.model, micro)
                loss = out["loss"] if weights is None else weighted_loss(out, weights)
                loss.backward()
            total_loss = loss.detach() if total_loss is None else total_loss + loss.detach()
            kept = {k: v for k, v in out.items() if v is not None and (_is_loss(k) or _is_count(k))
                    and not (isinstance(v, torch.Tensor) and v.dim() != 0)}
            if self.settings.cudagraphs:  # out of the graph's memory, which the next replay overwrites
                kept = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in kept.items()}
                if index < len(parts) - 1:
                    self._own_gradients(owned_grads)
            step_scalars.append((kept, weights))
        grad_norm = clip_gradients(self.model, self.settings.max_grad_norm)
        if weights is None:
            scalars = step_scalars[0][0]
        else:  # whole-batch metrics from the micro-batches' (still on-device) scalars
            scalars = combine_scalars([({k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in part.items()},
                                        w) for part, w in step_scalars], total_loss)
        if self.xla:
            return self._xla_finish_step(scalars, grad_norm)
        if self.defer_reads:
            return self._deferred_finish_step(scalars, grad_norm)
        tensors = [k for k, v in scalars.items() if isinstance(v, torch.Tensor) and v.dim() == 0]
        # one device->host copy for the scalars and the gradient norm (float64 holds float32 losses and int64
        # counts exactly); the step guard needs them before deciding on the update
        values = torch.stack([scalars[k].detach().to(torch.float64) for k in tensors]
                             + [grad_norm.detach().to(torch.float64)]).tolist()
        scalars.update(zip(tensors, values[:-1]))
        # under DDP every rank must take the same decision: the loss averaged over ranks (the norm already is global)
        reason = self.guard.check(self.dist.mean(float(scalars["loss"])), values[-1], self.step + 1)
        self.last_step_skipped = reason is not None
        if not self.last_step_skipped:
            self.optimizer.step()
        self.scheduler.step()  # a skipped step still advances the schedule: lr stays tied to the step count
        self.optimizer.zero_grad(set_to_none=True)
        return scalars

    def _own_gradients(self, owned: set[int]) -> None:
        """CUDA graphs, between two micro-steps of one optimiser step: a parameter's first gradient of the step is
        the backward graph's output itself (autograd keeps it rather than copying), which the next micro-step's
        replay overwrites. A copy of the trainer's replaces it, and the later micro-steps add into that in place
        (the same sum); `owned`: the ids of the copies made in this step, which stay alive as the gradients."""
        for param in self.model.parameters():
            grad = param.grad
            if grad is not None and id(grad) not in owned:
                param.grad = grad.clone()
                owned.add(id(param.grad))

    def _xla_finish_step(self, scalars: dict, grad_norm: torch.Tensor) -> dict:
        """The XLA end of a step: update, schedule, and cut the graph - without reading anything back, so the
        step guard cannot veto this update (it checks the values when they are read, `_flush_pending`)."""
        from . import xla

        xla.optimizer_step(self.optimizer)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        xla.sync()
        self.last_step_skipped = False
        out = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in scalars.items()}
        out["grad_norm"] = grad_norm.detach()
        return out

    def _deferred_finish_step(self, scalars: dict, grad_norm: torch.Tensor) -> dict:
        """The sync-free end of a CUDA step: the optimiser skips the update on the device when the gradient norm
        is not finite (`found_inf`, read by the fused kernel, which also leaves its step count unchanged); the
        schedule steps either way (as for a skipped step on the host path). Nothing is read back: the scalars
        wait for `_flush_pending`, where the guard counts the skipped steps."""
        found_inf = (~torch.isfinite(grad_norm.detach())).to(torch.float32)
        self.optimizer.grad_scale, self.optimizer.found_inf = None, found_inf
        try:
            self.optimizer.step()
        finally:
            del self.optimizer.grad_scale, self.optimizer.found_inf
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.last_step_skipped = False  # known when the values are read
        out = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in scalars.items()}
        out["grad_norm"] = grad_norm.detach()
        return out

    def _flush_pending(self) -> None:
        """Read the waiting steps' scalars in one transfer, then check them with the step guard and add them to
        the metrics window, in step order. XLA: detection only (their updates were applied). Deferred CUDA: a
        step with a non-finite gradient norm was skipped on the device; the guard counts it as skipped (and may
        stop the run), and its values stay out of the averages, as on the host path. Under DDP the ranks'
        values are reduced here (every rank flushes at the same steps)."""
        if not self._pending:
            return
        started = time.perf_counter()
        keys = [[k for k, v in out.items() if isinstance(v, torch.Tensor)] for _, out, _, _ in self._pending]
        tensors = [out[k] for (_, out, _, _), ks in zip(self._pending, keys) for k in ks]
        if self.xla:
            from . import xla

            values = iter(xla.to_host(tensors))
        else:  # float64 holds float32 losses and int64 counts exactly
            values = iter(torch.stack([t.to(torch.float64) for t in tensors]).tolist() if tensors else [])
        waited = time.perf_counter() - started  # the device finishing the steps: part of their time
        for (step, out, tokens, seconds), ks in zip(self._pending, keys):
            host = {**out, **{k: next(values) for k in ks}}
            grad_norm = host.pop("grad_norm")
            seconds += waited / len(self._pending)
            self.train_seconds += waited / len(self._pending)
            if self.xla:
                self.guard.check(host["loss"], grad_norm, step, detect_only=True)
                self.window.add(host, tokens, seconds)
                continue
            host, tokens = self.dist.reduce_step(host, tokens)  # all ranks' losses / counts / tokens
            self.tokens_seen += tokens
            # the norm is global under DDP (all-reduced gradients), so every rank's device took the same decision
            reason = self.guard.check(host["loss"], grad_norm, step, detect_only=math.isfinite(grad_norm))
            if reason is None:
                self.window.add(host, tokens, seconds)
        self._pending = []

    def _optimizer_state(self) -> dict[str, Any]:
        """torch's optimizer.state_dict() layout: under FSDP gathered from the shards (a collective: every rank
        calls state_dict(); rank 0 gets the state, the others {})."""
        if is_sharded(self.model):
            return full_optimizer_state(self.model, self.optimizer)
        return self._host(self.optimizer.state_dict())

    def _host(self, state: Any) -> Any:
        """Optimizer state with XLA tensors copied to the CPU (checkpoints load anywhere); unchanged elsewhere."""
        if not self.xla:
            return state
        if isinstance(state, torch.Tensor):
            return state.detach().cpu()
        if isinstance(state, dict):
            return {k: self._host(v) for k, v in state.items()}
        if isinstance(state, list):
            return [self._host(v) for v in state]
        return state

    def _batch_source(self, start: int, end: int):
        """(batch, real tokens) of steps start..end-1: built `loader_workers` steps ahead by threads (each with its
        own copy of the loader's per-epoch cache; on CUDA in pinned memory, training/prefetch.py), and on XLA padded to the static width and copied to the device
        by torch-xla's MpDeviceLoader."""
        batch_of_step = per_thread(self.batches, "batch") if self.settings.loader_workers else self.batches.batch
        if self.device.type == "cuda":  # page-locked, so that train_step's non_blocking copies are asynchronous
            batch_of_step = pinned(batch_of_step)
        host = prefetch_batches(batch_of_step, start, self.settings.loader_workers, end_step=end)
        if self.xla:
            from . import xla

            return xla.device_batches(host, self.device, self.settings.static_width, self.batches.pad_id)
        if self.settings.real_tokens_first:
            host = (check_real_tokens_first(batch, step) for step, batch in enumerate(host, start))
        return ((batch, int(batch["attention_mask"].sum())) for batch in host)

    def _log(self) -> None:
        self._flush_pending()
        record = {"step": self.step, "lr": self.scheduler.get_last_lr()[0], "tokens": self.tokens_seen,
                  "epoch": round(self.step / self.batches.steps_per_epoch, 4), **self.window.means(),
                  "skipped_steps": self.guard.skipped}
        # MFU = model FLOPs per token x tokens/s over the peak of all devices (null without a configured peak)
        flops, peak = self.settings.train_flops_per_token, self.settings.peak_flops
        record["mfu"] = record["tokens_per_s"] * flops / (peak * self.dist.world_size) if peak and flops else None
        if is_compiled(self.module):  # pretrain.compile: a count that grows after warm-up means recompiles
            record["compiled_graphs"] = compiled_graphs()
        if self.dist.is_main:  # every rank computes the same record; one writes it
            append_jsonl(self.settings.metrics_path, [record])
            self.sink.log(record, self.step)
        self.last_metrics = record
        self.window = Window()
        logger.info("step %d/%d loss %.4f mlm_acc %.4f lr %.3g %.0f tokens/s", self.step, self.settings.max_steps,
                    record.get("loss", float("nan")), record.get("mlm_acc", float("nan")), record["lr"],
                    record["tokens_per_s"])

    def train(self, stop_after: int | None = None,
              on_step_end: Callable[["Trainer"], None] | None = None) -> None:
        """Run from self.step to max_steps (or to `stop_after` steps in total, e.g. to stop early on purpose).
        `on_step_end` is called after every step (checkpointing lives there)."""
        end = self.settings.max_steps if stop_after is None else min(self.settings.max_steps, stop_after)
        bar = tqdm(total=self.settings.max_steps, initial=self.step, desc="pretrain", unit="step", disable=None,
                   dynamic_ncols=True) if self.dist.is_main else tqdm(disable=True)
        source = self._batch_source(self.step, end)
        try:
            while self.step < end:
                started = time.perf_counter()
                batch, tokens = next(source)
                out = self.train_step(batch)
                if self.xla or self.defer_reads:  # the scalars stay on the device until the next metrics line
                    self.step += 1
                    if self.xla:  # deferred CUDA: the global count (over ranks) is added by _flush_pending
                        self.tokens_seen += tokens
                    seconds = time.perf_counter() - started
                    self.train_seconds += seconds
                    self._pending.append((self.step, out, tokens, seconds))
                    bar.update(1)
                    if self.step % self.settings.log_every == 0 or self.step == self.settings.max_steps:
                        self._log()
                    if on_step_end is not None:
                        on_step_end(self)
                    continue
                out, tokens = self.dist.reduce_step(out, tokens)  # all ranks' losses / counts / tokens
                seconds = time.perf_counter() - started
                self.step += 1
                self.tokens_seen += tokens
                self.train_seconds += seconds
                if not self.last_step_skipped:  # a skipped step's (non-finite, spiking) loss stays out of the averages
                    self.window.add(out, tokens, seconds)
                bar.update(1)
                bar.set_postfix(loss=f"{out['loss']:.3f}", tok_s=f"{tokens / seconds:.0f}", refresh=False)
                if self.step % self.settings.log_every == 0 or self.step == self.settings.max_steps:
                    self._log()
                if on_step_end is not None:
                    on_step_end(self)
            self._flush_pending()
        finally:
            source.close()  # stops the prefetching threads
            bar.close()
            self.sink.close()  # flushed after every record already; a later train() reopens it
