"""Carry a clean InputError message out of a Beam worker, once, without the workers' tracebacks.

Beam wraps an exception raised inside a DoFn (with the worker's traceback, and for subprocess workers as text
only), so the type is lost. Workers raise `worker_input_error(message)`, whose text carries the message
between markers; `recover_input_error(exc)` finds it in whatever Beam raised and gives back a plain InputError
with just that message.

Beam also logs a failed bundle several times on its way out (the DoFn runner, the SDK harness, the job service
relaying the worker's log, each with the traceback: seven tracebacks, ~170 lines, for one bad input). A user
error is not a bug, so those records are left out: `worker_input_error` puts `UserErrorLogFilter` on the worker's
log handlers and drops the harness's own print of the traceback from the worker's stderr (it runs in the worker,
just before the raise), and `quiet_user_errors()` filters the driver's handlers for the length of a run. The filter drops only records that carry the marker; any other failure keeps its traceback.

    raise worker_input_error(f"{path}: line {n} is not JSON")        # in a DoFn
    with quiet_user_errors(): pipeline.run().wait_until_finish()      # in the driver (runners.run_pipeline)
"""

from __future__ import annotations

import logging
import re
import sys
from contextlib import contextmanager

from bertfactory.errors import InputError

_OPEN = "<<bertfactory-input-error>>"
_CLOSE = "<</bertfactory-input-error>>"
_PATTERN = re.compile(re.escape(_OPEN) + r"(.*?)" + re.escape(_CLOSE), re.DOTALL)


def worker_input_error(message: str) -> InputError:
    """The InputError a DoFn raises for a user error (bad input, bad setting); also silences Beam's logging of it
    in this worker process."""
    _filter_handlers(logging.getLogger())
    if not isinstance(sys.stderr, _QuietStderr):
        sys.stderr = _QuietStderr(sys.stderr)
    return InputError(f"{_OPEN}{message}{_CLOSE}")


class _QuietStderr:
    """sys.stderr less the writes that carry the marker: Beam's SDK harness prints a failed bundle's traceback
    with print(..., file=sys.stderr) besides logging it (sdk_worker.SdkHarness._execute)."""

    def __init__(self, stream):
        self._stream = stream
        self._dropped_line = False  # print() writes its end ("\n") separately: drop it with the text

    def write(self, text: str) -> int:
        if _OPEN in text:
            self._dropped_line = True
            return len(text)
        if self._dropped_line and text == "\n":
            self._dropped_line = False
            return len(text)
        self._dropped_line = False
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


class UserErrorLogFilter(logging.Filter):
    """Drops log records about a worker's user error (its message, arguments or traceback carry the marker)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _OPEN in str(record.msg):
            return False
        if record.args and any(_OPEN in str(arg) for arg in (record.args if isinstance(record.args, tuple)
                                                               else (record.args,))):
            return False
        if record.exc_info and record.exc_info[1] is not None and _carries_marker(record.exc_info[1]):
            return False
        return not (record.exc_text and _OPEN in record.exc_text)


_FILTER = UserErrorLogFilter()


def _carries_marker(exc: BaseException) -> bool:
    return any(_OPEN in text for text in _texts(exc))


def _filter_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """Put the filter on `logger`'s handlers (a filter on a handler sees the records propagated to it, a filter
    on a logger only its own); returns the handlers it was added to."""
    added = []
    for handler in logger.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
            added.append(handler)
    return added


@contextmanager
def quiet_user_errors():
    """For the block's length, the driver's root log handlers leave out records about a worker's user error (the
    job service relays the workers' logs; with the in-process runner the worker is this process)."""
    added = _filter_handlers(logging.getLogger())
    try:
        yield
    finally:
        for handler in added:
            handler.removeFilter(_FILTER)


def _texts(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield str(exc)
        yield repr(exc)
        exc = exc.__cause__ or exc.__context__


def recover_input_error(exc: BaseException) -> InputError | None:
    """The InputError a worker raised somewhere inside `exc`, with its clean message; None if there is none."""
    for text in _texts(exc):
        match = _PATTERN.search(text)
        if match:
            # Beam may escape newlines when it stringifies a remote traceback.
            return InputError(match.group(1).replace("\\n", "\n"))
    return None


class _BrokenChannel(logging.Filter):
    """Drops the records Beam's data plane logs, traceback and all, when a worker's gRPC channel breaks (a worker
    that died: the job ends with preprocessing.dead_workers' one line about it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and _is_rpc_error(record.exc_info[1]))


def _is_rpc_error(exc: BaseException | None) -> bool:
    import grpc

    return isinstance(exc, grpc.RpcError)


_installed = False


def quiet_broken_channels() -> None:
    """Once per process: a gRPC error that ends one of Beam's reader threads (beam_control_read, the data plane's)
    is logged at debug level instead of printed with its traceback by threading.excepthook, and the data plane's
    own error record of it is dropped. Such an error means a worker's channel broke; the job fails with its own
    message (a dead worker's one line, or Beam's exception) either way."""
    global _installed
    if _installed:
        return
    _installed = True
    import threading

    previous = threading.excepthook

    def hook(args) -> None:
        if _is_rpc_error(args.exc_value):
            logging.getLogger(__name__).debug("thread %s ended: gRPC channel broken (%r)",
                                              getattr(args.thread, "name", "?"), args.exc_value)
            return
        previous(args)

    threading.excepthook = hook
    for name in ("apache_beam.runners.worker.data_plane", "apache_beam.runners.worker.sdk_worker"):
        logging.getLogger(name).addFilter(_BrokenChannel())
