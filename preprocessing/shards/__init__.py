"""The shard contract between preprocessing and training: Arrow IPC *stream* shards + `manifest.json`, documented in
docs/shards.md. Writers call `write_shard` (rows as dicts) or `write_shard_table` (record batches from flat arrays:
`shard_batch`), or `merge_runs` (a shard merged from sorted runs spilled to disk), and `write_manifest`; readers
call `ShardSet.open`, which validates the manifest, the schema version and (optionally) every shard's sha256 and
the tokenizer's sha256.

- contract.py: the row schema (schema v2; v1 still read), the schema versions, the manifest's models,
  `write_manifest`, `read_manifest`
- writer.py: `write_shard`, `write_shard_table`, `shard_batch`
- merge.py: `spill_part`, `spill_batch_rows`, `merge_runs` (and the merge's memory bounds, set there)
- reader.py: `ShardSet`, `Instance`

This package re-exports their public names, so `from preprocessing.shards import ShardSet` is the way to import them.
"""

from __future__ import annotations

from .contract import (MANIFEST_NAME, SCHEMA_VERSION, SPAN_COLUMN, SPLITS, SUPPORTED_SCHEMA_VERSIONS, V2_COLUMNS,
                       Manifest, ParentInfo, ShardInfo, SourceInfo, SplitInfo, TokenizerInfo, read_manifest,
                       shard_schema, token_type, write_manifest)
from .merge import RunKeys, merge_runs, spill_batch_rows, spill_part
from .reader import Instance, ShardSet
from .writer import shard_batch, write_shard, write_shard_table

__all__ = ["MANIFEST_NAME", "SCHEMA_VERSION", "SPAN_COLUMN", "SPLITS", "SUPPORTED_SCHEMA_VERSIONS", "V2_COLUMNS",
           "Manifest", "ParentInfo", "ShardInfo", "SourceInfo", "SplitInfo", "TokenizerInfo", "read_manifest",
           "shard_schema", "token_type", "write_manifest", "RunKeys", "merge_runs", "spill_batch_rows", "spill_part",
           "Instance", "ShardSet", "shard_batch", "write_shard", "write_shard_table"]
