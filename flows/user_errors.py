"""What ends a `bertfactory` command as a user error (one `error: ...` line, exit code 2) rather than as a bug (a
traceback), and the console filter that keeps Prefect's own report of such a failure off the terminal.

User errors are the `bertfactory.errors` family (bad recipe keys and values, unreadable or malformed input, a
missing sample, a stage run before its upstream) and a missing or unusable file the user named (FileNotFoundError,
IsADirectoryError, NotADirectoryError, PermissionError: they name the file). Everything else is a bug and keeps its
traceback. With Prefect a failed flow also logs "Encountered exception during execution" with the whole traceback
and "Finished in state Failed(...)" for the task and the flow; for a user error those lines only repeat the one
line the CLI prints, so `quiet_prefect_user_errors()` keeps them off the console for the command's duration while
the Prefect API (and UI) still gets them whole. `bertfactory --debug ...` shows everything.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from typing import Iterator

from bertfactory.errors import BertfactoryError

USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)

# Prefect's state messages: "Task run encountered an exception InputError: ..." (task) and
# "Flow run encountered an exception: InputError: ..." (flow)
_FAILED_WITH = re.compile(r"encountered an exception:? (\w+):")
_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def is_user_error(exc: BaseException) -> bool:
    return isinstance(exc, (BertfactoryError, *USER_OS_ERRORS))


def user_error_line(exc: BaseException) -> str:
    """The message of a user error as the one line after `error: `: an OSError as 'FILE: reason'; a message of
    several lines (a config error's header and one '  - key: problem' line per problem, a missing sample's
    'Run: ...' hint) joined, problems separated by '; '."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    out, bullets = lines[0], 0
    for line in lines[1:]:
        if line.startswith("- "):
            out += (" " if bullets == 0 else "; ") + line[2:]
            bullets += 1
        else:
            out += " " + line
    return out


def _user_error_names() -> set[str]:
    # walked at each use: members of the family are defined across the code base (and by plugins)
    names, pending = set(), [BertfactoryError, *USER_OS_ERRORS]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


class PrefectUserErrorFilter(logging.Filter):
    """On Prefect's flow- and task-run loggers: a record reporting a user error goes to that logger's own handlers
    (Prefect's API handler: the run's log in the UI keeps it, traceback included) and no further, so no console
    handler up the hierarchy prints it, whichever that is (ours, or Prefect's when it configured logging itself).
    Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.reports_user_error(record):
            return True
        for handler in logging.getLogger(record.name).handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        return False

    @staticmethod
    def reports_user_error(record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            return is_user_error(record.exc_info[1])
        failed = _FAILED_WITH.search(record.getMessage())
        return bool(failed and failed.group(1) in _user_error_names())


@contextmanager
def quiet_prefect_user_errors() -> Iterator[None]:
    """Install the filter on Prefect's run loggers (records are filtered where they are logged, before they
    propagate) for the duration of a command."""
    loggers = [logging.getLogger(name) for name in _RUN_LOGGERS]
    quiet = PrefectUserErrorFilter()
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
