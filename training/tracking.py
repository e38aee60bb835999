"""Experiment tracking: the metrics a stage writes to metrics.jsonl (pretraining, distillation) or records per epoch
(fine-tuning) also go to TensorBoard event files and, when asked for, to MLflow.

    from training.tracking import TrackingConfig, MetricsSink
    target = TrackingConfig().target(run_dir / "pretrain" / "tensorboard", run_name="local/pretrain")
    sink = MetricsSink(target)
    sink.log({"loss": 2.3, "lr": 1e-3, "step": 50}, step=50)   # numbers only; other values are skipped
    sink.close()
    # then: tensorboard --logdir RUN    (every stage's event files are under RUN/<stage>/tensorboard)

TensorBoard: on by default (`tracking.tensorboard`), written with torch.utils.tensorboard's SummaryWriter (needs
the `tensorboard` package, a dependency). The writer is opened at the first record, with `purge_step` = that
record's step, so a run resumed from a checkpoint replaces the events logged after that checkpoint instead of
doubling them. Every record is flushed at once: a crashed run keeps what it logged.
MLflow: used when `tracking.mlflow` is on, MLFLOW_TRACKING_URI is set and `mlflow` is importable; otherwise it is
skipped with one log line saying why (never an error: tracking must not stop a training run).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from bertfactory.config import StrictModel

logger = logging.getLogger(__name__)

MLFLOW_ENV = "MLFLOW_TRACKING_URI"
TENSORBOARD_DIR = "tensorboard"  # inside a stage's directory


class TrackingConfig(StrictModel):
    """Where a stage's training metrics go besides metrics.jsonl (docs/run-directory.md)."""

    tensorboard: bool = Field(True, description="write TensorBoard event files to <stage dir>/tensorboard "
                              "(`tensorboard --logdir RUN`)")
    mlflow: bool = Field(True, description="also log to MLflow when MLFLOW_TRACKING_URI is set and mlflow is "
                         "installed (skipped otherwise)")
    mlflow_experiment: str = Field("bertfactory", min_length=1, description="MLflow experiment the runs are logged to")

    def target(self, tensorboard_dir: Path, run_name: str) -> "TrackingTarget":
        """This config applied to one stream of metrics: its event-file directory and MLflow run name."""
        return TrackingTarget(tensorboard_dir=Path(tensorboard_dir) if self.tensorboard else None,
                              mlflow_run=run_name if self.mlflow else None, mlflow_experiment=self.mlflow_experiment)


@dataclass(frozen=True)
class TrackingTarget:
    """Plain values saying where one stream of metrics goes (a field of training.trainer_settings.TrainerSettings)."""

    tensorboard_dir: Path | None
    """event files go here; None = no TensorBoard"""
    mlflow_run: str | None = None
    """MLflow run name; None = no MLflow (it is also skipped without MLFLOW_TRACKING_URI or the mlflow package)"""
    mlflow_experiment: str = "bertfactory"
    """MLflow experiment name"""

    def child(self, name: str) -> "TrackingTarget":
        """A sub-stream (e.g. one fine-tuning run): its own event directory and MLflow run."""
        return TrackingTarget(self.tensorboard_dir / name if self.tensorboard_dir is not None else None,
                              f"{self.mlflow_run}/{name}" if self.mlflow_run is not None else None,
                              self.mlflow_experiment)


class NumberedTargets:
    """Sub-streams of one target named in the order they are asked for (`01-<name>`, `02-<name>`, ...): a stage that
    trains several times in one run (distillation's phases) gets one event directory per training, in run order."""

    def __init__(self, target: TrackingTarget | None):
        self.target = target
        self.count = 0

    def next(self, name: str) -> TrackingTarget | None:
        self.count += 1
        return self.target.child(f"{self.count:02d}-{name}") if self.target is not None else None


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (booleans, strings, None and NaN/inf left out), `step` excluded: it is
    the x axis."""
    out = {}
    for key, value in record.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def mlflow_module(target: TrackingTarget):
    """The mlflow module when this target should log to MLflow, else None (logging why once)."""
    if target.mlflow_run is None:
        return None
    if not os.environ.get(MLFLOW_ENV):
        return None  # the common case: no MLflow server configured; nothing to say
    try:
        import mlflow
    except ImportError:
        logger.info("%s is set but mlflow is not installed: metrics go to metrics.jsonl%s only", MLFLOW_ENV,
                    " and TensorBoard" if target.tensorboard_dir is not None else "")
        return None
    return mlflow


class MetricsSink:
    """Feeds one stream of metrics records to TensorBoard and MLflow (as the target says). Opened lazily at the first
    record; `close()` may be called any number of times and a later `log` opens it again (appending)."""

    def __init__(self, target: TrackingTarget | None):
        self.target = target
        self._writer = None
        self._mlflow = None
        self._mlflow_run = None

    def log(self, record: dict[str, Any], step: int) -> None:
        if self.target is None:
            return
        values = scalars(record)
        if self.target.tensorboard_dir is not None:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                self.target.tensorboard_dir.mkdir(parents=True, exist_ok=True)
                self._writer = SummaryWriter(str(self.target.tensorboard_dir), purge_step=step)
            for key, value in values.items():
                self._writer.add_scalar(key, value, step)
            self._writer.flush()
        if self._mlflow_run is None and self._mlflow is None:
            self._mlflow = mlflow_module(self.target) or False
            if self._mlflow:
                self._mlflow.set_experiment(self.target.mlflow_experiment)
                self._mlflow_run = self._mlflow.start_run(run_name=self.target.mlflow_run, nested=True)
        if self._mlflow_run is not None:
            self._mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in values.items()}, step=step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._mlflow_run is not None:
            self._mlflow.end_run()
            self._mlflow_run = None
        self._mlflow = None


def log_records(target: TrackingTarget | None, records: list[dict[str, Any]], step_key: str) -> None:
    """A finished stream at once (e.g. a fine-tuning run's epochs, x axis `step_key`)."""
    if target is None:
        return
    sink = MetricsSink(target)
    try:
        for record in records:
            sink.log(record, int(record[step_key]))
    finally:
        sink.close()
