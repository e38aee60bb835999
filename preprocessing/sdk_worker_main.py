"""The `local` preset's SDK worker process: Beam's own worker main, started so that it prints nothing of its own.

    python -m preprocessing.sdk_worker_main      # what dead_workers.WatchedSubprocessWorkerHandler starts

Beam's worker (apache_beam.runners.worker.sdk_worker_main) sends its log lines through the Fn API logging service
to the runner, which relays them to the main process's `apache_beam` loggers (shown with `bertfactory -v`). But
`import apache_beam` first logs "apitools not found, and bigquery client libraries are not available" with the
module-level `logging.warning`, which on a root logger without handlers calls `logging.basicConfig()`: a stderr
handler, through which every worker then also printed its INFO lines ("INFO:__main__:Logging handler created.",
"INFO:apache_beam.runners.worker.sdk_worker:Control channel established.", ...) under every command's output.
Here the root logger gets a NullHandler before Beam is imported (so no basicConfig) and the preprocessing
package's filter (preprocessing/quiet_beam_import.py) drops that one warning; so is the warning, relayed at every
worker start, that no staged main session can be loaded (`_NoStagedSession`). A crash still shows: the worker logs
it to the runner, and the interpreter prints the uncaught exception's traceback itself.
"""

import logging
import sys

logging.getLogger().addHandler(logging.NullHandler())

import preprocessing  # noqa: E402,F401  (installs the filter of Beam's import warning)
from apache_beam.runners.worker import sdk_worker_main  # noqa: E402

BEAM_WORKER = b"-m apache_beam.runners.worker.sdk_worker_main"
QUIET_WORKER = b"-m preprocessing.sdk_worker_main"



class _NoStagedSession(logging.Filter):
    """The local workers import the pipeline's code from the installed package; none is staged as a pickled main
    session, so Beam's warning that there is no directory to load one from (relayed to the main process at every
    start of a worker) says nothing here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No semi_persistent_directory found")


if __name__ == "__main__":
    import gc

    from preprocessing import dofn_specs_cache, options_view_cache

    logging.getLogger(sdk_worker_main.__name__).addFilter(_NoStagedSession())
    # as in the driver (runners.run_pipeline, pipeline.run_preprocess): Beam's DoFn checks and options views once
    # per class, and the imported modules' objects kept out of the full collections release_freed_memory runs
    dofn_specs_cache.install()
    options_view_cache.install()
    gc.freeze()
    sdk_worker_main.main(sys.argv)
