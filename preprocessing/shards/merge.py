"""A shard merged from sorted runs spilled to disk, in bounded memory however large the shard: `spill_part` writes
one part of a run (its rows sorted by key) in small record batches (`spill_batch_rows`), `merge_runs` merges the runs
by their sort keys into one shard of the contract (preprocessing/shards/contract.py), holding about MERGE_KEY_ROWS
keys and one spilled batch per run at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from bertfactory.io import AtomicFile, sha256_file

from .contract import ShardInfo


# rows per record batch of a spilled part: the merge holds about one such batch per run at a time, so a shard
# merged from many runs gets smaller batches (spill_batch_rows): about SPILL_BUDGET_ROWS rows over all its runs, but
# not under MIN_SPILL_BATCH_ROWS (each batch costs its IPC framing, some hundreds of bytes, and a read call)
SPILL_BATCH_ROWS = 256
SPILL_BUDGET_ROWS = 8192
MIN_SPILL_BATCH_ROWS = 16


def spill_batch_rows(runs: int) -> int:
    """Rows per record batch of the parts of a shard that merge_runs will merge from `runs` runs."""
    return max(MIN_SPILL_BATCH_ROWS, min(SPILL_BATCH_ROWS, SPILL_BUDGET_ROWS // max(1, runs)))


def spill_part(path: Path, batch: pa.RecordBatch, batch_rows: int = SPILL_BATCH_ROWS) -> Path:
    """Write one part of a shard (rows sorted by key) to `path` as an Arrow stream of record batches of batch_rows
    rows (spill_batch_rows), for merge_runs to read back a few rows at a time."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        for start in range(0, batch.num_rows, batch_rows):
            writer.write_batch(batch.slice(start, batch_rows))
    return path


class _RunReader:
    """The rows of one sorted run (its spilled parts, in order), handed out a few at a time."""

    def __init__(self, paths: Sequence[Path]):
        self.paths = iter(paths)
        self.file: pa.OSFile | None = None
        self.reader = None
        self.buffer: list[pa.RecordBatch] = []
        self.buffered = 0

    def _read(self) -> None:
        while True:
            if self.reader is None:
                self.file = pa.OSFile(str(next(self.paths)), "rb")
                self.reader = pa.ipc.open_stream(self.file)
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                self.file.close()
                self.reader = None
                continue
            self.buffer.append(batch)
            self.buffered += batch.num_rows
            return

    def take(self, n: int) -> list[pa.RecordBatch]:
        while self.buffered < n:
            self._read()
        out: list[pa.RecordBatch] = []
        while n:
            head = self.buffer[0]
            if head.num_rows <= n:
                out.append(self.buffer.pop(0))
            else:
                out.append(head.slice(0, n))
                self.buffer[0] = head.slice(n)
            n -= out[-1].num_rows
            self.buffered -= out[-1].num_rows
        return out


# a run's sort keys: an [n, 3] uint64 array, or [(.npy file of an [rows, 3] uint64 array, rows)] in order
RunKeys = np.ndarray | Sequence[tuple[Path, int]]

# sort keys the merge holds at a time over all runs (24 bytes each): each run holds a block of
# MERGE_KEY_ROWS // runs keys, but at least MIN_KEY_BLOCK_ROWS so that a merge of many runs still moves whole blocks
MERGE_KEY_ROWS = 1 << 18
MIN_KEY_BLOCK_ROWS = 256


def _key_file_layout(file: Path, rows: int) -> int:
    """The byte offset of the keys in a .npy file of an [rows, 3] uint64 array (C order); raises naming the file
    when it holds anything else. Reads the header only."""
    with open(file, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"{file}: a .npy file of format version {version}, expected 1.0 or 2.0")
        shape, fortran_order, dtype = read_header(f)
        offset = f.tell()
    if shape != (rows, 3) or dtype != np.uint64 or fortran_order:
        raise ValueError(f"{file}: sort keys of shape {shape} {dtype}, expected ({rows}, 3) uint64 "
                         "(the key file was cut short or replaced while the job ran)")
    if Path(file).stat().st_size < offset + rows * 24:
        raise ValueError(f"{file}: sort keys of shape {shape} {dtype} but only {Path(file).stat().st_size - offset} "
                         "bytes of them (the key file was cut short while the job ran)")
    return offset


class _RunKeyReader:
    """The sort keys of one run, read a block at a time (from the array, or from its .npy files by offset, with no
    file held open between blocks)."""

    def __init__(self, keys: RunKeys):
        if isinstance(keys, np.ndarray):
            self.parts: list[tuple[Path | np.ndarray, int, int]] = [(keys.reshape(-1, 3), len(keys.reshape(-1, 3)), 0)]
        else:
            self.parts = [(Path(file), rows, _key_file_layout(Path(file), rows)) for file, rows in keys]
        self.rows = sum(rows for _, rows, _ in self.parts)
        self.part = 0
        self.at = 0  # the next row to read of the current part

    def read(self, n: int) -> np.ndarray:
        """The next (at most) n keys of the run, [m, 3] uint64; empty once the run is spent."""
        while self.part < len(self.parts) and self.at == self.parts[self.part][1]:
            self.part, self.at = self.part + 1, 0
        if self.part == len(self.parts):
            return np.empty((0, 3), dtype=np.uint64)
        source, rows, offset = self.parts[self.part]
        n = min(n, rows - self.at)
        if isinstance(source, np.ndarray):
            block = np.ascontiguousarray(source[self.at:self.at + n], dtype=np.uint64)
        else:
            with open(source, "rb") as f:
                f.seek(offset + self.at * 24)
                block = np.frombuffer(f.read(n * 24), dtype=np.uint64).reshape(-1, 3)
            if len(block) != n:
                raise ValueError(f"{source}: sort keys cut short at row {self.at + len(block)} of {rows} "
                                 "(the key file was replaced while the job ran)")
        self.at += n
        return block


def _rows_not_after(columns: np.ndarray, b0: np.uint64, b1: np.uint64, b2: np.uint64, inclusive: bool) -> int:
    """How many rows of a block (its keys as [3, m] columns, sorted) come before the key (b0, b1, b2) - or equal
    it, when inclusive. Binary search on the first key; only the rows that share it with the bound are compared."""
    first = columns[0]
    lo = int(first.searchsorted(b0, "left"))
    if lo == len(first) or first[lo] != b0:
        return lo
    hi = int(first.searchsorted(b0, "right"))
    second, third = columns[1, lo:hi], columns[2, lo:hi]
    last = (third <= b2) if inclusive else (third < b2)
    return lo + int(np.count_nonzero((second < b1) | ((second == b1) & last)))


def _merged_sources(readers: Sequence[_RunKeyReader]) -> Iterator[np.ndarray]:
    """Which run each row of the merged shard comes from, in shard order, a block at a time (a vectorised k-way
    merge). Rows are ordered by (key, run, position in the run): np.lexsort of every key at once, stable, in run
    order. Each run holds one block of its keys; the bound is the smallest (last key of a block, run) over the runs,
    and every row not after it is emitted: the keys a run has not read yet come after its held ones, whose last is
    not before the bound, so nothing is emitted out of order; the run that gave the bound is spent, so each round
    moves on."""
    block_rows = max(MIN_KEY_BLOCK_ROWS, MERGE_KEY_ROWS // max(1, len(readers)))
    run_type = np.int16 if len(readers) <= np.iinfo(np.int16).max else np.int32
    blocks: list[np.ndarray] = [np.empty((3, 0), dtype=np.uint64)] * len(readers)  # [3, m] columns of each run
    lasts = np.zeros((len(readers), 3), dtype=np.uint64)  # the last key of each run's block
    live = np.zeros(len(readers), dtype=bool)  # the runs with keys left

    def refill(run: int) -> None:
        # column-major: the binary search and the comparisons read each key contiguously
        more = np.ascontiguousarray(readers[run].read(block_rows - blocks[run].shape[1]).T)
        if more.shape[1]:
            blocks[run] = np.concatenate([blocks[run], more], axis=1) if blocks[run].shape[1] else more
        live[run] = blocks[run].shape[1] > 0
        if live[run]:
            lasts[run] = blocks[run][:, -1]

    for run in range(len(readers)):
        refill(run)
    while True:
        runs = np.flatnonzero(live)
        if not len(runs):
            return
        # the smallest last key; among equal ones the first run (lexsort is stable)
        bound_run = int(runs[np.lexsort(lasts[runs].T[::-1])[0]])
        b0, b1, b2 = lasts[bound_run]  # numpy scalars: copies
        taken_keys, taken_runs = [], []
        for run in runs.tolist():
            # rows equal to the bound come before it from the runs before bound_run (ties in run order)
            count = _rows_not_after(blocks[run], b0, b1, b2, inclusive=run <= bound_run)
            if count:
                taken_keys.append(blocks[run][:, :count])
                taken_runs.append(np.full(count, run, dtype=run_type))
                blocks[run] = blocks[run][:, count:]
                # topped up once half spent, not only when empty: then every run's last key stays about half a
                # block ahead, and a round emits about half a block of every run (refilled only when empty, the
                # runs' block ends spread out and a round emits about one block in all, at the cost of a pass
                # over every run)
                if 2 * blocks[run].shape[1] < block_rows:
                    refill(run)
        keys = np.concatenate(taken_keys, axis=1)
        yield np.concatenate(taken_runs)[np.lexsort(keys[::-1])]  # stable: ties keep run order


def _in_batches(sources: Iterator[np.ndarray], batch_rows: int) -> Iterator[np.ndarray]:
    """The merged run ids regrouped into arrays of batch_rows (the last one shorter)."""
    pending: list[np.ndarray] = []
    held = 0
    for block in sources:
        pending.append(block)
        held += len(block)
        if held >= batch_rows:
            joined = np.concatenate(pending)
            full = len(joined) - len(joined) % batch_rows
            for start in range(0, full, batch_rows):
                yield joined[start:start + batch_rows]
            pending, held = [joined[full:]], len(joined) - full
    if held:
        yield np.concatenate(pending)


def merge_runs(path: Path, schema: pa.Schema, runs: Sequence[tuple[RunKeys, Sequence[Path]]],
               batch_rows: int = 4096) -> ShardInfo:
    """Write one shard, atomically, from sorted runs of rows: each run is its sort keys ([n, 3] uint64, ascending
    in lexicographic order: an array, or the .npy files holding them in order with their row counts) and the
    spilled parts holding its rows in that order (spill_part). The shard's rows are the runs' rows merged by key
    (ties in run order). Every key file is checked before anything is written; the merge then holds about
    MERGE_KEY_ROWS keys, one spilled batch per run (spill_batch_rows) and one output batch, however large
    the shard."""
    key_readers = [_RunKeyReader(keys) for keys, _ in runs]
    rows = sum(reader.rows for reader in key_readers)
    readers = [_RunReader(paths) for _, paths in runs]
    with AtomicFile(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            if not rows:  # an empty shard still holds one (empty) batch, as readers of schema v1 expect
                writer.write_batch(pa.RecordBatch.from_pylist([], schema))
            for src in _in_batches(_merged_sources(key_readers), batch_rows):
                index = np.empty(len(src), dtype=np.int64)
                pieces: list[pa.RecordBatch] = []
                gathered = 0  # rows in pieces
                for run in np.unique(src).tolist():
                    mine = src == run
                    count = int(mine.sum())
                    index[mine] = gathered + np.arange(count)
                    pieces += readers[run].take(count)
                    gathered += count
                table = pa.Table.from_batches(pieces, schema=schema).take(pa.array(index)).combine_chunks()
                for batch in table.to_batches(max_chunksize=batch_rows):
                    writer.write_batch(batch)
    return ShardInfo(path=Path(path).name, rows=rows, sha256=sha256_file(path))
