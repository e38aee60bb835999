"""The shard contract between preprocessing and training: Arrow IPC *stream* shards + `manifest.json`.

Documented in docs/shards.md (schema v1). Writers call `write_shard` (rows as dicts) or `write_shard_table`
(record batches from flat arrays: `shard_batch`) and `write_manifest`; readers call
`ShardSet.open`, which validates the manifest, the schema version and (optionally) every shard's sha256 and the
tokenizer's sha256.

Row of schema v2 (one training instance, unpadded; v1 = the first six columns, still read):
    input_ids       list<uint16>  (int32 when vocab_size >= 65536)   the instance format's layout
    len_a           uint16        tokens of the first segment with its specials ([CLS] A [SEP]; the whole row for
                                  one-segment formats); token_type_ids = 0 for the first len_a positions, else 1
    nsp_label       int8          nsp-pairs: 1 = B from a random document; sop-pairs: 1 = swapped; else 0
    mask_positions  list<list<uint16>>  K variants, each sorted ascending
    mask_tokens     list<list<int32>>   the id placed at each masked position; the label is input_ids[position]
    doc_id          uint64        stable id of the source document (a pair's id for tlm-pairs)
    lang_a, lang_b  uint16        language ids (index into manifest instance_format.languages) of the first and
                                  second segment (the document's language twice for one-language rows)
    segment_index   uint32        clm: the row's position among its document's segments; else 0
    mask_spans      list<list<uint16>>  masking policy span only (column absent otherwise): K variants, each the
                                  length of every masked span in order - span j covers the next mask_spans[v][j]
                                  entries of mask_positions[v], consecutive positions (SpanBERT's SBO reads them)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bertfactory import run_location, storage
from bertfactory.errors import ContractError
from bertfactory.io import AtomicFile, atomic_write_json, read_json_file, sha256_file
from bertfactory.shard_cache import ShardCache

SCHEMA_VERSION = 2
SUPPORTED_SCHEMA_VERSIONS = (1, 2)
# columns schema v2 added (v1 shards are read with lang_a = lang_b = segment_index = 0)
V2_COLUMNS = ("lang_a", "lang_b", "segment_index")
# the optional column of span bounds (written for masking policy span; a shard without it is still read)
SPAN_COLUMN = "mask_spans"
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "heldout")


def token_type(vocab_size: int) -> pa.DataType:
    return pa.uint16() if vocab_size < 65536 else pa.int32()


def shard_schema(vocab_size: int, span_bounds: bool = False) -> pa.Schema:
    """The row schema; `span_bounds` adds the mask_spans column (masking policy span), after the others so that
    every other shard keeps its bytes."""
    spans = [pa.field(SPAN_COLUMN, pa.list_(pa.list_(pa.uint16())), nullable=False)] if span_bounds else []
    return pa.schema(
        [
            pa.field("input_ids", pa.list_(token_type(vocab_size)), nullable=False),
            pa.field("len_a", pa.uint16(), nullable=False),
            pa.field("nsp_label", pa.int8(), nullable=False),
            pa.field("mask_positions", pa.list_(pa.list_(pa.uint16())), nullable=False),
            pa.field("mask_tokens", pa.list_(pa.list_(pa.int32())), nullable=False),
            pa.field("doc_id", pa.uint64(), nullable=False),
            pa.field("lang_a", pa.uint16(), nullable=False),
            pa.field("lang_b", pa.uint16(), nullable=False),
            pa.field("segment_index", pa.uint32(), nullable=False),
            *spans,
        ],
        metadata={b"bertfactory.schema_version": str(SCHEMA_VERSION).encode()},
    )


# ---------------------------------------------------------------------------------------------- manifest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenizerInfo(_Strict):
    path: str = Field(description="tokenizer.json, relative to the manifest's directory")
    sha256: str
    vocab_size: int
    special_ids: dict[str, int] = Field(description="pad, unk, cls, sep, mask")
    lowercase: bool


class ShardInfo(_Strict):
    path: str = Field(description="relative to the manifest's directory")
    rows: int
    sha256: str


class SplitInfo(_Strict):
    rows: int
    tokens: int
    shards: list[ShardInfo]


class SourceInfo(_Strict):
    path: str
    sha256: str
    bytes: int


class ParentInfo(_Strict):
    """The corpus version an incremental version was built on (docs/shards.md, "Corpus versions")."""

    path: str = Field(description="the parent's shards directory, as given (corpus.parent)")
    manifest_sha256: str = Field(description="sha256 of the parent's manifest.json when this version was built")
    corpus_version: int


class Manifest(_Strict):
    format: Literal["bertfactory.shards"] = "bertfactory.shards"
    schema_version: int
    created_by: str
    tokenizer: TokenizerInfo
    instance_format: dict[str, Any]
    masking: dict[str, Any]
    seed: int
    config_hash: str
    counts: dict[str, Any]
    splits: dict[str, SplitInfo]
    sources: list[SourceInfo]
    runner: dict[str, Any]
    corpus_version: int = Field(1, ge=1, description="1 for a corpus built from scratch, N+1 for an increment of N")
    parent: ParentInfo | None = Field(None, description="the version this one increments (None for version 1)")
    dedup_index: ShardInfo | None = Field(
        None, description="the near-duplicate index of every document of this version and its ancestors "
        "(preprocessing.dedup; what the next incremental version deduplicates against)")
    inputs_seen: list[str] = Field(
        default_factory=list, description="sha256 of every input file read by this version and its ancestors "
        "(what an incremental run skips)")

    @property
    def mask_variants(self) -> int:
        """Mask variants stored per row (0: dynamic masking, the loader masks at read time)."""
        return 0 if self.masking.get("dynamic") else int(self.masking["variants"])


def write_manifest(directory: Path, manifest: Manifest) -> Path:
    path = Path(directory) / MANIFEST_NAME
    atomic_write_json(path, manifest.model_dump(mode="json"))
    return path


def read_manifest(directory: str | Path) -> Manifest:
    directory = Path(directory)
    path = directory / MANIFEST_NAME if directory.is_dir() else directory
    raw = read_json_file(path, f"no shard manifest at {path}; run `bertfactory preprocess` first")
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise ContractError(
            f"{path}: shard schema version {version!r} is not supported by this bertfactory "
            f"(supported: {', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))})"
        )
    try:
        return Manifest.model_validate(raw)
    except ValidationError as err:
        raise ContractError(f"{path} is not a valid shard manifest:\n{err}") from None


# ------------------------------------------------------------------------------------------------ writer


def write_shard(path: Path, rows: Sequence[Mapping[str, Any]], vocab_size: int, batch_rows: int = 4096,
                span_bounds: bool = False) -> ShardInfo:
    """Write `rows` (dicts with the schema's fields, in the order given) to an Arrow stream file, atomically.
    `span_bounds`: the rows carry mask_spans too (masking policy span).

    Returns the ShardInfo with `path` = the file name (callers make it relative to the manifest)."""
    schema = shard_schema(vocab_size, span_bounds)
    columns = {name: [r.get(name, 0) for r in rows] if name in V2_COLUMNS else [r[name] for r in rows]
               for name in schema.names}
    return write_shard_table(path, pa.table(columns, schema=schema), batch_rows)


def write_shard_table(path: Path, table: pa.Table, batch_rows: int = 4096) -> ShardInfo:
    """Write a table of the shard schema (rows in the order given) as record batches of `batch_rows` rows to an
    Arrow stream file, atomically: the one writer behind every shard (the same rows give the same bytes, however
    the table was chunked)."""
    table = table.combine_chunks()
    with AtomicFile(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            # an empty shard still holds one (empty) batch, as readers of schema v1 expect
            for batch in table.to_batches(max_chunksize=batch_rows) or [pa.RecordBatch.from_pylist([], table.schema)]:
                writer.write_batch(batch)
    return ShardInfo(path=Path(path).name, rows=table.num_rows, sha256=sha256_file(path))


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


def _list_array(offsets: np.ndarray, values: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, value_type))


def shard_batch(vocab_size: int, ids_offsets: np.ndarray, ids_values: np.ndarray, len_a: np.ndarray,
                nsp_label: np.ndarray, mask_counts: np.ndarray, mask_positions: np.ndarray, mask_tokens: np.ndarray,
                variants: int, doc_id: np.ndarray, lang_a: np.ndarray, lang_b: np.ndarray,
                segment_index: np.ndarray, span_counts: np.ndarray | None = None,
                span_lengths: np.ndarray | None = None) -> pa.RecordBatch:
    """A record batch of the shard schema from flat arrays (no Python object per row): `ids_offsets` [N+1] into
    `ids_values`; `mask_counts` [N*variants] positions of each row's variants in order, `mask_positions` /
    `mask_tokens` their values (variants 0: dynamic masking, no masks stored). `span_counts` [N*variants] spans of
    each row-variant and `span_lengths` their lengths in masked positions: the mask_spans column (None: none)."""
    rows = len(len_a)
    schema = shard_schema(vocab_size, span_counts is not None)
    mask_offsets = np.zeros(rows * variants + 1, dtype=np.int64)
    np.cumsum(mask_counts, out=mask_offsets[1:])
    per_row = np.arange(rows + 1, dtype=np.int64) * variants
    positions = _list_array(mask_offsets, mask_positions, pa.uint16())
    tokens = _list_array(mask_offsets, mask_tokens, pa.int32())
    arrays = [
        _list_array(ids_offsets, ids_values, token_type(vocab_size)),
        pa.array(len_a, pa.uint16()),
        pa.array(nsp_label, pa.int8()),
        pa.ListArray.from_arrays(pa.array(per_row, pa.int32()), positions),
        pa.ListArray.from_arrays(pa.array(per_row, pa.int32()), tokens),
        pa.array(doc_id, pa.uint64()),
        pa.array(lang_a, pa.uint16()),
        pa.array(lang_b, pa.uint16()),
        pa.array(segment_index, pa.uint32()),
    ]
    if span_counts is not None:
        span_offsets = np.zeros(rows * variants + 1, dtype=np.int64)
        np.cumsum(span_counts, out=span_offsets[1:])
        arrays.append(pa.ListArray.from_arrays(pa.array(per_row, pa.int32()),
                                               _list_array(span_offsets, span_lengths, pa.uint16())))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# ------------------------------------------------------------------------------------------------ reader


@dataclass
class _ShardArrays:
    """One shard as flat numpy arrays (zero-copy views of the memory-mapped Arrow buffers where possible)."""

    ids_offsets: np.ndarray
    ids_values: np.ndarray
    len_a: np.ndarray
    nsp_label: np.ndarray
    mask_offsets: np.ndarray  # over rows*K variant lists
    mask_positions: np.ndarray
    mask_tokens: np.ndarray
    doc_id: np.ndarray
    rows: int
    lang_a: np.ndarray | None = None  # None: a v1 shard (all 0)
    lang_b: np.ndarray | None = None
    segment_index: np.ndarray | None = None
    span_offsets: np.ndarray | None = None  # over rows*K variant lists; None: no mask_spans column
    span_lengths: np.ndarray | None = None


def _flat_list(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of a list array, offsets rebased to 0."""
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    return offsets - offsets[0], values[offsets[0] : offsets[-1]] if len(offsets) else values[:0]


def _load_shard(path: Path, expect_k: int) -> _ShardArrays:
    try:
        source = pa.memory_map(str(path), "r")
        reader = pa.ipc.open_stream(source)
        table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as err:
        raise ContractError(f"shard {path} is not a readable Arrow stream: {err}") from None
    version = (table.schema.metadata or {}).get(b"bertfactory.schema_version", b"?").decode()
    if version not in {str(v) for v in SUPPORTED_SCHEMA_VERSIONS}:
        raise ContractError(f"shard {path}: schema version {version} not supported")
    missing = [name for name in V2_COLUMNS if version != "1" and name not in table.schema.names]
    if missing:
        raise ContractError(f"shard {path}: schema version {version} without column(s) {', '.join(missing)}")
    table = table.combine_chunks()
    batch = table.to_batches()[0] if table.num_rows else None
    if batch is None:
        empty_i = np.zeros(1, np.int64)
        spans = (empty_i, np.zeros(0, np.uint16)) if SPAN_COLUMN in table.schema.names else (None, None)
        return _ShardArrays(empty_i, np.zeros(0, np.int32), np.zeros(0, np.uint16), np.zeros(0, np.int8),
                            empty_i, np.zeros(0, np.uint16), np.zeros(0, np.int32), np.zeros(0, np.uint64), 0,
                            span_offsets=spans[0], span_lengths=spans[1])
    col = {name: batch.column(name) for name in batch.schema.names}
    ids_off, ids_val = _flat_list(col["input_ids"])
    pos_outer = col["mask_positions"]
    tok_outer = col["mask_tokens"]
    k_counts = np.diff(pos_outer.offsets.to_numpy())
    if not np.all(k_counts == expect_k):
        raise ContractError(f"shard {path}: expected {expect_k} mask variants per row, found {sorted(set(k_counts))}")
    pos_off, pos_val = _flat_list(pos_outer.flatten())
    tok_off, tok_val = _flat_list(tok_outer.flatten())
    if not np.array_equal(pos_off, tok_off):
        raise ContractError(f"shard {path}: mask_positions and mask_tokens have different lengths")
    span_off, span_len = _span_bounds(path, col[SPAN_COLUMN], expect_k, pos_off, pos_val) if SPAN_COLUMN in col \
        else (None, None)
    return _ShardArrays(
        ids_offsets=ids_off,
        ids_values=ids_val,
        len_a=col["len_a"].to_numpy(),
        nsp_label=col["nsp_label"].to_numpy(),
        mask_offsets=pos_off,
        mask_positions=pos_val,
        mask_tokens=tok_val,
        doc_id=col["doc_id"].to_numpy(),
        rows=batch.num_rows,
        **{name: col[name].to_numpy() for name in V2_COLUMNS if name in col},
        span_offsets=span_off,
        span_lengths=span_len,
    )


def _span_bounds(path: Path, column: pa.Array, expect_k: int, pos_off: np.ndarray, pos_val: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(offsets over the rows*K variant lists, lengths) of the mask_spans column, checked against the masks: K
    lists per row, every variant's lengths summing to its masked positions, each span on consecutive positions."""
    if not np.all(np.diff(column.offsets.to_numpy()) == expect_k):
        raise ContractError(f"shard {path}: {SPAN_COLUMN} does not hold {expect_k} variants per row")
    span_off, span_len = _flat_list(column.flatten())
    span_len = span_len.astype(np.int64)
    ends = np.concatenate([[0], np.cumsum(span_len)])  # slot after each span, counted over all variants
    if (len(span_len) and span_len.min() < 1) or not np.array_equal(ends[span_off], pos_off):
        raise ContractError(f"shard {path}: {SPAN_COLUMN} lengths do not add up to each variant's mask_positions")
    first, last = ends[:-1], ends[1:] - 1
    if len(span_len) and not np.array_equal(pos_val[last].astype(np.int64) - pos_val[first], span_len - 1):
        raise ContractError(f"shard {path}: a span of {SPAN_COLUMN} covers positions that are not consecutive")
    return span_off, span_len


@dataclass(frozen=True)
class Instance:
    input_ids: np.ndarray
    len_a: int
    nsp_label: int
    mask_positions: np.ndarray
    mask_tokens: np.ndarray
    doc_id: int
    lang_a: int = 0
    lang_b: int = 0
    segment_index: int = 0
    mask_spans: np.ndarray | None = None  # each masked span's length in mask_positions order; None: not stored


class ShardSet:
    """All shards of one split, indexable by a global row index. Open with `ShardSet.open`."""

    def __init__(self, directory: Path, manifest: Manifest, split: str, shards: list[_ShardArrays]):
        self.directory = directory
        self.manifest = manifest
        self.split = split
        self._shards = shards
        self._starts = np.cumsum([0] + [s.rows for s in shards])
        self.k = manifest.mask_variants
        # every shard stores the bounds of its masked spans (masking policy span; older span shards do not)
        self.span_bounds = bool(shards) and all(s.span_offsets is not None for s in shards)

    @classmethod
    def open(
        cls,
        directory: str | Path,
        split: str = "train",
        tokenizer_sha256: str | None = None,
        verify: bool = True,
    ) -> "ShardSet":
        """Open a split. `tokenizer_sha256`: refuse shards built with another tokenizer. `verify`: check every
        shard's sha256 against the manifest (cheap next to training; turn off only for huge corpora).

        `directory` may be a URL (s3://, gs://): the manifest is read from there and the shards through the local
        shard cache (bertfactory.shard_cache). So are the shards missing from a directory inside the working copy
        of a remote run (bertfactory.run_location). A shard from the cache was verified when it was downloaded
        and is not hashed again. For a URL, `directory` of the result is the manifest's local copy in the cache."""
        url = storage.normalize(str(directory)) if storage.is_url(str(directory)) else None
        cache = ShardCache() if url is not None else None
        if url is not None:
            try:
                directory = cache.manifest_dir(url)
            except FileNotFoundError:
                raise ContractError(f"no shard manifest at {url}/{MANIFEST_NAME}; run `bertfactory preprocess` "
                                    "first") from None
        directory = Path(directory)
        manifest = read_manifest(directory)
        if split not in manifest.splits:
            raise ContractError(f"{directory}/{MANIFEST_NAME} has no split '{split}' (has: {', '.join(manifest.splits)})")
        if tokenizer_sha256 is not None and tokenizer_sha256 != manifest.tokenizer.sha256:
            raise ContractError(
                f"{directory}/{MANIFEST_NAME} was built with tokenizer sha256 {manifest.tokenizer.sha256}, "
                f"but the tokenizer given has sha256 {tokenizer_sha256}; the token ids would not match"
            )
        infos = manifest.splits[split].shards
        # the shards to fetch from a run location: all of them for a URL; for a local directory those missing
        # from it when it is in a remote run's working copy (an ordinary local run keeps its errors below)
        remote, fetch = url, set()
        if url is not None:
            fetch = set(range(len(infos)))
        else:
            missing = {i for i, info in enumerate(infos) if not (directory / info.path).is_file()}
            if missing and (remote := run_location.remote_of(directory)) is not None:
                fetch, cache = missing, ShardCache()
        fetched = cache.fetch_all([(storage.join(remote, info.path), info.sha256, None)
                                   for i, info in enumerate(infos) if i in fetch]) if fetch else None
        shards = []
        try:
            for i, info in enumerate(infos):
                if i in fetch:
                    arrays = cls._load_fetched(cache, next(fetched), storage.join(remote, info.path), info.sha256,
                                               manifest.mask_variants)
                    path = f"{storage.join(remote, info.path)} (cached as {cache.path_for(info.sha256)})"
                else:
                    path = directory / info.path
                    if not path.is_file():
                        raise ContractError(f"shard {path} listed in the manifest is missing")
                    if verify:
                        got = sha256_file(path)
                        if got != info.sha256:
                            raise ContractError(f"shard {path} changed since the manifest was written "
                                                f"(sha256 {got}, manifest {info.sha256})")
                    arrays = _load_shard(path, manifest.mask_variants)
                if arrays.rows != info.rows:
                    raise ContractError(f"shard {path} has {arrays.rows} rows, manifest says {info.rows}")
                shards.append(arrays)
        finally:
            if fetched is not None:
                fetched.close()  # stops the prefetching when a shard was refused
        return cls(directory, manifest, split, shards)

    @staticmethod
    def _load_fetched(cache: ShardCache, path: Path, url: str, sha256: str, expect_k: int) -> _ShardArrays:
        """Memory-map a shard the cache just handed out. Another process sharing the cache (a torchrun rank) may
        have evicted it between that fetch and this open: then it is fetched again, once. After the mapping is
        made, eviction is harmless: on Linux an unlinked file's mapping stays valid (its disk space is freed when
        the ShardSet is dropped)."""
        try:
            return _load_shard(path, expect_k)
        except ContractError:
            if path.is_file():
                raise
        return _load_shard(cache.fetch(url, sha256), expect_k)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _locate(self, index: int) -> tuple[_ShardArrays, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for {len(self)} rows")
        s = int(np.searchsorted(self._starts, index, side="right") - 1)
        return self._shards[s], index - int(self._starts[s])

    def lengths(self) -> np.ndarray:
        """Sequence length of every row (for length-aware batching and token counts)."""
        return np.concatenate([np.diff(s.ids_offsets) for s in self._shards]) if self._shards else np.zeros(0, np.int64)

    def max_predictions(self) -> int:
        """The largest number of masked positions of any row and variant (to size fixed-shape batches); with
        dynamic masking the configured maximum."""
        if not self.k:
            return int(self.manifest.masking["max_predictions_per_seq"])
        counts = [np.diff(s.mask_offsets) for s in self._shards if len(s.mask_offsets) > 1]
        return int(max((c.max() for c in counts), default=0))

    def token_counts(self, vocab_size: int) -> np.ndarray:
        """How often each token id occurs in the split's input_ids (int64, length vocab_size)."""
        total = np.zeros(vocab_size, np.int64)
        for s in self._shards:
            total += np.bincount(s.ids_values, minlength=vocab_size)[:vocab_size]
        return total

    def instance(self, index: int, variant: int = 0) -> Instance:
        shard, r = self._locate(index)
        ids = shard.ids_values[shard.ids_offsets[r] : shard.ids_offsets[r + 1]]
        spans = None
        if self.k:
            m = r * self.k + (variant % self.k)
            lo, hi = shard.mask_offsets[m], shard.mask_offsets[m + 1]
            if self.span_bounds:
                spans = shard.span_lengths[shard.span_offsets[m]:shard.span_offsets[m + 1]]
        else:  # dynamic masking: no stored masks (training.data masks at read time)
            lo = hi = 0
        return Instance(
            input_ids=ids,
            len_a=int(shard.len_a[r]),
            nsp_label=int(shard.nsp_label[r]),
            mask_positions=shard.mask_positions[lo:hi],
            mask_tokens=shard.mask_tokens[lo:hi],
            doc_id=int(shard.doc_id[r]),
            lang_a=int(shard.lang_a[r]) if shard.lang_a is not None else 0,
            lang_b=int(shard.lang_b[r]) if shard.lang_b is not None else 0,
            segment_index=int(shard.segment_index[r]) if shard.segment_index is not None else 0,
            mask_spans=spans,
        )

    def __iter__(self) -> Iterable[Instance]:
        for i in range(len(self)):
            yield self.instance(i)
