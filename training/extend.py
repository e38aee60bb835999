"""Extending a pretraining run: more `max_steps` on the same trajectory is a resume, not a new run.

A checkpoint at step N holds the result of steps 1..N. A run with a larger max_steps continues it exactly when the
learning-rate multipliers of steps 0..N are the same under the old and the new budget (the steps already done
and the rate the optimiser holds at N): always for `constant`, for `wsd` from a checkpoint at or before the old
run's decay start, and for `linear`, `slanted_triangular` and `one_cycle` (which stretch with max_steps) only from a
checkpoint inside the warmup. `pretrain.extend: true` (`bertfactory ... --extend`) continues the newest checkpoint
whatever the schedule: from the resumed step on the schedule is the new budget's (the learning rate jumps to the
new schedule's value at that step); the steps before it stay as they were trained.

    limit = unchanged_through(saved_pretrain_fields, cfg.trajectory_fields())   # last step whose lr is unchanged
    only = extension_only(saved_fingerprint, current_fingerprint)               # True: max_steps raised, nothing else
"""

from __future__ import annotations

from typing import Callable, Mapping

from .optim import schedule_rule

EXTENDABLE = ("max_steps",)


def _rule(fields: Mapping) -> Callable[[int], float]:
    from .pretrain_config import PretrainConfig

    defaults = PretrainConfig().trajectory_fields()
    f = {**defaults, **fields}
    max_steps = int(f["max_steps"])
    warmup = min(int(f["warmup_steps"]), max_steps)  # as training.optim.scheduler_from_config clamps it
    return schedule_rule(f["schedule"], warmup, max_steps, stlr_ratio=f["stlr_ratio"],
                         one_cycle_div_factor=f["one_cycle_div_factor"],
                         one_cycle_final_div_factor=f["one_cycle_final_div_factor"],
                         wsd_decay_fraction=f["wsd_decay_fraction"])


def unchanged_through(old: Mapping, new: Mapping) -> int:
    """The last step s such that the learning-rate multipliers of steps 0..s are equal under `old` and `new` (pretrain
    trajectory fields), at most the old max_steps; -1 when even step 0 differs."""
    a, b = _rule(old), _rule(new)
    last = min(int(old.get("max_steps", 0)), int(new.get("max_steps", 0)))
    for step in range(last + 1):
        if abs(a(step) - b(step)) > 1e-12:
            return step - 1
    return last


def branch_step(fields: Mapping) -> int:
    """The last step that every longer run of this schedule shares with it (pretrain trajectory fields): where a
    wsd schedule's decay starts, the end of a constant one, the end of the warmup of those that stretch with
    max_steps. A checkpoint there continues exactly into any raised max_steps."""
    longer = {**fields, "max_steps": 2 * int(fields["max_steps"]) + 1}
    return unchanged_through(fields, longer)


def differing_fields(old: Mapping, new: Mapping, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ between two nested dicts."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += differing_fields(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def is_extension(old_pretrain: Mapping, new_pretrain: Mapping) -> bool:
    """True when the only difference is a larger max_steps."""
    diffs = differing_fields(old_pretrain, new_pretrain)
    return diffs == ["max_steps"] and int(new_pretrain["max_steps"]) > int(old_pretrain["max_steps"])


def resumable_step(old_pretrain: Mapping, new_pretrain: Mapping, steps: list[int], extend: bool) -> int | None:
    """Which of the checkpoints at `steps` (written under `old_pretrain`) continues into `new_pretrain` exactly
    (or, with `extend`, the newest), None when none does."""
    if not steps:
        return None
    if extend:
        return max(steps)
    limit = unchanged_through(old_pretrain, new_pretrain)
    fitting = [s for s in steps if s <= limit]
    return max(fitting) if fitting else None


def refusal(setting: str, old, new, run_dir, reason: str) -> str:
    """The one line that refuses a change (`setting`: its dotted name) that alters steps already trained, with the
    two ways forward."""
    return (f"{setting} changed ({old!r} -> {new!r}) since the outputs in {run_dir}/pretrain were made, "
            f"and {reason}; use a new --run-dir to keep both, or pass --force to move the old outputs aside "
            f"(pretrain.replaced-<time>-<key>/) and start over")


def schedule_reason(old: Mapping, new: Mapping, newest: int) -> str:
    """Why a raised max_steps cannot continue the checkpoint at `newest` (for the refusal line)."""
    limit = unchanged_through(old, new)
    schedule = new.get("schedule")
    warmup = int(new.get("warmup_steps", 0))
    clamp = (f" (warmup_steps={warmup} is longer than the {old.get('max_steps')}-step run, so the warmup stretches "
             "with max_steps)" if warmup > int(old.get("max_steps", 0)) else "")
    return (f"the {schedule} schedule then changes the learning rate from step {limit + 1} on{clamp}, before the "
            f"newest checkpoint (step {newest}); pass --extend to continue it with the new schedule from there")
