"""One writer per run directory: `RunDirLock` holds an exclusive lock on RUN/.bertfactory/lock while a flow writes
into RUN, so two flows (two workers, a scheduled refresh and a manual run) can never write the same outputs.

    with run_dir_lock("runs/local", "pipeline"):
        ...                                   # the second flow on runs/local fails at once, naming this holder

The lock is an advisory `fcntl.flock` on the lock file, taken without waiting. The kernel releases it when the
holding process dies (crash, `kill -9`, a preempted worker), so a stale lock never needs cleaning up: the next flow
takes it over and logs whose it was. The holder (pid, host, flow, flow run, start time) is written into the file so
that a refused flow can say who holds it. The lock is re-entrant within one process (a flow calling another
flow's code on the same run directory), and taken per real path, so `runs/x` and `./runs/../runs/x` are one lock.

Under `torchrun` only rank 0 takes the lock: the ranks of one job write one run directory together (rank 0 writes
checkpoints and stamps), so ranks 1..N-1 (RANK > 0 with WORLD_SIZE set, as torchrun sets them) enter without it.

On a network file system `flock` is only as good as the file system's lock support (NFSv4 and Lustre with
`flock` mounted honour it); run directories on object storage are not supported as lock targets.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bertfactory.errors import BertfactoryError

from .stamps import STAMP_DIR

logger = logging.getLogger("flows")

LOCK_NAME = "lock"


class RunDirLocked(BertfactoryError):
    """Another live process holds the run directory's lock."""


_held: dict[str, tuple[int, int]] = {}  # real lock path -> (fd, depth) for this process
_guard = threading.Lock()


def lock_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir).resolve() / STAMP_DIR / LOCK_NAME


def read_holder(path: Path) -> dict:
    """What the lock file says about its (last) holder; {} when it is empty or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def _describe(holder: dict) -> str:
    if not holder:
        return "an unknown process"
    run = f", flow run {holder['flow_run']!r}" if holder.get("flow_run") else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["since"])) if holder.get("since") else "?"
    return f"flow {holder.get('flow', '?')!r}{run} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since {since})"


def _current_flow_run() -> str | None:
    if "prefect" not in sys.modules:  # no flow run without Prefect loaded: --no-prefect runs never import it here
        return None
    try:
        from prefect.runtime import flow_run

        return flow_run.name or None
    except Exception:  # outside a flow run, or Prefect not importable: the pid and flow name suffice
        return None


def acquire(run_dir: str | os.PathLike, flow: str) -> Path:
    """Take the lock of `run_dir` for `flow` (RunDirLocked at once when a live process holds it)."""
    path = lock_path(run_dir)
    key = str(path)
    with _guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirLocked(
                f"run directory {Path(run_dir)} is in use by {_describe(read_holder(path))}; two flows must not write "
                f"the same outputs. Wait for it to finish, or use another --run-dir (lock file: {path})"
            ) from None
        previous = read_holder(path)
        if previous:  # its process is gone (the kernel released its lock): a stale lock, taken over
            logger.warning("%s: taking over the lock of %s, which ended without releasing it", run_dir, _describe(previous))
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "flow": flow, "flow_run": _current_flow_run(),
                  "since": round(time.time(), 3)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
        os.fsync(fd)
        _held[key] = (fd, 1)
        return path


def release(run_dir: str | os.PathLike) -> None:
    path = lock_path(run_dir)
    key = str(path)
    with _guard:
        fd, depth = _held[key]
        if depth > 1:
            _held[key] = (fd, depth - 1)
            return
        del _held[key]
        os.ftruncate(fd, 0)  # an empty file: released cleanly, nothing to take over
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def secondary_rank() -> bool:
    """A rank > 0 of a distributed launch (torchrun sets RANK and WORLD_SIZE): its rank 0 holds the lock."""
    try:
        return "WORLD_SIZE" in os.environ and int(os.environ.get("RANK", "0")) > 0
    except ValueError:
        return False


@contextmanager
def run_dir_lock(run_dir: str | os.PathLike, flow: str) -> Iterator[Path]:
    if secondary_rank():  # the job's rank 0 holds it for every rank
        yield lock_path(run_dir)
        return
    path = acquire(run_dir, flow)
    try:
        yield path
    finally:
        release(run_dir)
