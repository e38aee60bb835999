"""Runner presets -> a Beam runner and PipelineOptions, and running a pipeline with clean errors.

The runner is always chosen explicitly. `local` is Beam's FnApiRunner with `direct_num_workers` worker
subprocesses (`direct_running_mode='multi_processing'`): real parallelism on one machine, no Java, no network.
Beam's default DirectRunner path is never used because it may try to download and start a Prism binary.
`in_process` runs the same runner in the calling process (one worker; handy under a debugger).

    python -c "from preprocessing.runners import describe; from preprocessing.config import RunnerConfig; print(describe(RunnerConfig()))"
"""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from bertfactory.errors import BertfactoryError

from .config import RunnerConfig
from .worker_errors import recover_input_error

logger = logging.getLogger(__name__)


def pipeline_options(cfg: RunnerConfig) -> PipelineOptions:
    if cfg.preset == "local":
        flags = [f"--direct_num_workers={cfg.num_workers}", "--direct_running_mode=multi_processing"]
    else:
        flags = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
    return PipelineOptions(flags + list(cfg.extra_options))


def make_runner(cfg: RunnerConfig) -> FnApiRunner:
    return FnApiRunner()


def describe(cfg: RunnerConfig) -> dict:
    """The runner settings recorded in the manifest."""
    workers = cfg.num_workers if cfg.preset == "local" else 1
    mode = "multi_processing" if cfg.preset == "local" else "in_memory"
    return {"preset": cfg.preset, "runner": "FnApiRunner", "direct_num_workers": workers,
            "direct_running_mode": mode, "extra_options": list(cfg.extra_options), "beam": beam.__version__}


def run_pipeline(build, cfg: RunnerConfig, name: str) -> None:
    """Build a pipeline with `build(pipeline)` and run it to completion on the configured runner. An InputError
    raised inside a worker comes out as that InputError, not as Beam's wrapper around it."""
    pipeline = beam.Pipeline(runner=make_runner(cfg), options=pipeline_options(cfg))
    build(pipeline)
    logger.info("%s: running on FnApiRunner (%s)", name, describe(cfg))
    try:
        pipeline.run().wait_until_finish()
    except BertfactoryError as err:
        clean = recover_input_error(err)
        raise (clean or err) from None
    except Exception as err:  # Beam wraps worker failures in RuntimeError and friends
        clean = recover_input_error(err)
        if clean is not None:
            raise clean from None
        raise
