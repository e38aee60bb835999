"""Atomic file writes and content hashes.

Every output of every stage goes through these helpers so that a crash never leaves a half-written file
under its final name, and reruns can tell finished work from unfinished work by hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .errors import InputError

_CHUNK = 1 << 20


def decode_utf8(data: bytes, source: str | os.PathLike, hint: str = "") -> str:
    """`data` (the bytes of `source`) as UTF-8, or InputError naming the file, the line and the byte that is not:
    '<source>:<line>: not valid UTF-8 (<reason> at byte N)<hint>'."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputError(f"{source}:{line}: not valid UTF-8 ({err.reason} at byte {err.start}){hint}") from None


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no incidental whitespace: the form that is hashed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(obj: Any) -> str:
    return sha256_bytes(canonical_json(obj).encode("utf-8"))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def process_umask() -> int:
    """The process's umask, read where Linux shows it (/proc/self/status) rather than set to 0 and back: that
    toggle is process-wide, and a thread creating a file or folder in between (the shard cache's downloads run
    on a pool) would get it world-writable. Elsewhere, the toggle."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o077)  # the toggle's window holds the strictest mask, never 0
    os.umask(umask)
    return umask


def apply_umask(path: str | os.PathLike) -> None:
    """Give a file written by a library that creates it 0o600 (safetensors' save_file) the mode an ordinary open()
    gives: weights readable by the other users of a shared run directory, like every other file of it."""
    os.chmod(path, default_file_mode())


def default_file_mode() -> int:
    """The mode an ordinary open() would give a new file (0o666 minus the umask); mkstemp makes 0o600 files,
    which would leave shards and checkpoints unreadable to the other users of a shared run directory."""
    return 0o666 & ~process_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


class AtomicFile:
    """Context manager yielding a temporary path; on clean exit it is renamed to the final path.

    For writers that want a path rather than bytes (pyarrow, safetensors, torch.save). `durable=False` skips the
    fsyncs (the rename stays atomic): for intermediate files that a rerun after a crash makes again anyway."""

    def __init__(self, path: str | os.PathLike, durable: bool = True):
        self.path = Path(path)
        self.durable = durable
        self.tmp: Path | None = None

    def __enter__(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.fchmod(fd, default_file_mode())
        os.close(fd)
        self.tmp = Path(tmp)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self.tmp is not None
        if exc_type is None:
            if self.durable:
                with open(self.tmp, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
            if self.durable:
                _fsync_dir(self.path.parent)
        elif self.tmp.exists():
            self.tmp.unlink()


def publish_dir(staging: Path, final: Path) -> None:
    """Replace directory `final` by a fully written `staging` directory (same filesystem)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        trash = final.with_name(f".{final.name}.old")
        if trash.exists():
            shutil.rmtree(trash)
        os.replace(final, trash)
        os.replace(staging, final)
        shutil.rmtree(trash)
    else:
        os.replace(staging, final)
    _fsync_dir(final.parent)


def append_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json_file(path: str | os.PathLike, missing: str, error: type[Exception] | None = None) -> Any:
    """Parse a JSON file that another stage (or the user) wrote. A missing file raises `error` with the
    message `missing`; invalid JSON raises `error` naming the file and the parser's position."""
    from .errors import ContractError

    error = error or ContractError
    path = Path(path)
    if not path.is_file():
        raise error(missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise error(f"{path} is not valid JSON: {err}") from None
