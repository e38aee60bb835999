"""The lease of a run directory on object storage (flows/lock.py), against a real S3 API (moto in server mode on
127.0.0.1, tests/storage_servers.py): a second working copy of the same run location (another machine) is refused
naming the lease's holder; an expired lease, or the lease of a process that died holding this working copy's lock,
is taken over with a warning; a competing PUT that lands during the settle wins; the heartbeat renews `expires` and
logs an ERROR when it finds the lease taken; release deletes the lease (only when still ours); re-entrant holds keep
the lease until the outermost release; ranks > 0 never touch it.

Run: `.venv/bin/python -m pytest -q tests/flows/test_lock_lease.py`.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.run_location import resolve_run_dir
from flows import lock
from flows.lock import RunDirLocked, acquire, lock_path, read_holder, read_lease, release, run_dir_lock
from tests.storage_servers import s3_bucket

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("moto") is None or importlib.util.find_spec("s3fs") is None,
                                reason="needs moto[server] and s3fs (test dependencies)")

HOLD = textwrap.dedent("""
    import sys, time
    from bertfactory.run_location import resolve_run_dir
    from flows.lock import acquire
    acquire(resolve_run_dir(sys.argv[1]), "pipeline")
    print("locked", flush=True)
    time.sleep(600)
""")


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("leases") as url:
        yield url


@pytest.fixture
def url(bucket, tmp_path, monkeypatch):
    """A fresh run location per test; working copies under tmp_path/machine-a (this process's machine)."""
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "machine-a"))
    monkeypatch.delenv("BERTFACTORY_LEASE_TTL", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    return f"{bucket}/runs/{uuid.uuid4().hex[:8]}"


def second_working_copy(url: str, monkeypatch) -> Path:
    """The working copy of `url` another machine would have (another BERTFACTORY_WORK_ROOT), made in this process:
    each acquisition has its own lease owner, so it is refused like another machine's."""
    root = os.environ["BERTFACTORY_WORK_ROOT"]
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", root + "-b")
    try:
        return resolve_run_dir(url)
    finally:
        monkeypatch.setenv("BERTFACTORY_WORK_ROOT", root)


def lease_of(url: str) -> dict | None:
    return read_lease(f"{url}/.bertfactory/lease.json")


def foreign_lease(url: str, expires_in: float, **fields) -> dict:
    """Write the lease of another machine's flow straight into the run location."""
    record = {"owner": uuid.uuid4().hex, "pid": 4242, "host": "node-7", "flow": "pretrain", "flow_run": "brisk-otter",
              "since": time.time() - 30, "expires": time.time() + expires_in, **fields}
    storage.write_bytes(f"{url}/.bertfactory/lease.json", json.dumps(record).encode())
    return record


def flock_is_free(path: Path) -> bool:
    """Whether the local flock of `path` can be taken (a new open file description conflicts with ours too)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@contextmanager
def held_by_another_process(run_dir: Path):
    """Another process holding `run_dir`'s lock as the flow 'pipeline' (a `bertfactory run`); killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line
    return err.strip()


def released(run_dir: Path) -> bool:
    """The lock of `run_dir` is free and was let go cleanly (an empty lock file: nothing to take over)."""
    return flock_is_free(lock_path(run_dir)) and read_holder(lock_path(run_dir)) == {}


def wait_for(condition, timeout_s: float = 120.0) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` passes (False): a bound for a hang, never a timing."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def other_machine(url, tmp_path):
    """A process holding the run location through a working copy of its own (another BERTFACTORY_WORK_ROOT: another
    machine), TTL 4 s (a heartbeat every 1.3 s: on a loaded machine one can come late by a second and more); killed
    with SIGKILL at the end if still alive."""
    env = {**os.environ, "BERTFACTORY_WORK_ROOT": str(tmp_path / "machine-b"), "BERTFACTORY_LEASE_TTL": "4"}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, url], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_another_machine_is_refused_naming_the_holder_then_its_expired_lease_is_taken_over(url, other_machine, caplog,
                                                                                          tmp_path):
    work = resolve_run_dir(url)
    assert work.is_relative_to(tmp_path / "machine-a") and (tmp_path / "machine-b" / "s3").is_dir()  # two copies
    held = lease_of(url)
    assert held["pid"] == other_machine.pid and held["flow"] == "pipeline"
    renewed = wait_for(lambda: (lease_of(url) or {}).get("expires", 0) > held["expires"])  # its heartbeat ran
    assert renewed, "the other machine's heartbeat never renewed its lease"
    with pytest.raises(RunDirLocked, match=rf"run directory {url} is in use by flow 'pipeline' \(pid "
                                           rf"{other_machine.pid} on .*whose lease expires in \d+ s.*"
                                           rf"lease: {url}/.bertfactory/lease.json"):
        acquire(work, "pretrain")
    assert flock_is_free(lock_path(work))  # the local flock went again with the refusal
    assert str(lock_path(work)) not in lock._held

    os.kill(other_machine.pid, signal.SIGKILL)  # a preempted node: no release, its lease stays until it expires
    other_machine.wait()
    assert lease_of(url)["owner"] == held["owner"]
    time.sleep(max(0.0, lease_of(url)["expires"] - time.time()) + 0.1)
    with caplog.at_level(logging.WARNING, logger="flows"):
        with run_dir_lock(work, "pretrain"):
            mine = lease_of(url)
            assert mine["pid"] == os.getpid() and mine["flow"] == "pretrain" and mine["owner"] != held["owner"]
    assert "taking over the lease of flow 'pipeline'" in caplog.text and f"pid {other_machine.pid}" in caplog.text
    assert "expired" in caplog.text
    assert lease_of(url) is None


def test_a_foreign_unexpired_lease_refuses_and_an_expired_one_is_taken_over(url, caplog):
    work = resolve_run_dir(url)
    theirs = foreign_lease(url, expires_in=60)
    with pytest.raises(RunDirLocked, match=r"in use by flow 'pretrain', flow run 'brisk-otter' \(pid 4242 on node-7, "
                                           r"since .*UTC\), whose lease expires in (5[0-9]|60) s"):
        acquire(work, "evaluate")
    assert lease_of(url) == theirs  # untouched
    assert flock_is_free(lock_path(work))

    theirs = foreign_lease(url, expires_in=-5)
    with caplog.at_level(logging.WARNING, logger="flows"):
        acquire(work, "evaluate")
    try:
        assert lease_of(url)["owner"] != theirs["owner"] and lease_of(url)["pid"] == os.getpid()
        assert "taking over the lease of flow 'pretrain', flow run 'brisk-otter' (pid 4242 on node-7" in caplog.text
        assert "which expired 5 s ago" in caplog.text
    finally:
        release(work)
    assert lease_of(url) is None  # release deleted it


def test_a_competing_put_that_lands_during_the_settle_wins(url, monkeypatch):
    # last writer wins: the read-back after the settle finds the other acquirer's lease, and we back off
    work = resolve_run_dir(url)
    theirs = {}
    monkeypatch.setattr(lock, "_settle", lambda: theirs.update(foreign_lease(url, expires_in=60)))
    with pytest.raises(RunDirLocked, match=r"in use by flow 'pretrain'.*pid 4242 on node-7"):
        acquire(work, "pipeline")
    assert lease_of(url)["owner"] == theirs["owner"]
    assert flock_is_free(lock_path(work)) and read_holder(lock_path(work)) == {}


def test_the_lease_of_a_process_that_died_holding_this_working_copy_is_taken_over_at_once(url, tmp_path, caplog):
    work = resolve_run_dir(url)
    env = {**os.environ, "BERTFACTORY_LEASE_TTL": "600"}  # the same machine, the same working copy
    proc = subprocess.Popen([sys.executable, "-c", HOLD, url], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    dead = lease_of(url)
    assert dead["pid"] == proc.pid and dead["expires"] > time.time() + 500  # far from expiring
    with caplog.at_level(logging.WARNING, logger="flows"):
        with run_dir_lock(work, "pipeline"):
            assert lease_of(url)["pid"] == os.getpid()
    assert f"taking over the lease of flow 'pipeline' (pid {proc.pid}" in caplog.text
    assert "ended without releasing it" in caplog.text


def test_the_heartbeat_renews_the_lease_while_held(url, monkeypatch):
    monkeypatch.setenv("BERTFACTORY_LEASE_TTL", "4")  # a heartbeat every 1.3 s
    work = resolve_run_dir(url)
    other = second_working_copy(url, monkeypatch)
    before = time.time()
    with run_dir_lock(work, "pretrain"):
        first = lease_of(url)
        assert before + 4 - 0.01 <= first["expires"] <= time.time() + 4 + 0.01  # acquired now, for one TTL
        # past the first TTL (however long the machine takes to get there): without renewals it would have expired
        assert wait_for(lambda: time.time() > first["expires"] + 0.5)
        later = lease_of(url)
        assert later["owner"] == first["owner"] and later["since"] == first["since"]
        assert later["expires"] > first["expires"] and later["expires"] > time.time()
        with pytest.raises(RunDirLocked, match=rf"pid {os.getpid()}"):  # so another machine is still refused
            acquire(other, "evaluate")
    assert lease_of(url) is None


def test_a_renewal_that_finds_the_lease_taken_logs_an_error_and_release_leaves_it(url, monkeypatch, caplog):
    monkeypatch.setenv("BERTFACTORY_LEASE_TTL", "1.5")
    work = resolve_run_dir(url)
    with caplog.at_level(logging.WARNING, logger="flows"):
        with run_dir_lock(work, "pretrain"):
            theirs = foreign_lease(url, expires_in=60)  # our renewals were late; another machine took over
            # our heartbeat's next renewal finds it (every TTL/3 = 0.5 s; waited for, however late it comes)
            assert wait_for(lambda: any(r.levelno == logging.ERROR for r in caplog.records))
            assert lease_of(url) == theirs  # never overwritten by our heartbeat
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "taken by flow 'pretrain', flow run 'brisk-otter' (pid 4242 on node-7" in errors[0].getMessage()
    assert "cannot be stopped safely" in errors[0].getMessage()
    assert lease_of(url) == theirs  # release deletes only our own lease


def test_reentrant_holds_keep_the_lease_until_the_outermost_release(url, monkeypatch):
    work = resolve_run_dir(url)
    other = second_working_copy(url, monkeypatch)
    acquire(work, "pipeline")
    try:
        first = lease_of(url)
        acquire(work / "." / "shards" / "..", "pretrain")  # the same real path: one lock, one lease
        assert lease_of(url) == first
        release(work)
        assert lease_of(url)["owner"] == first["owner"]  # still held after the inner release
        with pytest.raises(RunDirLocked, match=rf"in use by flow 'pipeline' \(pid {os.getpid()}"):
            acquire(other, "evaluate")
    finally:
        release(work)
    assert lease_of(url) is None
    acquire(other, "evaluate")  # free for the other machine now
    release(other)


def test_ranks_above_zero_take_no_lease(url, monkeypatch):
    work = resolve_run_dir(url)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    theirs = foreign_lease(url, expires_in=60)  # rank 0's (on another node)
    with run_dir_lock(work, "pretrain"):
        assert lease_of(url) == theirs
    assert lease_of(url) == theirs
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(RunDirLocked):
        with run_dir_lock(work, "pretrain"):
            pass


def test_release_leaves_the_lease_to_expire_when_its_renewal_waits_on_a_location_that_does_not_answer(
        url, monkeypatch, caplog):
    """A store that accepts requests and never answers holds each one for minutes of retries: release must not wait
    for the heartbeat's renewal and then for a delete as slow, so a flow that failed on the outage ends at once."""
    monkeypatch.setenv("BERTFACTORY_LEASE_TTL", "1.5")  # a heartbeat every 0.5 s
    monkeypatch.setattr(lock, "RELEASE_WAIT_S", 0.5)
    work = resolve_run_dir(url)
    waiting, store_answers = threading.Event(), threading.Event()
    renewing: list[threading.Thread] = []
    real_write = lock.Lease._write

    def write(self):
        if self._thread is not None:  # a renewal (the first write, by `take`, goes through)
            renewing.append(threading.current_thread())
            waiting.set()
            # the heartbeat is left behind blocked, as one waiting on a dead store would be, until the test ends;
            # then its write fails without reaching the store: a thread that woke later and wrote for real would do
            # so in another test of this process, after this module's S3 server and credentials are gone (botocore
            # then looks for credentials at the cloud's metadata address)
            store_answers.wait(600)
            raise storage.StorageError("the run location did not answer")
        real_write(self)

    monkeypatch.setattr(lock.Lease, "_write", write)
    try:
        with caplog.at_level(logging.WARNING, logger="flows"):
            with run_dir_lock(work, "pretrain"):
                held = lease_of(url)
                assert waiting.wait(60), "the heartbeat renewed"
            # released without the delete: the lease stays until it expires on its own
        assert lease_of(url) == held
        assert any("has not answered the lease's renewal" in r.getMessage() and "leaving the lease to expire" in
                   r.getMessage() for r in caplog.records), caplog.text
    finally:
        store_answers.set()
        for thread in renewing:
            thread.join(60)
    assert renewing and not any(thread.is_alive() for thread in renewing)  # no heartbeat outlives the test


def test_two_acquirers_that_both_read_no_lease_cannot_both_take_it(url, monkeypatch):
    """The window the read-back leaves open (an acquirer whose read-to-write gap spans another's whole acquisition)
    is closed on S3 by a conditional create: the late writer's PUT fails instead of overwriting the lease."""
    theirs = lock.Lease(f"{url}/.bertfactory/lease.json", second_working_copy(url, monkeypatch), "pretrain", 60)
    theirs.take()  # the other machine acquires (write, settle, read-back) ...
    try:
        ours = lock.Lease(f"{url}/.bertfactory/lease.json", resolve_run_dir(url), "evaluate", 60)
        real_read = storage.read_bytes
        stale = [True]

        def read_from_before_their_write(where):  # ... while our first read saw the location still empty
            if stale:
                stale.pop()
                raise FileNotFoundError(where)
            return real_read(where)

        monkeypatch.setattr(storage, "read_bytes", read_from_before_their_write)
        with pytest.raises(RunDirLocked, match=rf"in use by flow 'pretrain' \(pid {os.getpid()}"):
            ours.take()
        assert not stale and lease_of(url)["owner"] == theirs.owner  # theirs stands, not overwritten
    finally:
        theirs.release()
    assert lease_of(url) is None


def test_release_does_not_delete_a_lease_taken_between_its_read_and_its_delete(url, monkeypatch, caplog):
    work = resolve_run_dir(url)
    acquire(work, "pipeline")
    real_read = storage.read_bytes
    theirs = {}

    def read_then_they_take_over(where):  # our renewals came late; another machine takes the lease right after
        data = real_read(where)
        if not theirs:
            theirs.update(foreign_lease(url, expires_in=60))
        return data

    monkeypatch.setattr(storage, "read_bytes", read_then_they_take_over)
    with caplog.at_level(logging.WARNING, logger="flows"):
        release(work)
    assert theirs and lease_of(url) == theirs
    assert "taken by another flow as this one released it" in caplog.text
