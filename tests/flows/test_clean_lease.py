"""`bertfactory clean RUN --yes` deletes under the run directory's lock, and on object storage the run location's
lease, as `bertfactory run` writes (flows/lock.py): while another process or machine holds it the clean is refused
in the one line a second run gets, deleting nothing; once it is let go the clean deletes the replaced outputs (and
only them), holding the lock (and lease) while it deletes, and lets it go. Without --yes it only lists, unlocked.
A local run directory held by another process, and an s3:// run location held by another machine's working copy,
against moto in server mode on 127.0.0.1 (tests/storage_servers.py).

Run: `.venv/bin/python -m pytest -q tests/flows/test_clean_lease.py`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.run_location import resolve_run_dir
from flows import clean
from flows.cli import main
from flows.lock import RunDirLocked, acquire, lock_path, read_lease, release
from tests.flows.test_lock_lease import error_line, flock_is_free, held_by_another_process, released

ASIDE = "pretrain.replaced-20260101T000000Z-3f2a9c0d1e2b"

needs_s3 = pytest.mark.skipif(importlib.util.find_spec("moto") is None or importlib.util.find_spec("s3fs") is None,
                              reason="needs moto[server] and s3fs (test dependencies)")


def held_while_deleting(monkeypatch, run_dir: Path, lease: str | None = None) -> list:
    """(whether the lock of `run_dir` was held, the lease object) as clean deletes the local replaced folders."""
    seen, real = [], clean.delete_replaced

    def recording(root):
        seen.append((not flock_is_free(lock_path(run_dir)), read_lease(lease) if lease else None))
        return real(root)

    monkeypatch.setattr(clean, "delete_replaced", recording)
    return seen


def test_clean_of_a_held_run_directory_is_refused_as_run_is_then_deletes_under_the_lock(tmp_path, capsys,
                                                                                        monkeypatch):
    run = tmp_path / "run"
    (run / ASIDE / "final").mkdir(parents=True)
    (run / ASIDE / "final" / "model.safetensors").write_bytes(b"old")
    (run / "pretrain" / "final").mkdir(parents=True)
    (run / "pretrain" / "final" / "model.safetensors").write_bytes(b"new")
    seen = held_while_deleting(monkeypatch, run)
    with held_by_another_process(run) as holder:
        assert main(["clean", str(run), "--yes"]) == 2
        line = error_line(capsys)
        assert line.startswith(f"error: run directory {run} is in use by flow 'pipeline' (pid {holder.pid} on ")
        assert line.endswith(f"(lock file: {lock_path(run)})")
        with pytest.raises(RunDirLocked) as refused:  # the refusal a second `bertfactory run` gets
            acquire(run, "pipeline")
        assert line == f"error: {refused.value}"
        assert (run / ASIDE / "final" / "model.safetensors").read_bytes() == b"old"  # nothing deleted
        assert seen == []
        # without --yes: only a listing, which deletes nothing and takes no lock
        assert main(["clean", str(run)]) == 0
        assert f"would delete {run / ASIDE} " in capsys.readouterr().out

    assert main(["clean", str(run), "--yes"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"deleting {run / ASIDE} " in out and "deleted 1 replaced output folder(s)" in out
    assert not (run / ASIDE).exists() and (run / "pretrain" / "final" / "model.safetensors").read_bytes() == b"new"
    assert seen == [(True, None)]  # held while deleting
    assert released(run)  # and let go


@pytest.fixture(scope="module")
def bucket():
    from tests.storage_servers import s3_bucket

    with s3_bucket("cleanlease") as url:
        yield url


def working_copy_on(machine: Path, url: str, monkeypatch) -> Path:
    """This process as `machine` from now on (its own working copies), and its working copy of `url`."""
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(machine))
    return resolve_run_dir(url)


@needs_s3
def test_clean_on_s3_is_refused_while_another_machine_holds_the_lease_then_deletes_under_it(bucket, tmp_path,
                                                                                           monkeypatch, capsys):
    monkeypatch.delenv("BERTFACTORY_LEASE_TTL", raising=False)
    url = f"{bucket}/run"
    lease = f"{url}/.bertfactory/lease.json"
    storage.write_bytes(f"{url}/{ASIDE}/final/model.safetensors", b"old")
    storage.write_bytes(f"{url}/pretrain/final/model.safetensors", b"new")
    other = working_copy_on(tmp_path / "machine-b", url, monkeypatch)
    acquire(other, "pipeline")  # machine b's `bertfactory run` (its own lease owner, though in this process)
    try:
        holder = read_lease(lease)
        work = working_copy_on(tmp_path / "machine-a", url, monkeypatch)
        seen = held_while_deleting(monkeypatch, work, lease)
        assert main(["clean", url, "--yes"]) == 2
        line = error_line(capsys)
        assert line.startswith(f"error: run directory {url} is in use by flow 'pipeline' (pid {holder['pid']} on ")
        assert "whose lease expires in" in line and line.endswith(f"(lease: {lease})")
        assert read_lease(lease)["owner"] == holder["owner"] and released(work)  # theirs untouched, our flock let go
        assert f"{ASIDE}/final/model.safetensors" in storage.list_files(url) and seen == []  # nothing deleted
    finally:
        release(other)

    assert main(["clean", url, "--yes"]) == 0, capsys.readouterr().err
    assert f"deleting {url}/{ASIDE} " in capsys.readouterr().out
    assert set(storage.list_files(url)) == {"pretrain/final/model.safetensors"}  # the replaced folder only
    [(locked, during)] = seen
    assert locked and during["flow"] == "clean"  # the lock and the run location's lease, held while deleting
    assert read_lease(lease) is None and released(work)  # and let go
