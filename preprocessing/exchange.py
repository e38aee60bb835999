"""Files the workers of a preprocessing job hand each other: on one shared disk, or through a bucket.

The Beam jobs pass small references through their shuffles and keep the bulk (spilled text and token ids, rows per
pre-shard, masked parts and their sort keys, shards, side-output lines) in files of the run's staging area. Where
that area is a local path, every worker of the job must see it (the local and in-process presets, a portable
runner on one machine, a cluster with a shared file system): a file is written and read in place. Where it is a
URL (`s3://`, `gs://`: preprocess.runner.exchange `bucket`, the default for the portable, Dataflow, Flink and
Spark presets when the run directory is a URL), no worker needs any disk but its own:

- a writer makes the file in its own scratch (`$TMPDIR/bertfactory-exchange/<scheme>/<bucket>/<key>`, or
  BERTFACTORY_EXCHANGE_SCRATCH), complete, and uploads it (`put`) before its reference goes on through Beam: one
  PUT, so the object appears whole or not at all, and a retried bundle uploads the same name again;
- a reader downloads the object into its own scratch once (`get`, through a temporary name renamed when complete)
  and reads it there, at any offset, as a local file.

A transfer that fails inside a worker (the store unreachable, a missing object) ends the job with its one line
(worker_errors: the StorageError's message, not Beam's tracebacks). Every function takes a location (a local path
or a URL) and does nothing extra for a local one, so the job's code
is the same on both: only the staging location the driver chooses differs (preprocessing.pipeline).

    loc = join(staging, "work", "dedup_index", "part-00001.arrow")
    write_index(writable(loc)); put(loc)        # a worker
    read_index(get(loc))                        # any other worker, or the driver
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from bertfactory import storage

from .worker_errors import worker_input_error

SCRATCH_ENV = "BERTFACTORY_EXCHANGE_SCRATCH"
# sinks.WriteBundleParts: a file per bundle under DIR/.bundles/, the committed ones listed in DIR/_committed/ (the one
# file sinks.WriteSmallLines writes there)
BUNDLES = ".bundles"
COMMITTED = "_committed"
COMMITTED_LIST = "part-00000.jsonl"


def is_remote(location: str | os.PathLike) -> bool:
    return storage.is_url(location)


def join(location: str | os.PathLike, *parts: str) -> str:
    """`location`/`parts` for a path or a URL (a Path would turn s3://b/x into the local folder s3:/b/x)."""
    return storage.join(str(location), *map(str, parts))


def scratch_root() -> Path:
    """This process's scratch for the objects of remote staging areas (its own disk: a worker's TMPDIR)."""
    return Path(os.environ.get(SCRATCH_ENV) or Path(tempfile.gettempdir()) / "bertfactory-exchange")


def local(location: str | os.PathLike) -> Path:
    """Where this process reads and writes `location`: the path itself, or the URL's place in its scratch."""
    text = str(location)
    if not storage.is_url(text):
        return storage.local_path(text)
    url = storage.normalize(text)
    scheme, rest = url.split("://", 1)
    return scratch_root() / scheme / rest


def writable(location: str | os.PathLike) -> Path:
    """local(location), its folder made: write the file there, then put(location)."""
    path = local(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def put(location: str | os.PathLike, keep: bool = True) -> None:
    """Upload the file written at local(location) to the URL `location` (nothing to do for a path); without
    `keep` the scratch copy is removed afterwards (a file no later step of this worker reads)."""
    text = str(location)
    if not storage.is_url(text):
        return
    path = local(text)
    try:
        storage.upload_file(path, text)
    except storage.StorageError as err:  # out of the worker as one line, not Beam's tracebacks of it
        raise worker_input_error(str(err)) from None
    if not keep:
        path.unlink(missing_ok=True)


def get(location: str | os.PathLike) -> Path:
    """A local file with the bytes of `location`: the path itself, or the object downloaded into this process's
    scratch (once: objects of a staging area are written once, under names no other attempt reuses with other
    bytes)."""
    text = str(location)
    path = local(text)
    if storage.is_url(text) and not path.exists():
        try:
            storage.download_file(text, path)
        except storage.StorageError as err:
            raise worker_input_error(str(err)) from None
    return path


def release(location: str | os.PathLike) -> None:
    """Drop this process's scratch copy of the URL `location` once it has been read for good (nothing for a
    path): a worker's scratch then holds what it is working on, not everything it ever read."""
    if storage.is_url(str(location)):
        local(location).unlink(missing_ok=True)


def listing(location: str | os.PathLike) -> list[str]:
    """The locations of every file under the folder `location` (recursively), sorted."""
    text = str(location)
    if storage.is_url(text):
        return [join(text, rel) for rel in sorted(storage.list_files(text))]
    root = storage.local_path(text)
    return sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def matching(folder: str | os.PathLike, prefix: str = "part", suffix: str = "") -> list[str]:
    """The files directly in `folder` named prefix*suffix (a sink's parts), sorted by name."""
    names = [loc for loc in listing(folder) if "/" not in _relative(folder, loc)]
    return [loc for loc in names if Path(_relative(folder, loc)).name.startswith(prefix)
            and loc.endswith(suffix)]


def _relative(folder: str | os.PathLike, location: str) -> str:
    base = str(folder).rstrip("/").rstrip(os.sep)
    return location[len(base) + 1:].replace(os.sep, "/")


def pull(location: str | os.PathLike, destination: Path, skip=lambda rel: False) -> list[Path]:
    """Download every file under the URL `location` into the local folder `destination` (same relative paths),
    leaving out those whose relative path `skip` accepts; returns the files written."""
    written = []
    for loc in listing(location):
        rel = _relative(location, loc)
        if skip(rel):
            continue
        written.append(storage.download_file(loc, Path(destination) / rel))
    return written


def remove(location: str | os.PathLike) -> None:
    """Remove the folder `location` (a URL: its objects, and this process's scratch copies of them)."""
    text = str(location)
    if storage.is_url(text):
        storage.delete(text, recursive=True)
    shutil.rmtree(local(text), ignore_errors=True)


def committed_parts(directory: str | os.PathLike) -> list[str]:
    """The files sinks.WriteBundleParts committed under `directory`, sorted; none when nothing was written."""
    folder = join(directory, COMMITTED)
    if join(folder, COMMITTED_LIST) not in listing(folder):
        return []
    with open(get(join(folder, COMMITTED_LIST)), encoding="utf-8") as f:
        return sorted(line.strip() for line in f if line.strip())
