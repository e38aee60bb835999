"""Loss spikes and non-finite losses: decide per optimiser step whether to apply its update.

    guard = StepGuard(spike_factor=3.0, max_skipped=20, max_consecutive=5)
    reason = guard.check(loss, grad_norm, step)   # None = apply the update; else why it is skipped
    # raises TrainingDiverged once too many steps were skipped

A step is skipped when its loss or its gradient norm (before clipping) is not finite, or - with a spike factor -
when its loss exceeds spike_factor x the median of the last `window` accepted losses (checked once at least
`min_history` losses are known). A skipped step still consumes its batch and advances the schedule (so the data
order and the learning-rate curve stay tied to the step count); only the parameter update is dropped, and the
skipped loss does not enter the median. The state (history, counters) is part of the trainer's checkpoint, so a
resumed run makes the same decisions.
"""

from __future__ import annotations

import logging
import math
import statistics
from typing import Any

from bertfactory.errors import BertfactoryError

logger = logging.getLogger(__name__)


class TrainingDiverged(BertfactoryError):
    """Too many optimiser steps had to be skipped (non-finite or spiking losses)."""


class StepGuard:
    def __init__(self, spike_factor: float | None = None, max_skipped: int = 20, max_consecutive: int = 5,
                 window: int = 100, min_history: int = 10):
        self.spike_factor = spike_factor
        self.max_skipped = max_skipped
        self.max_consecutive = max_consecutive
        self.window = window
        self.min_history = min_history
        self.history: list[float] = []  # the last `window` accepted losses
        self.skipped = 0
        self.consecutive = 0

    def _reason(self, loss: float, grad_norm: float) -> str | None:
        if not math.isfinite(loss):
            return f"non-finite loss {loss}"
        if not math.isfinite(grad_norm):
            return f"non-finite gradient norm {grad_norm}"
        if self.spike_factor is not None and len(self.history) >= self.min_history:
            median = statistics.median(self.history)
            if loss > self.spike_factor * median:
                return f"loss spike {loss:.4g} > {self.spike_factor} x running median {median:.4g}"
        return None

    def check(self, loss: float, grad_norm: float, step: int, detect_only: bool = False) -> str | None:
        """`step`: the 1-based number of the step being decided (for messages). Returns None to apply the
        update, else the reason it is skipped; raises TrainingDiverged past the configured limits.
        `detect_only`: the update was already applied (XLA reads the values after the step, training/xla.py);
        the step is counted and logged as a bad step all the same, so the limits still stop the run."""
        reason = self._reason(loss, grad_norm)
        if reason is None:
            self.consecutive = 0
            self.history = (self.history + [loss])[-self.window:]
            return None
        self.skipped += 1
        self.consecutive += 1
        logger.warning("step %d: %s (%s); %d bad steps in total, %d in a row", step,
                       "bad step detected after its update was applied" if detect_only else "update skipped",
                       reason, self.skipped, self.consecutive)
        if self.consecutive > self.max_consecutive or self.skipped > self.max_skipped:
            raise TrainingDiverged(
                f"training stopped at step {step}: {self.skipped} updates skipped in total and {self.consecutive} in "
                f"a row (limits pretrain.max_skipped_steps={self.max_skipped}, "
                f"pretrain.max_consecutive_skipped_steps={self.max_consecutive}); last: {reason}. Lower "
                "pretrain.learning_rate, raise warmup_steps or resume from an earlier checkpoint")
        return reason

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history), "skipped": self.skipped, "consecutive": self.consecutive}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [float(x) for x in state["history"]]
        self.skipped = int(state["skipped"])
        self.consecutive = int(state["consecutive"])
