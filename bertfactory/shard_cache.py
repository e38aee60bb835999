"""A bounded, content-addressed local cache of shards read from object storage (s3://, gs://).

Training on a run directory that lives in a bucket does not pull the shard set into the working copy: each
process fetches the shards it opens into this cache, which is shared by every run, split and process on the
node. A shard is named by the sha256 its manifest records: root/H[:2]/H.arrow. So two runs (or a corpus version
and its increment) that share a shard share one file, and a file under its final name is always a whole,
verified shard: storage.download_file writes a temporary file and renames it only once its sha256 matches.

    from bertfactory.shard_cache import ShardCache
    cache = ShardCache()                                  # root, limit from the environment (below)
    path = cache.fetch("s3://bucket/run/shards/train/part-00000.arrow", sha256)
    for path in cache.fetch_all([(url, sha256, None), ...], ahead=2):
        ...                                               # the next `ahead` shards download meanwhile

preprocessing.shards.ShardSet.open uses it for a shards directory given as a URL, and for one inside the working
copy of a remote run (bertfactory.run_location) whose shard files are not there locally.

Environment:
    BERTFACTORY_SHARD_CACHE        the cache directory (default $XDG_CACHE_HOME or ~/.cache, /bertfactory/shards)
    BERTFACTORY_SHARD_CACHE_LIMIT  the most bytes it keeps: an integer, or with a unit (512MiB, 2GB, 1.5GiB; a bare
                                   K/M/G/T is binary); unset or empty: unlimited

Eviction is least recently used by file mtime (a hit touches its file), run after each download, and never
removes a pinned file: one this process is downloading, has just fetched, or that fetch_all has handed to its
consumer and not yet been asked past. A shard bigger than the limit is kept anyway (one warning).

Several processes on one node (torchrun ranks) may share the directory: temporary names are unique, files appear
by atomic rename, and a file another process removed is a miss, not an error. Pins are per process, so another
process may evict a shard between this process's fetch() and its open(); the consumer then calls fetch() again
(ShardSet.open does). Once a shard is opened (ShardSet memory-maps it), eviction cannot hurt it: on Linux an
unlinked file's mapping stays valid, and its disk space is released when the mapping is.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from . import storage
from .errors import ConfigError, ContractError

logger = logging.getLogger(__name__)

ENV_ROOT = "BERTFACTORY_SHARD_CACHE"
ENV_LIMIT = "BERTFACTORY_SHARD_CACHE_LIMIT"
SUFFIX = ".arrow"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_CACHED = re.compile(r"[0-9a-f]{64}\.arrow")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
_UNITS = {"": 1, "b": 1,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
# a temporary download untouched this long belongs to a process that died (a live download keeps writing to it)
STALE_PART_S = 3600

# Pins are process-wide, not per instance: ShardSet.open makes a ShardCache of its own while another one (a
# loader thread's) may be downloading into the same directory.
_LOCK = threading.Lock()
_PINS: Counter[str] = Counter()
_WARNED: set[str] = set()


def _pin(key: str) -> None:
    with _LOCK:
        _PINS[key] += 1


def _unpin(key: str) -> None:
    with _LOCK:
        _PINS[key] -= 1
        if _PINS[key] <= 0:
            del _PINS[key]


@contextmanager
def _pinned(path: Path) -> Iterator[None]:
    _pin(str(path))
    try:
        yield
    finally:
        _unpin(str(path))


def parse_size(text: str, name: str = ENV_LIMIT) -> int:
    """Bytes from "1073741824", "512MiB", "2GB", "1.5GiB" (a bare K/M/G/T is binary). ConfigError naming `name`."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ConfigError(f"{name}={text!r} is not a size in bytes; write an integer or a number with a unit "
                          "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 20GiB")
    return int(float(m.group(1)) * _UNITS[unit])


def default_root() -> Path:
    if root := os.environ.get(ENV_ROOT):
        return Path(root).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "bertfactory" / "shards"


def default_limit() -> int | None:
    text = os.environ.get(ENV_LIMIT, "").strip()
    return parse_size(text) if text else None


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes_downloaded: int = 0


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class ShardCache:
    """Shards by sha256 under `root` (default $BERTFACTORY_SHARD_CACHE), at most `limit_bytes` of them (default
    $BERTFACTORY_SHARD_CACHE_LIMIT; None: unlimited). `stats` counts this instance's work."""

    def __init__(self, root: Path | None = None, limit_bytes: int | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.limit_bytes = limit_bytes if limit_bytes is not None else default_limit()
        if self.limit_bytes is not None and self.limit_bytes < 0:
            raise ConfigError(f"shard cache limit {self.limit_bytes} is negative")
        self.stats = CacheStats()

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}{SUFFIX}"

    # -- fetch -----------------------------------------------------------------------------------------------

    def fetch(self, url: str, sha256: str, size: int | None = None) -> Path:
        """The local path of the shard `url` whose sha256 is `sha256`: from the cache, else downloaded and
        verified (StorageError naming the URL when it cannot be). `size` (bytes, when known) makes room before
        the download and catches a damaged cached file. The file may be evicted by another process right after
        this returns; call fetch again if opening it finds it gone."""
        sha256 = sha256.lower()
        if not _SHA256.fullmatch(sha256):
            # the manifest's digest becomes a file name: anything but 64 hex digits could point outside the cache
            raise ContractError(f"{url}: sha256 {sha256!r} in the manifest is not 64 hex digits")
        path = self.path_for(sha256)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self._unusable(err) from None
        with _pinned(path):
            if self._hit(path, size):
                with _LOCK:
                    self.stats.hits += 1
                return path
            if size is not None:
                self._evict(incoming=size)  # room first, so the disk holds at most limit + what is in flight
            try:
                storage.download_file(url, path, sha256=sha256)
            except FileNotFoundError:
                raise storage.StorageError(f"{url}: not found (the manifest lists it; was the shard set changed "
                                           "or only partly uploaded?)") from None
            except OSError as err:  # this node's cache directory: not writable (a transfer error is a StorageError)
                raise self._unusable(err) from None
            try:
                got = path.stat().st_size
            except FileNotFoundError:  # another process evicted it already; the caller fetches again on open
                got = size or 0
            with _LOCK:
                self.stats.misses += 1
                self.stats.bytes_downloaded += got
            if self.limit_bytes is not None and got > self.limit_bytes:
                self._warn_once(f"oversize:{self.root}",
                                f"shard {url} ({_mib(got)}) is bigger than the shard cache limit "
                                f"({_mib(self.limit_bytes)}, {ENV_LIMIT}); it is kept while in use")
            self._evict()
        return path

    def _unusable(self, err: OSError) -> "storage.StorageError":
        """The one-line error of a cache directory this process cannot write (one rank's node, not the job's data)."""
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(self.root) else ""
        return storage.StorageError(
            f"the shard cache {self.root} ({ENV_ROOT}) cannot be used on this machine: {err.strerror or err}{where}; "
            f"set {ENV_ROOT} to a writable directory with room for the shards ({ENV_LIMIT} bounds what it keeps)")

    def _hit(self, path: Path, size: int | None) -> bool:
        try:
            if size is not None and path.stat().st_size != size:
                return False  # damaged (the name is only ever given to verified bytes): download it again
            os.utime(path)  # LRU: the mtime is the last use, for every process sharing the directory
            return True
        except FileNotFoundError:  # never fetched, or evicted (perhaps by another process just now)
            return False

    def fetch_all(self, items: Sequence[tuple[str, str, int | None]], ahead: int = 2) -> Iterator[Path]:
        """Each (url, sha256, size) as a local path, in order, while the next `ahead` download on a small thread
        pool. A failed item raises its StorageError when its turn comes. A yielded path stays pinned until the
        consumer asks for the next one, so this process's own prefetching never evicts it before it is opened."""
        items = list(items)
        ahead = max(0, int(ahead))
        before = CacheStats(**vars(self.stats))
        started = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=max(1, ahead), thread_name_prefix="shard-cache")
        # each submitted item's final path is pinned from submission until the consumer moves past it: a shard
        # prefetched but not yet handed out must survive the evictions of the downloads that follow it
        pending: deque[tuple[Future, str]] = deque()
        current: str | None = None
        submitted = 0
        try:
            for _ in range(len(items)):
                # the item due now plus `ahead` after it are submitted; the pool has `ahead` workers, so while
                # the consumer works on a shard the next `ahead` download
                while submitted < len(items) and len(pending) <= ahead:
                    url, sha256, size = items[submitted]
                    key = str(self.path_for(str(sha256).lower()))
                    _pin(key)
                    pending.append((pool.submit(self.fetch, url, sha256, size), key))
                    submitted += 1
                future, current = pending.popleft()
                yield future.result()
                _unpin(current)
                current = None
        finally:
            for future, _ in pending:
                future.cancel()
            pool.shutdown(wait=True)  # downloads already running finish (an object GET cannot be interrupted)
            for _, key in pending:
                _unpin(key)
            if current is not None:
                _unpin(current)
            # the cache settles within its limit once nothing is pinned: what the consumer opened meanwhile is
            # memory-mapped, and an unlinked file's mapping stays valid
            self._evict()
            s = self.stats
            logger.info("shard cache %s: %d shards, %d hits, %d misses, %s downloaded, %d evictions, %.1f s",
                        self.root, len(items), s.hits - before.hits, s.misses - before.misses,
                        _mib(s.bytes_downloaded - before.bytes_downloaded), s.evictions - before.evictions,
                        time.monotonic() - started)

    # -- eviction --------------------------------------------------------------------------------------------

    def _entries(self) -> list[tuple[int, str, int, Path]]:
        """(mtime_ns, name, size, path) of every cached shard; stale temporary files are removed on the way."""
        entries = []
        stale = time.time() - STALE_PART_S
        try:
            subdirs = [d for d in self.root.iterdir() if len(d.name) == 2]
        except FileNotFoundError:
            return []
        for sub in subdirs:
            try:
                names = list(sub.iterdir())
            except (FileNotFoundError, NotADirectoryError):
                continue
            for path in names:
                try:
                    st = path.stat()
                    if _CACHED.fullmatch(path.name):
                        entries.append((st.st_mtime_ns, path.name, st.st_size, path))
                    elif path.name.startswith(".") and path.name.endswith(".part") and st.st_mtime < stale:
                        path.unlink()
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
        return entries

    def _evict(self, incoming: int = 0) -> None:
        """Remove least recently used, unpinned shards until the cache (plus `incoming` bytes) fits the limit."""
        if self.limit_bytes is None:
            return
        with _LOCK:
            entries = sorted(self._entries())
            total = sum(size for _, _, size, _ in entries) + incoming
            for _, _, size, path in entries:
                if total <= self.limit_bytes:
                    break
                if _PINS.get(str(path)):
                    continue
                try:
                    path.unlink()
                    self.stats.evictions += 1
                except FileNotFoundError:
                    pass  # another process evicted it first
                total -= size

    def _warn_once(self, key: str, message: str) -> None:
        with _LOCK:
            if key in _WARNED:
                return
            _WARNED.add(key)
        logger.warning(message)

    # -- manifests -------------------------------------------------------------------------------------------

    def manifest_dir(self, url: str) -> Path:
        """Download `url`/manifest.json (fresh each call: a manifest is the commit marker of its shard set and
        changes when the set is rebuilt) into root/manifests/<sha256 of the URL>/; returns that directory.
        FileNotFoundError when there is none."""
        from .io import sha256_bytes

        url = storage.normalize(url)
        local = self.root / "manifests" / sha256_bytes(url.encode("utf-8")) / "manifest.json"
        storage.download_file(storage.join(url, "manifest.json"), local)
        return local.parent
