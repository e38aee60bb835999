"""Runner presets -> a Beam runner and PipelineOptions, and running a pipeline with clean errors.

The runner is always chosen explicitly; Beam's default DirectRunner path is never used because it may try to
download and start a Prism binary. The pipeline code is the same on every preset: only the options differ.

- `local`: Beam's FnApiRunner with `direct_num_workers` worker subprocesses (`direct_running_mode=
  multi_processing`): real parallelism on one machine, no Java, no network.
- `in_process`: the same runner in the calling process (one worker; handy under a debugger).
  A `local` job whose input is smaller than `in_process_below_mib` runs this way too (`runner_for_input`): two
  worker subprocesses cost ~2-3 CPU-s each to start, per job, more than a small job's own work. So does a job of
  raw documents packed by tokens of any size on up to 2 workers (`in_process_tokenizer_bound`): the tokenizer's
  threads do its work, on every core from one process.
- `portable`: PortableRunner submitting to a running job service (`portable.job_endpoint`), SDK workers where
  `portable.environment` says (EXTERNAL worker pools, PROCESS, DOCKER). `python -m preprocessing.portable_local`
  starts Beam's Python local job service and worker pools on this machine (docs/runners.md).
- `dataflow`, `flink`, `spark`: those services' Beam runners with the preset's options. Ready-made sections for
  them are in infra/beam/presets/*.yaml (`load_preset`; docs/runners.md).

    python -c "from preprocessing.runners import describe; from preprocessing.config import RunnerConfig; print(describe(RunnerConfig()))"
"""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineRunner, PipelineState, create_runner

from bertfactory.config import load_yaml, validate
from bertfactory.errors import BertfactoryError

from . import dofn_specs_cache, options_view_cache
from .config import RunnerConfig, SdkEnvironmentConfig
from .dead_workers import DATA_CHANNEL_CLOSED, WorkerDied, death_after, death_in_text, deaths_seen
from .dead_workers import install as install_dead_worker_watch
from .worker_errors import quiet_broken_channels, quiet_user_errors, recover_input_error

logger = logging.getLogger(__name__)

RUNNER_NAMES = {"local": "FnApiRunner", "in_process": "FnApiRunner", "portable": "PortableRunner",
                "dataflow": "DataflowRunner", "flink": "FlinkRunner", "spark": "SparkRunner"}


def _environment_flags(env: SdkEnvironmentConfig) -> list[str]:
    flags = [f"--environment_type={env.type}"]
    if env.config:
        flags.append(f"--environment_config={env.config}")
    if env.setup_file:
        flags.append(f"--setup_file={env.setup_file}")
    return flags


def preset_flags(cfg: RunnerConfig) -> list[str]:
    """The Beam pipeline flags of the chosen preset (without extra_options)."""
    if cfg.preset == "local":
        return [f"--direct_num_workers={cfg.num_workers}", "--direct_running_mode=multi_processing"]
    if cfg.preset == "in_process":
        return ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
    if cfg.preset == "portable":
        # direct_num_workers is read by Beam's Python local job service (it runs the FnApiRunner); Flink/Spark
        # job servers ignore it.
        return [f"--job_endpoint={cfg.portable.job_endpoint}", f"--direct_num_workers={cfg.num_workers}",
                *_environment_flags(cfg.portable.environment)]
    if cfg.preset == "dataflow":
        d = cfg.dataflow
        flags = [f"--project={d.project}", f"--region={d.region}", f"--temp_location={d.temp_location}"]
        optional = {"staging_location": d.staging_location, "setup_file": d.setup_file,
                    "machine_type": d.machine_type, "max_num_workers": d.max_num_workers,
                    "sdk_container_image": d.sdk_container_image}
        return flags + [f"--{name}={value}" for name, value in optional.items() if value is not None]
    if cfg.preset == "flink":
        flags = [f"--flink_master={cfg.flink.flink_master}"]
        if cfg.flink.parallelism is not None:
            flags.append(f"--parallelism={cfg.flink.parallelism}")
        return flags + _environment_flags(cfg.flink.environment)
    if cfg.preset == "spark":
        return [f"--spark_master_url={cfg.spark.spark_master_url}", *_environment_flags(cfg.spark.environment)]
    raise ValueError(f"unknown runner preset {cfg.preset!r}")


def pipeline_options(cfg: RunnerConfig) -> PipelineOptions:
    return PipelineOptions(preset_flags(cfg) + list(cfg.extra_options))


def load_preset(path) -> RunnerConfig:
    """A runner preset file (a `preprocess.runner` section, e.g. infra/beam/presets/flink.yaml), validated; a bad
    file is a ConfigError naming it. In a run: --set "preprocess.runner=$(cat PRESET.yaml)" (a YAML value)."""
    return validate(RunnerConfig, load_yaml(path), source=str(path))


def make_runner(cfg: RunnerConfig) -> PipelineRunner:
    if cfg.preset in ("local", "in_process"):
        install_dead_worker_watch()  # a killed worker process fails the job instead of hanging it
        return FnApiRunner()
    return create_runner(RUNNER_NAMES[cfg.preset])


# bz2 / gzip / xz text is several times larger once read (the enwiki sample: 1.6 MB of bz2, ~5x that of XML):
# a compressed input counts this many times its stored size, so a small dump is not mistaken for a small job
COMPRESSED_INPUT_FACTOR = 5
COMPRESSED_SUFFIXES = (".bz2", ".gz", ".xz", ".lzma", ".zst", ".zip")


def input_size(files: list[tuple[str, int]]) -> int:
    """The size runner_for_input compares: the input files' bytes as stored (`files`: (path or URL, bytes)),
    compressed ones (by name) times COMPRESSED_INPUT_FACTOR."""
    return sum(size * (COMPRESSED_INPUT_FACTOR if str(path).lower().endswith(COMPRESSED_SUFFIXES) else 1)
               for path, size in files)


# A tokenizer-bound job (raw documents packed by tokens) spends ~4/5 of its CPU-s (at 10x sotu) in the tokenizer,
# whose Rust threads spread each batch over every core from one process; only the Python around them (the other
# fifth) gains from worker processes, and each worker costs its start-up and the data plane. Measured on 2 cores, in process
# vs the local preset's 2 workers: 1x sotu 4.7 vs 8.1 CPU-s (wall 3.8 vs 7.1 s), 10x 27.1 vs 32.1 CPU-s (walls a
# tie at load 5). With more workers on more cores that Python would be spread over them and the workers can win
# (a model fitted to those figures puts the crossover near 3 workers at 10x); not measured, so there the size
# rule decides as for every other job.
TOKENIZER_BOUND_MAX_WORKERS = 2


def runner_for_input(cfg: RunnerConfig, input_bytes: int, tokenizer_bound: bool = False) -> RunnerConfig:
    """The runner a preprocessing job over `input_bytes` of input (input_size) runs on: the local preset's worker
    subprocesses cost more to start than a small input's work, so below `in_process_below_mib` the job runs in the
    calling process (the in_process preset; same outputs, byte for byte). So does a `tokenizer_bound` job (raw
    documents packed by tokens) of any size while `in_process_tokenizer_bound` is on and `num_workers` is at most
    TOKENIZER_BOUND_MAX_WORKERS (see there why). in_process_below_mib 0 still means always the workers. Every
    other case: `cfg` itself."""
    if cfg.preset != "local" or cfg.in_process_below_mib <= 0:
        return cfg
    tokenizer_rule = (tokenizer_bound and cfg.in_process_tokenizer_bound
                      and cfg.num_workers <= TOKENIZER_BOUND_MAX_WORKERS)
    if tokenizer_rule or input_bytes < cfg.in_process_below_mib * 2**20:
        return cfg.model_copy(update={"preset": "in_process"})
    return cfg


def describe(cfg: RunnerConfig, input_bytes: int | None = None, tokenizer_bound: bool = False) -> dict:
    """The runner settings recorded in the manifest; with the job's `input_bytes` (and whether it is
    `tokenizer_bound`), whether the local preset ran it in the calling process (runner_for_input)."""
    out = {"preset": cfg.preset, "runner": RUNNER_NAMES[cfg.preset]}
    if cfg.preset in ("local", "in_process"):
        local = cfg.preset == "local"
        out.update(direct_num_workers=cfg.num_workers if local else 1,
                   direct_running_mode="multi_processing" if local else "in_memory")
        if local:
            out["in_process_below_mib"] = cfg.in_process_below_mib
            out["in_process_tokenizer_bound"] = cfg.in_process_tokenizer_bound
            if input_bytes is not None:
                out["ran_in_process"] = runner_for_input(cfg, input_bytes, tokenizer_bound).preset == "in_process"
    else:
        out["options"] = preset_flags(cfg)
    out.update(extra_options=list(cfg.extra_options), beam=beam.__version__)
    return out


def run_pipeline(build, cfg: RunnerConfig, name: str) -> None:
    """Build a pipeline with `build(pipeline)` and run it to completion on the configured runner. An InputError
    raised inside a worker comes out as that InputError, not as Beam's wrapper around it; a worker process that
    died (preprocessing.dead_workers) as one WorkerDied line naming the job."""
    dofn_specs_cache.install()  # Beam's per-DoFn signature checks once per class: ~0.2 CPU-s a job
    options_view_cache.install()  # its options views once per class, not an argparse parser each: ~0.2 CPU-s
    pipeline = beam.Pipeline(runner=make_runner(cfg), options=pipeline_options(cfg))
    build(pipeline)
    logger.info("%s: running on %s (%s)", name, RUNNER_NAMES[cfg.preset], describe(cfg))
    deaths = deaths_seen()
    quiet_broken_channels()  # a dead worker's broken channel: one line below, not Beam's threads' tracebacks
    try:
        with quiet_user_errors():  # the first user error comes out once, below, not as the workers' tracebacks
            result = pipeline.run()
            state = result.wait_until_finish()
    except BertfactoryError as err:
        clean = recover_input_error(err)
        raise (clean or _named(err, name)) from None
    except Exception as err:  # Beam wraps worker failures in RuntimeError and friends
        clean = recover_input_error(err) or _worker_died(err, name)
        if clean is None or _seen_by_the_data_plane(clean):
            # failed elsewhere first (the data plane noticed the closed channel): the watcher of a worker this
            # process started says how it died (killed by SIGKILL, exit status N) a moment later, and that is the
            # one line, whichever saw the death first; a portable job's watcher runs in another process, so the
            # data plane's words stay
            wait_s = DATA_PLANE_WAIT_S if clean is not None else 2.0  # any other failure: a short look
            if (died := death_after(deaths, wait_s=wait_s)) is not None:
                clean = _named(died, name)
        if clean is not None:
            raise clean from None
        raise
    # Portable runners report a failed job as a terminal state rather than always raising.
    if state is not None and state != PipelineState.DONE:
        raise RuntimeError(f"{name}: the Beam job ended in state {state} on {RUNNER_NAMES[cfg.preset]}")


# how long a failure the data plane saw first waits for the watcher's word on the worker (it comes within
# milliseconds when the worker is one of this process's subprocesses; generous for a loaded machine)
DATA_PLANE_WAIT_S = 10.0


def _seen_by_the_data_plane(err: BaseException) -> bool:
    """Whether `err` is the WorkerDied rebuilt from the data plane's "Channel closed prematurely" (death_in_text),
    which does not say which worker died nor how."""
    return isinstance(err, WorkerDied) and DATA_CHANNEL_CLOSED in str(err)


def _worker_died(exc: BaseException, name: str) -> WorkerDied | None:
    """The WorkerDied somewhere in `exc`'s chain (Beam may wrap it), named after the job; None if there is none."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, WorkerDied):
            return _named(exc, name)
        in_text = death_in_text(str(exc))  # portable: the job service's failure reaches the driver as text
        if in_text is not None:
            return _named(in_text, name)
        exc = exc.__cause__ or exc.__context__
    return None


def _named(err: BertfactoryError, name: str) -> BertfactoryError:
    return WorkerDied(f"{name}: {err}") if isinstance(err, WorkerDied) else err
