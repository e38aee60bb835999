"""Records spilled to disk inside a Beam job, so that the shuffles carry a small reference instead of the text.

A local runner (FnApiRunner) keeps every shuffled or stage-crossing PCollection in the driver's memory and hands a
worker its whole share of a stage's input at once, so text that travels through a GroupByKey makes both grow with
the corpus (measured: 10x sotu, issue 19). The documents pipeline therefore writes each record once, where it is
made, into a spill file of the staging work directory, and passes on `(path, offset, length)`; the stage that
needs the text again reads those bytes back. The instances pipeline does the same for its rows (instance_pipeline).

    writer = SpillWriter(directory, "docs")     # one file per bundle, opened at its first record
    ref = writer.write(b"...")                  # -> (path, offset, length)
    writer.close()                              # in finish_bundle: the file is complete before any reader runs
    SpillReader().read(ref)                     # -> the bytes written
    encode_int32_arrays([ids, lengths])         # arrays as bytes for write() (no pickle), decode_int32_arrays back

A file is named by a random suffix, not by its content: a retried bundle writes a new file and the references of
the failed attempt are never committed, so nothing reads the old one. The files live in the staging area, written
by this job only, and go with it (preprocessing.staging). Where that area is a URL the writer makes the file in
its own scratch and uploads it when the bundle closes it, and a reader downloads it once into its own
(preprocessing.exchange): no worker needs a disk another can see. The layout of the outputs depends only on the
records, never on which file held them.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

from . import exchange

SpillRef = tuple[str, int, int]  # (location: path or URL, offset, length) of one record's bytes

# files a reader keeps open at once: a stage reads the files of the bundles before it, a few per worker
OPEN_FILES = 32


class SpillWriter:
    """Appends records to one file per bundle (opened at the first write, closed by close())."""

    def __init__(self, directory: str | Path, prefix: str):
        self.directory = str(directory)  # a path, or a URL (preprocessing.exchange)
        self.prefix = prefix
        self._file: BinaryIO | None = None
        self._path = ""
        self._offset = 0

    def write(self, data: bytes) -> SpillRef:
        if self._file is None:
            self._path = exchange.join(self.directory, f"{self.prefix}-{uuid.uuid4().hex}.spill")
            self._file = open(exchange.writable(self._path), "wb")
            self._offset = 0
        self._file.write(data)
        ref = (self._path, self._offset, len(data))
        self._offset += len(data)
        return ref

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            exchange.put(self._path)  # a URL: uploaded before any reference to it leaves the bundle


class SpillReader:
    """Reads records back by reference, keeping the last OPEN_FILES files open."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, BinaryIO] = OrderedDict()

    def read(self, ref: SpillRef) -> bytes:
        path, offset, length = ref
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = open(exchange.get(path), "rb")
            if len(self._files) > OPEN_FILES:
                self._files.popitem(last=False)[1].close()
        else:
            self._files.move_to_end(path)
        f.seek(offset)
        data = f.read(length)
        if len(data) != length:
            raise ValueError(f"{path}: spilled record at byte {offset} has {len(data)} of its {length} bytes "
                             "(the spill file was cut short or replaced while the job ran)")
        return data

    def close(self) -> None:
        while self._files:
            self._files.popitem()[1].close()


def encode_int32_arrays(arrays: Sequence[np.ndarray]) -> bytes:
    """1-d int32 arrays as one record: their count and lengths (little-endian int64), then each array's raw bytes.
    Plain bytes, not a pickle: a spill file read back runs no code."""
    header = np.array([len(arrays), *map(len, arrays)], dtype="<i8")
    return b"".join([header.tobytes(), *(np.ascontiguousarray(a, dtype="<i4").tobytes() for a in arrays)])


def decode_int32_arrays(data: bytes, where: str = "spilled record") -> list[np.ndarray]:
    """encode_int32_arrays undone: the arrays (int32, read-only views of `data`). A record whose size does not
    match its header is named (`where`) with what is wrong."""
    count = int(np.frombuffer(data, dtype="<i8", count=1)[0]) if len(data) >= 8 else -1
    if count < 0 or len(data) < 8 * (1 + count):
        raise ValueError(f"{where}: {len(data)} bytes, too few for the header of an int32 array record")
    sizes = np.frombuffer(data, dtype="<i8", count=count, offset=8)
    offset = 8 * (1 + count)
    if (sizes < 0).any() or offset + 4 * int(sizes.sum()) != len(data):
        raise ValueError(f"{where}: the header gives arrays of {sizes.tolist()} int32 values, but "
                         f"{len(data) - offset} bytes follow it")
    arrays = []
    for size in sizes.tolist():
        arrays.append(np.frombuffer(data, dtype="<i4", count=size, offset=offset).astype(np.int32, copy=False))
        offset += 4 * size
    return arrays
