"""The shard contract between preprocessing and training (docs/shards.md): the row schema of an Arrow IPC *stream*
shard, the schema versions this bertfactory reads, and `manifest.json` (its models; `write_manifest` writes it,
`read_manifest` reads and validates it).

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

from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_json, read_json_file

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
