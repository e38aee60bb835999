"""Reading shards: `ShardSet.open` checks a split against its manifest (schema version, the tokenizer's sha256 and,
optionally, every shard's sha256; a remote run's shards come through the shard cache) and memory-maps its shards as
flat numpy arrays; `ShardSet.instance` is one row as an `Instance`, by global row index."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa

from bertfactory import run_location, storage
from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from bertfactory.shard_cache import ShardCache

from .contract import MANIFEST_NAME, SPAN_COLUMN, SUPPORTED_SCHEMA_VERSIONS, V2_COLUMNS, Manifest, read_manifest


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
