"""Input locations for the readers that seek (wikipedia, its multistream chunks, warc): a local path or a URL.

A location is a local path (str or Path; `file://` URLs too) or an object-storage URL (s3://, gs:// through
bertfactory.storage, so the endpoint and credential handling is the run directory's; any other fsspec URL, e.g.
memory:// or https://, through fsspec itself). A local path stays on plain `open()` / `os.stat`: nothing changes
for local files. A URL is never downloaded whole: `open_binary` streams it (fsspec's read-ahead buffer of
`block_size` bytes), `read_range` is one ranged GET of exactly the bytes asked for (a multistream chunk, a file's
magic bytes), `size` / `is_file` ask the store's metadata.

    with open_binary("s3://dumps/enwiki-pages-articles.xml.bz2") as f: f.read(3)
    read_range("gs://dumps/x-multistream.xml.bz2", 1_234_567, 9_876_543)   # those bytes only
    sibling("s3://dumps/x-multistream.xml.bz2", "x-multistream-index.txt.bz2")

Failures: a missing object is FileNotFoundError (the readers turn it into their own "not found" line, as for a
local file); any other failure of the store (unreachable, refused, a scheme whose package is missing) is one
InputError line naming the URL (bertfactory.storage.StorageError).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator, Union

from bertfactory import storage
from bertfactory.errors import InputError

Location = Union[str, "os.PathLike[str]"]

STREAM_BLOCK = 8 << 20  # read-ahead of a URL read as a stream (whole dump, WARC): few GETs, bounded memory


def is_url(location: Location) -> bool:
    """True for a remote URL (s3://, gs://, memory://, ...); plain paths and file:// URLs are local."""
    return storage.is_url(str(location))


def local_path(location: Location) -> Path:
    return storage.local_path(str(location))


def name_of(location: Location) -> str:
    """The file's base name: the same for a URL and a local file of the same name (document ids hash it)."""
    return str(location).rstrip("/").rsplit("/", 1)[-1] if is_url(location) else local_path(location).name


def sibling(location: Location, name: str) -> str | Path:
    """The file `name` in the same folder as `location` (a Path for a local location, a URL for a URL)."""
    if not is_url(location):
        return local_path(location).with_name(name)
    return f"{str(location).rsplit('/', 1)[0]}/{name}"


def _filesystem(url: str):
    """(fsspec filesystem, path in it) of a URL: bertfactory.storage's for its schemes, fsspec's for the rest."""
    if storage.scheme_of(url) in storage.SCHEMES:
        return storage.filesystem(url)
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as err:  # unknown protocol, or its package not installed
        raise InputError(f"{url}: cannot open this URL with fsspec ({type(err).__name__}: {err})") from None


@contextmanager
def _store(url: str, action: str):
    """Store failures as one line naming the URL; FileNotFoundError and InputErrors pass as they are."""
    try:
        yield
    except (FileNotFoundError, InputError):
        raise
    except Exception as err:  # noqa: BLE001 - every client failure is the same user-facing problem
        raise storage.StorageError(f"{url}: {action} failed ({storage._reason(err)})") from None


def is_file(location: Location) -> bool:
    if not is_url(location):
        return local_path(location).is_file()
    url = str(location)
    fs, path = _filesystem(url)
    with _store(url, "checking"):
        return bool(fs.isfile(path))


def size(location: Location) -> int:
    """Bytes in the file; FileNotFoundError when there is none."""
    if not is_url(location):
        return local_path(location).stat().st_size
    url = str(location)
    fs, path = _filesystem(url)
    with _store(url, "checking"):
        return int(fs.size(path))


def open_binary(location: Location, block_size: int = STREAM_BLOCK) -> BinaryIO:
    """The file for binary reading, seekable (a URL's seek + read is a ranged GET of `block_size` bytes or more:
    pass a small one for a few reads at scattered offsets, or use read_range). Close it (a `with` block)."""
    if not is_url(location):
        return open(local_path(location), "rb")
    url = str(location)
    fs, path = _filesystem(url)
    with _store(url, "opening"):
        return _Guarded(fs.open(path, "rb", block_size=block_size, cache_type="readahead"), url)


def guarded(f, url: str) -> BinaryIO:
    """`f`, a file of the URL opened by another fsspec client (sources.lines), with open_binary's failures: a store
    failure while reading is one InputError line naming the URL."""
    return _Guarded(f, url)


def read_range(location: Location, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file (fewer where it ends first): for a URL exactly one ranged GET of them."""
    if end <= start:
        return b""
    if not is_url(location):
        with open(local_path(location), "rb") as f:
            f.seek(start)
            return f.read(end - start)
    url = str(location)
    fs, path = _filesystem(url)
    with _store(url, f"reading bytes {start}..{end} of"):
        return fs.cat_file(path, start=start, end=end)


def iter_blocks(location: Location, start: int, block: int = 1 << 20) -> Iterator[bytes]:
    """The file from byte `start` on, `block` bytes at a time (a URL: one ranged GET per block, as they are
    consumed: a reader that stops early fetches no further)."""
    if not is_url(location):
        with open(local_path(location), "rb") as f:
            f.seek(start)
            while data := f.read(block):
                yield data
        return
    total = size(location)
    position = start
    while position < total:
        data = read_range(location, position, min(total, position + block))
        if not data:
            return
        yield data
        position += len(data)


class _Guarded:
    """An fsspec file whose store failures (a connection reset mid-stream) are one InputError line naming the
    URL; everything else (seek, tell, readinto, ...) is the file's own."""

    def __init__(self, f, url: str):
        self._f, self._url = f, url

    def __getattr__(self, name):
        return getattr(self._f, name)

    def _call(self, method, *args):
        with _store(self._url, "reading"):
            return method(*args)

    def read(self, n: int = -1) -> bytes:
        return self._call(self._f.read, n)

    def readinto(self, buffer) -> int:
        return self._call(self._f.readinto, buffer)

    def readline(self, *args) -> bytes:
        return self._call(self._f.readline, *args)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self._f.closed

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self):
        return iter(self._f)


__all__ = ["is_url", "local_path", "name_of", "sibling", "is_file", "size", "open_binary", "guarded", "read_range",
           "iter_blocks", "Location"]
