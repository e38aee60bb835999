"""preprocessing.shards: the shard writers. merge_runs (sorted runs spilled to disk, merged by key a few rows at a
time) writes the same rows in the same order as sorting everything in memory, for empty, uneven and tied runs;
shard_batch builds the schema's columns from flat arrays as write_shard does from row dicts."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from preprocessing.shards import merge as shards
from preprocessing.instance_pipeline import WriteShardFn, keys_path, spill_dir
from preprocessing.shards import merge_runs, shard_batch, shard_schema, spill_part, write_shard

VOCAB = 1000


def _batch(rng, n: int, variants: int = 2) -> pa.RecordBatch:
    lengths = rng.integers(3, 30, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    counts = rng.integers(0, 4, size=n * variants)
    masked = int(counts.sum())
    return shard_batch(VOCAB, offsets, rng.integers(5, VOCAB, size=offsets[-1]), lengths, rng.integers(0, 2, size=n),
                       counts, rng.integers(0, 3, size=masked), rng.integers(0, VOCAB, size=masked), variants,
                       rng.integers(0, 2**63, size=n).astype(np.uint64), np.zeros(n), np.ones(n), np.zeros(n))


def _read(path) -> pa.Table:
    with pa.OSFile(str(path)) as f:
        return pa.ipc.open_stream(f).read_all()


def test_merge_runs_equals_one_sort_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    runs, tables, all_keys = [], [], []
    for run, sizes in enumerate([(700, 300), (1,), (), (257, 256, 5)]):
        parts = [_batch(rng, n) for n in sizes]
        n = sum(sizes)
        keys = np.stack([rng.integers(0, 50, size=n), rng.integers(0, 2**63, size=n), np.arange(n)], 1).astype(np.uint64)
        order = np.lexsort(keys.T[::-1])  # small first keys: ties between runs, broken by the second
        keys = keys[order]
        table = (pa.Table.from_batches(parts, schema=shard_schema(VOCAB)).take(order).combine_chunks()
                 if parts else shard_schema(VOCAB).empty_table())
        paths = [spill_part(tmp_path / f"{run}-{i}.arrow", b) for i, b in enumerate(table.to_batches(max_chunksize=400))]
        runs.append((keys, paths))
        tables.append(table)
        all_keys.append(keys)
    info = merge_runs(tmp_path / "shard.arrow", shard_schema(VOCAB), runs, batch_rows=300)
    expected = pa.concat_tables(tables).take(np.lexsort(np.concatenate(all_keys).T[::-1]))
    got = _read(tmp_path / "shard.arrow")
    assert info.rows == got.num_rows == 1519
    assert got.equals(expected.combine_chunks())
    assert max(b.num_rows for b in got.to_batches()) == 300


def test_an_empty_merge_is_an_empty_shard(tmp_path):
    merge_runs(tmp_path / "a.arrow", shard_schema(VOCAB), [], 64)
    write_shard(tmp_path / "b.arrow", [], VOCAB, 64)
    assert (tmp_path / "a.arrow").read_bytes() == (tmp_path / "b.arrow").read_bytes()


def test_shard_batch_matches_row_dicts(tmp_path):
    rng = np.random.default_rng(4)
    batch = _batch(rng, 50, variants=3)
    rows = pa.Table.from_batches([batch]).to_pylist()
    write_shard(tmp_path / "rows.arrow", rows, VOCAB, 64)
    assert _read(tmp_path / "rows.arrow").equals(pa.Table.from_batches([batch]))


def test_a_retried_write_shards_bundle_finds_its_parts_and_writes_the_same_shard(tmp_path):
    # Dataflow/Flink retry a failed bundle: WriteShardFn must not consume its spill files (the driver removes them)
    rng = np.random.default_rng(5)
    parts = []
    for pre in range(2):
        batch = _batch(rng, 40)
        keys = np.stack([np.full(40, pre), np.arange(40), np.arange(40)], 1).astype(np.uint64)
        path = Path(spill_dir(tmp_path, "train", 0)) / f"{pre}-0.arrow"
        path.parent.mkdir(parents=True, exist_ok=True)
        spill_part(path, batch)
        np.save(keys_path(path), keys)  # DealAndMask writes a part's keys beside it
        parts.append((pre, 0, str(path), 40, (100, 10, 1)))
    fn = WriteShardFn(str(tmp_path), VOCAB, 64)
    first = json.loads(next(iter(fn.process((("train", 0), parts)))))
    second = json.loads(next(iter(fn.process((("train", 0), parts)))))
    assert first == second and first["rows"] == 80
    assert all(Path(p).exists() and Path(keys_path(p)).exists() for _, _, p, _, _ in parts)


def _reference_shard(path, tables, keys, batch_rows: int) -> bytes:
    """The merge done by one stable sort of every key in memory (ties in run order), written batch by batch."""
    everything = pa.concat_tables(tables)
    order = np.lexsort(np.concatenate(keys).T[::-1]) if len(everything) else np.empty(0, dtype=np.int64)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, shard_schema(VOCAB)) as writer:
        if not len(order):
            writer.write_batch(pa.RecordBatch.from_pylist([], shard_schema(VOCAB)))
        for start in range(0, len(order), batch_rows):
            for batch in everything.take(order[start:start + batch_rows]).combine_chunks().to_batches():
                writer.write_batch(batch)
    return Path(path).read_bytes()


@pytest.mark.parametrize("key_rows, min_block", [(1 << 18, 256), (40, 1), (7, 3)])
def test_a_blockwise_merge_of_many_runs_writes_the_bytes_of_one_sort(tmp_path, monkeypatch, key_rows, min_block):
    # many runs, empty ones, keys with ties inside and across runs, key files of several parts; blocks of keys from
    # one row up: the merge must never emit a row before an equal key of an earlier run
    monkeypatch.setattr(shards, "MERGE_KEY_ROWS", key_rows)
    monkeypatch.setattr(shards, "MIN_KEY_BLOCK_ROWS", min_block)
    largest_read = []
    read = shards._RunKeyReader.read
    monkeypatch.setattr(shards._RunKeyReader, "read", lambda self, n: largest_read.append(n) or read(self, n))
    rng = np.random.default_rng(11)
    runs, tables, all_keys = [], [], []
    for run in range(23):
        n = 0 if run % 5 == 2 else int(rng.integers(1, 120))
        keys = np.stack([rng.integers(0, 4, size=n), rng.integers(0, 3, size=n), rng.integers(0, 2, size=n)], 1)
        keys = keys[np.lexsort(keys.T[::-1])].astype(np.uint64)
        table = pa.Table.from_batches([_batch(rng, n)]) if n else shard_schema(VOCAB).empty_table()
        cuts = sorted({0, n, *rng.integers(0, n + 1, size=2).tolist()})
        key_files = []
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            np.save(tmp_path / f"{run}-{i}.keys.npy", keys[a:b])
            key_files.append((tmp_path / f"{run}-{i}.keys.npy", b - a))
        paths = [spill_part(tmp_path / f"{run}-{i}.arrow", b) for i, b in enumerate(table.to_batches(max_chunksize=50))]
        # a run's keys given as files or, for every third run, as an array
        runs.append((keys if run % 3 == 0 else key_files, paths))
        tables.append(table)
        all_keys.append(keys)
    info = merge_runs(tmp_path / "shard.arrow", shard_schema(VOCAB), runs, batch_rows=64)
    assert info.rows == sum(map(len, all_keys))
    assert (tmp_path / "shard.arrow").read_bytes() == _reference_shard(tmp_path / "ref.arrow", tables, all_keys, 64)
    assert max(largest_read) == max(min_block, key_rows // len(runs))


def test_spilled_batches_shrink_with_the_runs_and_leave_the_shard_unchanged(tmp_path):
    # the merge holds one spilled batch per run: about SPILL_BUDGET_ROWS rows in all, within the bounds
    assert shards.spill_batch_rows(1) == shards.SPILL_BATCH_ROWS
    assert shards.spill_batch_rows(320) == shards.SPILL_BUDGET_ROWS // 320
    assert shards.spill_batch_rows(10**6) == shards.MIN_SPILL_BATCH_ROWS
    rng = np.random.default_rng(12)
    batches = [_batch(rng, n) for n in (90, 0, 41)]
    keys = [np.stack([rng.integers(0, 3, size=len(b))] * 3, 1).astype(np.uint64) for b in batches]
    keys = [k[np.lexsort(k.T[::-1])] for k in keys]
    written = []
    for batch_rows in (7, 256):
        runs = [(k, [spill_part(tmp_path / f"{batch_rows}-{run}.arrow", b, batch_rows)])
                for run, (k, b) in enumerate(zip(keys, batches))]
        with pa.OSFile(str(runs[0][1][0])) as f:
            assert max(b.num_rows for b in pa.ipc.open_stream(f)) == min(batch_rows, 90)
        merge_runs(tmp_path / f"{batch_rows}.arrow", shard_schema(VOCAB), runs, batch_rows=32)
        written.append((tmp_path / f"{batch_rows}.arrow").read_bytes())
    assert written[0] == written[1]
