"""Carry a clean InputError message out of a Beam worker.

Beam wraps an exception raised inside a DoFn (with the worker's traceback, and for subprocess workers as text
only), so the type is lost. Workers raise `worker_input_error(message)`, whose text carries the message
between markers; `recover_input_error(exc)` finds it in whatever Beam raised and gives back a plain InputError
with just that message.
"""

from __future__ import annotations

import re

from bertfactory.errors import InputError

_OPEN = "<<bertfactory-input-error>>"
_CLOSE = "<</bertfactory-input-error>>"
_PATTERN = re.compile(re.escape(_OPEN) + r"(.*?)" + re.escape(_CLOSE), re.DOTALL)


def worker_input_error(message: str) -> InputError:
    return InputError(f"{_OPEN}{message}{_CLOSE}")


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
