"""The dedup index file: (doc_id, exact hash, MinHash signature) of every kept document, one Arrow IPC file per
corpus version (RUN/shards/dedup_index.arrow), which the next version deduplicates against. Writing, reading,
checking and merging it need no Beam (preprocessing.dedup reads it into a pipeline).

    python -m preprocessing.dedup INDEX.arrow      # rows, num_perm and parameters of a dedup index
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bertfactory.errors import InputError
from bertfactory.io import AtomicFile, sha256_file

from .dedup_config import DedupConfig

INDEX_FORMAT_VERSION = 1
INDEX_METADATA_KEY = b"bertfactory.dedup_index"
BATCH_ROWS = 8192
NO_SIGNATURE = 0xFFFFFFFF  # every position: a record without shingles (empty text, sentence pairs)


def index_schema(num_perm: int, params: dict | None = None) -> pa.Schema:
    meta = {"format_version": INDEX_FORMAT_VERSION, "num_perm": num_perm, **(params or {})}
    return pa.schema(
        [
            pa.field("doc_id", pa.uint64(), nullable=False),
            pa.field("exact", pa.uint64(), nullable=False),
            pa.field("minhash", pa.list_(pa.uint32(), num_perm), nullable=False),
        ],
        metadata={INDEX_METADATA_KEY: json.dumps(meta, sort_keys=True).encode()},
    )


def _write_table(table: pa.Table, path: Path, schema: pa.Schema) -> dict:
    with AtomicFile(path) as tmp:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            # batch boundaries depend on the row count only, not on how the entries arrived
            for batch in table.combine_chunks().to_batches(max_chunksize=BATCH_ROWS):
                writer.write_batch(batch)
    return {"path": Path(path).name, "rows": table.num_rows, "sha256": sha256_file(path)}


def _entries_table(entries: Iterable, num_perm: int | None) -> tuple[pa.Table, int]:
    doc_ids, exacts, signatures = [], [], []
    for doc_id, exact, signature in entries:
        doc_ids.append(int(doc_id))
        exacts.append(int(exact))
        array = (np.frombuffer(signature, dtype="<u4") if isinstance(signature, bytes)
                 else np.asarray(signature, dtype=np.uint32))
        if num_perm is None:
            num_perm = array.size
        if array.size != num_perm:
            raise ValueError(f"dedup index entry {doc_id}: {array.size} MinHash values, expected {num_perm}")
        signatures.append(array)
    num_perm = num_perm if num_perm is not None else DedupConfig().num_perm
    flat = np.concatenate(signatures).astype(np.uint32) if signatures else np.zeros(0, dtype=np.uint32)
    table = pa.table({
        "doc_id": pa.array(doc_ids, type=pa.uint64()),
        "exact": pa.array(exacts, type=pa.uint64()),
        "minhash": pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.uint32()), num_perm),
    })
    return table, num_perm


def write_dedup_index(entries: Iterable, path: Path, cfg: DedupConfig | None = None) -> dict:
    """Write (doc_id, exact hash, signature) entries, in the order given, to one Arrow IPC file, atomically:
    doc_id uint64, exact uint64, minhash fixed_size_list<uint32>[num_perm] (a record without a signature: every
    value 0xFFFFFFFF). `cfg` records seed and shingle size in the schema metadata. Returns {path (name), rows,
    sha256}."""
    table, num_perm = _entries_table(entries, cfg.num_perm if cfg is not None else None)
    schema = index_schema(num_perm, cfg.index_params() if cfg is not None else None)
    return _write_table(table.cast(schema), Path(path), schema)


def open_index(path: Path | str) -> pa.ipc.RecordBatchFileReader:
    try:
        import fsspec

        handle = fsspec.open(str(path), "rb").open()
        return pa.ipc.open_file(handle)
    except FileNotFoundError:
        raise InputError(f"dedup index {path} does not exist") from None
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"dedup index {path} is not a readable Arrow IPC file: {err}") from None


def index_info(path: Path | str) -> dict:
    """{"num_perm", "rows", "batches", and the parameters recorded when it was written} of an index file; an
    InputError naming the file when it is not a dedup index."""
    reader = open_index(path)
    schema = reader.schema
    names = schema.names
    if names != ["doc_id", "exact", "minhash"] or not pa.types.is_fixed_size_list(schema.field("minhash").type):
        raise InputError(f"dedup index {path}: columns {names} are not doc_id, exact, minhash "
                         "(fixed_size_list<uint32>); not a bertfactory dedup index")
    params = json.loads((schema.metadata or {}).get(INDEX_METADATA_KEY, b"{}"))
    params["num_perm"] = schema.field("minhash").type.list_size
    params.pop("format_version", None)
    rows = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    return {"path": str(path), "params": params, "rows": rows, "batches": reader.num_record_batches}


def check_index_params(path: str, params: dict, cfg: DedupConfig) -> None:
    """An InputError naming the index file when its signatures cannot be compared with this config's."""
    wanted = cfg.index_params()
    for name, value in params.items():
        if name in wanted and wanted[name] != value:
            raise InputError(f"dedup index {path} was built with {name}={value}, but dedup.{name} is {wanted[name]}; "
                             f"signatures are only comparable with the same {', '.join(wanted)}")


def _read_table(path: Path, info: dict, num_perm: int | None) -> pa.Table:
    if num_perm is not None and info["params"]["num_perm"] != num_perm:
        raise InputError(f"dedup index {path} has {info['params']['num_perm']} MinHash values per document, "
                         f"expected {num_perm} (like the other parts)")
    return open_index(path).read_all()


def merge_dedup_index(parts: list[Path], parent: Path | None, out: Path, cfg: DedupConfig | None = None) -> dict:
    """The parent version's entries + the parts', sorted by (doc_id, exact) — a stable sort, so the same entries
    give a byte-identical file — written atomically to `out`. Returns {path (name), rows, sha256}."""
    sources = ([Path(parent)] if parent is not None else []) + [Path(p) for p in parts]
    num_perm = cfg.num_perm if cfg is not None else None
    params = cfg.index_params() if cfg is not None else None
    tables = []
    for path in sources:
        info = index_info(path)
        if cfg is not None:
            check_index_params(str(path), info["params"], cfg)
        table = _read_table(path, info, num_perm)
        num_perm = info["params"]["num_perm"]
        if params is None:
            params = info["params"]
        tables.append(table)
    num_perm = num_perm if num_perm is not None else DedupConfig().num_perm
    schema = index_schema(num_perm, {k: v for k, v in (params or {}).items() if k != "num_perm"})
    if tables:
        merged = pa.concat_tables([t.cast(schema) for t in tables])
        order = pc.sort_indices(merged, sort_keys=[("doc_id", "ascending"), ("exact", "ascending")])
        merged = merged.take(order)
    else:
        merged = schema.empty_table()
    return _write_table(merged, Path(out), schema)
