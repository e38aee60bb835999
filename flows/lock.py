"""One writer per run directory: `RunDirLock` holds an exclusive lock on RUN/.bertfactory/lock while a flow writes
into RUN, so two flows (two workers, a scheduled refresh and a manual run) can never write the same outputs.

    with run_dir_lock("runs/local", "pipeline"):
        ...                                   # the second flow on runs/local fails at once, naming this holder

The lock is an advisory `fcntl.flock` on the lock file, taken without waiting. The kernel releases it when the
holding process dies (crash, `kill -9`, a preempted worker), so a stale lock never needs cleaning up: the next flow
takes it over and logs whose it was. The holder (pid, host, flow, flow run name and id, start time) is written
into the file so that a refused flow can say who holds it. The lock is re-entrant within one process (a flow calling
another flow's code on the same run directory), and taken per real path, so `runs/x` and `./runs/../runs/x` are one
lock.

Under `torchrun` only rank 0 takes the lock: the ranks of one job write one run directory together (rank 0 writes
checkpoints and stamps), so ranks 1..N-1 (RANK > 0 with WORLD_SIZE set, as torchrun sets them) enter without it.

On a network file system `flock` is only as good as the file system's lock support (NFSv4 and Lustre with
`flock` mounted honour it).

A run directory on object storage (a working copy of `s3://bucket/runs/x`, bertfactory.run_location) is worked on
from a different local directory on every machine, so the flock alone protects nothing across machines. Its lock is
then also a *lease*: the object `<url>/.bertfactory/lease.json` = {"owner" (a uuid per acquisition), "pid", "host",
"flow", "flow_run", "flow_run_id", "since", "expires" (epoch seconds)}, taken after the local flock:

- an existing lease that is not ours and has not expired refuses the flow (RunDirLocked naming the holder and when
  its lease expires; the local flock is let go again); an expired one (its holder died or lost the bucket for a
  whole TTL) is taken over with a warning, and so at once is the lease of the process whose record is still in
  this working copy's lock file (it held the flock that is free now, so it ended without releasing either);
- ours is written with one PUT, read back after a short settle (SETTLE_S) and kept only if it is still ours;
- a daemon heartbeat renews `expires` every TTL/3 (TTL: $BERTFACTORY_LEASE_TTL seconds, default 120) while the
  lock is held; a renewal that finds another owner's lease logs an ERROR and stops renewing. It cannot stop the
  flow safely from a background thread (a stage half-way through writing would leave worse than a duplicate
  writer), so the flow runs on and the error says what happened;
- release stops the heartbeat and deletes the lease object if it is still ours. A renewal still in flight after
  RELEASE_WAIT_S is waiting on a location that does not answer (a store that does not respond holds each request
  for its retries: ~7 minutes with s3fs's and botocore's defaults, docs/cluster.md): release then leaves the lease
  to expire within the TTL instead of waiting for it and then for a delete that would wait as long, so a flow that
  failed on an outage ends at once (and a late renewal cannot land after the delete).

On S3 every lease write is conditional (bertfactory.storage.write_bytes_if): the create only where there is no
object (`If-None-Match: *`), a take-over and each renewal only on the ETag this process last saw (`If-Match`), and
release deletes only that ETag. Two machines that both read "no lease" cannot both write theirs: the second PUT fails
and that acquirer is refused naming the first; a renewal never overwrites a lease another machine took, and a
release never deletes it. A write of ours whose answer was lost (it landed, the retry is refused) is recognised by
its owner and kept.

On GCS (whose emulator here does not enforce generation preconditions, so that path is not used untested) the
read-back is what protects: PUTs are last-writer-wins and read-after-write strongly consistent, so of two acquirers
that both read "no lease" the one whose PUT landed first sees the other's lease on its read-back and is refused.
Both can proceed only when one acquirer's read-to-PUT gap spans the other's whole PUT + settle + read-back (more
than SETTLE_S), e.g. a process stalled between its read and its write; renewal (read, then write) and release
(read, then delete) have the same narrow window. The read-back is kept on S3 too, for S3-compatible stores that
ignore the conditions. `expires` is the writer's clock: machines whose clocks differ by a sizeable part of the TTL
can see a live lease as expired.
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
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bertfactory import storage
from bertfactory.errors import BertfactoryError, ConfigError
from bertfactory.run_location import remote_of

from .stamps import STAMP_DIR

logger = logging.getLogger("flows")

LOCK_NAME = "lock"
LEASE_NAME = "lease.json"
LEASE_TTL_ENV = "BERTFACTORY_LEASE_TTL"
DEFAULT_LEASE_TTL = 120.0
SETTLE_S = 0.2  # between writing the lease and reading it back
RELEASE_WAIT_S = 10.0  # how long release waits for a renewal in flight (a GET and a PUT: milliseconds when answered)


class RunDirLocked(BertfactoryError):
    """Another live process holds the run directory's lock."""


_held: dict[str, tuple[int, int]] = {}  # real lock path -> (fd, depth) for this process
_leases: dict[str, "Lease"] = {}  # real lock path -> the lease held with it (run directories on object storage)
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
    if holder.get("flow_run_id"):  # the name repeats across runs on one run directory (pipeline:local@run): the
        run += f" (id {holder['flow_run_id']})"  # id says which one to wait for or cancel
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["since"])) if holder.get("since") else "?"
    return f"flow {holder.get('flow', '?')!r}{run} (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, since {since})"


def _current_flow_run() -> dict:
    """{"flow_run": its name, "flow_run_id": its id} of the flow run this process executes; {} outside one. The
    name alone does not tell runs apart: every run of a deployment on one run directory gets the same one."""
    if "prefect" not in sys.modules:  # no flow run without Prefect loaded: --no-prefect runs never import it here
        return {}
    try:
        from prefect.runtime import flow_run

        name, run_id = flow_run.name, flow_run.id
    except Exception:  # outside a flow run, or Prefect not importable: the pid and flow name suffice
        return {}
    return {"flow_run": name or None, "flow_run_id": run_id} if run_id else {}


def lease_ttl() -> float:
    """The lease's time to live in seconds: $BERTFACTORY_LEASE_TTL, default 120."""
    text = os.environ.get(LEASE_TTL_ENV, "").strip()
    if not text:
        return DEFAULT_LEASE_TTL
    try:
        ttl = float(text)
    except ValueError:
        ttl = 0.0
    if not ttl > 0:
        raise ConfigError(f"{LEASE_TTL_ENV}={text!r}: expected a positive number of seconds (default "
                          f"{DEFAULT_LEASE_TTL:g})")
    return ttl


def lease_url(run_dir: str | os.PathLike) -> str | None:
    """Where the lease of `run_dir` lives: `<its run location>/.bertfactory/lease.json`, or None for a local run."""
    url = remote_of(run_dir)
    return storage.join(url, STAMP_DIR, LEASE_NAME) if url else None


def read_lease(url: str) -> dict | None:
    """The lease object at `url`; None when there is none, {} when it is unreadable (taken over as expired)."""
    try:
        data = storage.read_bytes(url)
    except FileNotFoundError:
        return None
    return _parse_lease(data)


def _parse_lease(data: bytes) -> dict:
    try:
        lease = json.loads(data or b"{}")
    except ValueError:
        return {}
    return lease if isinstance(lease, dict) else {}


def _settle() -> None:
    time.sleep(SETTLE_S)


class Lease:
    """This process's lease on one run location (see the module docstring): taken by `take`, renewed by a
    heartbeat thread, let go by `release`."""

    def __init__(self, url: str, run_dir: str | os.PathLike, flow: str, ttl: float):
        self.url = url
        self.run_dir = run_dir
        self.ttl = ttl
        self.record = {"owner": uuid.uuid4().hex, "pid": os.getpid(), "host": socket.gethostname(), "flow": flow,
                       "flow_run": None, **_current_flow_run(), "since": round(time.time(), 3)}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # a store with conditional writes (storage.conditional_writes): each write lands only on the object as
        # this process last saw it, `_seen` (its ETag; None: no object), so no other writer's lease is overwritten
        self.conditional = storage.conditional_writes(url)
        self._seen: str | None = None

    @property
    def owner(self) -> str:
        return self.record["owner"]

    def _write(self) -> None:
        self.record["expires"] = round(time.time() + self.ttl, 3)
        data = json.dumps(self.record).encode("utf-8")
        if self.conditional:
            self._seen = storage.write_bytes_if(self.url, data, self._seen)
        else:
            storage.write_bytes(self.url, data)

    def _read(self) -> dict | None:
        """The lease object now (read_lease's answer), remembering its ETag for the next conditional write."""
        if not self.conditional:
            return read_lease(self.url)
        data, self._seen = storage.read_versioned(self.url)
        return None if data is None else _parse_lease(data)

    def _refuse(self, holder: dict) -> RunDirLocked:
        expires = holder.get("expires")
        left = expires - time.time() if isinstance(expires, (int, float)) else 0
        return RunDirLocked(
            f"run directory {remote_of(self.run_dir)} is in use by {_describe(holder)}, whose lease expires in "
            f"{max(0, round(left))} s unless renewed; two flows must not write the same outputs. Wait for it to "
            f"finish, or use another --run-dir (lease: {self.url})")

    def take(self, dead_owner: str | None = None) -> None:
        """Write our lease (RunDirLocked when another live holder has it), confirm it by reading it back, and
        start the heartbeat. `dead_owner`: the lease of the process that last held this working copy's flock and
        ended without releasing it (its record is still in the lock file); a lease of that owner is taken over at
        once instead of after its TTL (a flow restarted on the machine where it crashed)."""
        current = self._read()
        if current is not None and current.get("owner") != self.owner:
            expires = current.get("expires")
            if dead_owner is not None and current.get("owner") == dead_owner:
                why = ", whose process ended without releasing it (it held this working copy's lock)"
            elif isinstance(expires, (int, float)) and expires > time.time():
                raise self._refuse(current)
            elif isinstance(expires, (int, float)):
                why = f", which expired {round(time.time() - expires)} s ago"
            else:
                why = " (unreadable)"
            logger.warning("%s: taking over the lease of %s%s", self.url, _describe(current), why)
        try:
            self._write()
        except storage.PreconditionFailed:  # another acquirer wrote between our read and our write: its lease
            current = self._read()
            if current is None or current.get("owner") != self.owner:  # (ours: a retried PUT whose first landed)
                raise self._refuse(current or {}) from None
        # kept with conditional writes too: a store that ignores their conditions still has the read-back
        _settle()
        confirmed = read_lease(self.url)
        if confirmed is None or confirmed.get("owner") != self.owner:
            # another acquirer's PUT landed after ours: last writer wins, so it holds the lease, not us
            raise self._refuse(confirmed or {})
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease-heartbeat {self.url}", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if self.conditional:
                    try:
                        self._write()  # lands only on our own last write: nothing to read first
                        continue
                    except storage.PreconditionFailed:  # someone else's write, a delete, or a lost answer of ours
                        current = self._read()
                else:
                    current = read_lease(self.url)
                if current is not None and current.get("owner") != self.owner:
                    logger.error(
                        "%s: the lease of this run directory was taken by %s while %s (pid %s) still holds its lock "
                        "(its renewals were late by more than the %g s TTL); two flows may now be writing the same "
                        "outputs. This flow cannot be stopped safely from here and runs on: stop one of them, and "
                        "check the run directory's outputs", self.url, _describe(current), self.record["flow"],
                        self.record["pid"], self.ttl)
                    return  # never overwrite the new holder's lease
                if current is None:
                    logger.warning("%s: the lease object of this run was deleted while held; writing it again",
                                   self.url)
                self._write()
            except Exception as err:  # noqa: BLE001 - a failed renewal is retried at the next beat
                logger.warning("%s: renewing the lease failed (%s); retrying in %.0f s", self.url, err, self.ttl / 3)

    def release(self) -> bool:
        """Stop the heartbeat, then delete the lease object if it is still ours. False when the run location could
        not be reached: the lease is still there (it expires on its own)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=RELEASE_WAIT_S)
            if self._thread.is_alive():
                logger.warning("%s: the run location has not answered the lease's renewal for %g s; leaving the "
                               "lease to expire within %g s", self.url, RELEASE_WAIT_S, self.ttl)
                return False
        try:
            current = self._read()
            if current is not None and current.get("owner") == self.owner:
                if self.conditional:
                    storage.delete_if(self.url, self._seen)  # not if another machine took it since the read
                else:
                    storage.delete(self.url)
        except storage.PreconditionFailed:
            logger.warning("%s: the lease was taken by another flow as this one released it; left to it", self.url)
        except storage.StorageError as err:  # it expires on its own
            logger.warning("%s: could not delete the lease (%s); it expires within %g s", self.url, err, self.ttl)
            return False
        return True


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
        lease = None
        try:
            if (url := lease_url(run_dir)) is not None:  # a working copy: the lock holds across machines too
                lease = Lease(url, run_dir, flow, lease_ttl())
                lease.take(dead_owner=previous.get("lease"))
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        if previous:  # its process is gone (the kernel released its lock): a stale lock, taken over
            logger.warning("%s: taking over the lock of %s, which ended without releasing it", run_dir, _describe(previous))
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "flow": flow, "flow_run": None,
                  **_current_flow_run(), "since": round(time.time(), 3)}
        if lease is not None:
            holder["lease"] = lease.owner
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
        os.fsync(fd)
        _held[key] = (fd, 1)
        if lease is not None:
            _leases[key] = lease
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
        lease = _leases.pop(key, None)
        # the lease before the local lock goes: no moment where a local flow has it but not the lease
        if lease is None or lease.release():
            os.ftruncate(fd, 0)  # an empty file: released cleanly, nothing to take over
        # else the record stays: the lease this process could not delete (the storage was unreachable) is taken
        # over at once by the next flow on this working copy, instead of after its TTL
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
