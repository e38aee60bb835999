"""Writing shards of the contract (preprocessing/shards/contract.py): `write_shard` (rows as dicts),
`write_shard_table` (a table as record batches, atomically: the one writer behind every shard) and `shard_batch` (a
record batch of the shard schema from flat arrays, no Python object per row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from bertfactory.io import AtomicFile, sha256_file

from .contract import V2_COLUMNS, ShardInfo, shard_schema, token_type


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
