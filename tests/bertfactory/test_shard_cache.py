"""bertfactory.shard_cache against a real S3 API (moto in server mode on 127.0.0.1): hits and misses, sha256
verification, LRU eviction under a limit (pinned files kept), prefetching fetch_all, the limit's parsing, caches
of two ranks; and ShardSet.open reading a shard set from a bucket, by URL and from a run's working copy.

Run: `.venv/bin/python -m pytest -q tests/bertfactory/test_shard_cache.py`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bertfactory import storage
from bertfactory.errors import ConfigError, ContractError
from bertfactory.run_location import WorkingCopy, resolve_run_dir
from bertfactory.shard_cache import ENV_LIMIT, ShardCache, default_limit, default_root, parse_size
from preprocessing.shards import ShardSet
from tests.storage_servers import s3_bucket
from tests.training.conftest import make_run


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("shards") as url:
        yield url


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("BERTFACTORY_SHARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(ENV_LIMIT, raising=False)
    return tmp_path / "cache"


_counter = iter(range(10**6))


def put(bucket: str, data: bytes) -> tuple[str, str]:
    """A fresh object holding `data`: (its URL, sha256 of `data`)."""
    url = f"{bucket}/objects/{next(_counter)}.arrow"
    storage.write_bytes(url, data)
    return url, hashlib.sha256(data).hexdigest()


def blob(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def cached(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*") if p.is_file() and "manifests" not in p.parts}


def test_miss_then_hit_touches_and_counts(bucket, cache_dir):
    data = blob(3000, 1)
    url, sha = put(bucket, data)
    cache = ShardCache()
    path = cache.fetch(url, sha)
    assert path == cache_dir / sha[:2] / f"{sha}.arrow" and path.read_bytes() == data
    assert vars(cache.stats) == {"hits": 0, "misses": 1, "evictions": 0, "bytes_downloaded": 3000}
    os.utime(path, (1_000_000, 1_000_000))
    storage.delete(url)  # a hit must not go to the bucket
    assert cache.fetch(url, sha) == path
    assert path.stat().st_mtime > 1_000_000  # touched: the LRU clock
    assert vars(cache.stats) == {"hits": 1, "misses": 1, "evictions": 0, "bytes_downloaded": 3000}
    # another run listing the same bytes under another URL shares the file
    other, _ = put(bucket, data)
    assert cache.fetch(other, sha) == path and cache.stats.hits == 2


def test_sha_mismatch_and_missing_object_leave_nothing(bucket, cache_dir):
    url, sha = put(bucket, blob(2000, 2))
    wrong = hashlib.sha256(b"other").hexdigest()
    cache = ShardCache()
    with pytest.raises(storage.StorageError, match=f"expected {wrong}"):
        cache.fetch(url, wrong)
    with pytest.raises(storage.StorageError, match="not found"):
        cache.fetch(f"{bucket}/objects/none.arrow", sha)
    with pytest.raises(ContractError, match="not 64 hex digits"):
        cache.fetch(url, "../../etc/passwd")
    assert cached(cache_dir) == set()  # no final name, no temporary file
    assert cache.stats.misses == 0


def test_a_cache_directory_this_node_cannot_use_is_one_line_naming_it(bucket, tmp_path, monkeypatch):
    # one node of a torchrun job whose BERTFACTORY_SHARD_CACHE is not a directory it can write: its rank said only
    # "error: [Errno 20] Not a directory" (no path, no variable) while the other node's rank lost its peer
    url, sha = put(bucket, blob(1000, 7))
    (tmp_path / "a-file").write_text("not a directory")
    root = tmp_path / "a-file" / "shards"
    monkeypatch.setenv("BERTFACTORY_SHARD_CACHE", str(root))
    message = (rf"the shard cache {re.escape(str(root))} \(BERTFACTORY_SHARD_CACHE\) cannot be used on this machine: "
               r"Not a directory.*; set BERTFACTORY_SHARD_CACHE to a writable directory")
    with pytest.raises(storage.StorageError, match=message):
        ShardCache().fetch(url, sha)
    with pytest.raises(storage.StorageError, match=message):  # as ShardSet reads them: at the item's turn
        list(ShardCache().fetch_all([(url, sha, 1000)]))


def test_eviction_is_lru_and_keeps_the_pinned(bucket, cache_dir, caplog):
    (a, sa), (b, sb), (c, sc) = (put(bucket, blob(1000, 10 + i)) for i in range(3))
    cache = ShardCache(limit_bytes=2500)
    pa_, pb = cache.fetch(a, sa), cache.fetch(b, sb)
    os.utime(pa_, (1_000, 1_000))
    os.utime(pb, (2_000, 2_000))
    cache.fetch(a, sa)  # a used again: b is now the least recently used
    pc = cache.fetch(c, sc)
    assert cached(cache_dir) == {pa_.name, pc.name}
    assert cache.stats.evictions == 1
    # a limit below one shard: the shard just fetched is kept (warned once), the others go
    tiny = ShardCache(limit_bytes=10)
    with caplog.at_level(logging.WARNING, logger="bertfactory"):
        assert tiny.fetch(b, sb).is_file()
        assert cached(cache_dir) == {pb.name}
        tiny.fetch(c, sc)
        assert cached(cache_dir) == {pc.name}
    assert len([r for r in caplog.records if "bigger than the shard cache limit" in r.message]) == 1


def test_fetch_all_yields_in_order_and_prefetches(bucket, cache_dir, caplog):
    datas = [blob(1500 + i, 20 + i) for i in range(5)]
    items = [(*put(bucket, d), None) for d in datas]
    # a limit below one shard: only pinning keeps what is downloaded ahead and what the consumer holds
    cache = ShardCache(limit_bytes=100)
    names = [f"{sha}.arrow" for _, sha, _ in items]
    seen = []
    with caplog.at_level(logging.INFO, logger="bertfactory"):
        for i, path in enumerate(cache.fetch_all(items, ahead=2)):
            # this one and the next two (prefetched, not further); older ones go as later downloads evict them
            start = min(i, len(items) - 3)
            want = set(names[start:start + 3])
            deadline = time.monotonic() + 120  # a bound for a hang: the prefetch thread's downloads are waited for
            while want != cached(cache_dir) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert cached(cache_dir) == want
            seen.append(path.read_bytes())
    assert seen == datas
    # once the iteration ends nothing is pinned and the cache settles within its limit: the last three go too
    assert cached(cache_dir) == set()
    assert cache.stats.misses == 5 and cache.stats.evictions == 5
    summary = [r.message for r in caplog.records if r.levelno == logging.INFO and "shard cache" in r.message]
    assert len(summary) == 1 and "5 shards, 0 hits, 5 misses" in summary[0] and "5 evictions" in summary[0]


def test_fetch_all_raises_at_the_failing_items_turn(bucket, cache_dir):
    items = [(*put(bucket, blob(500, 30 + i)), None) for i in range(3)]
    items[1] = (items[1][0], hashlib.sha256(b"x").hexdigest(), None)
    got = ShardCache().fetch_all(items, ahead=2)
    assert next(got).read_bytes() == storage.read_bytes(items[0][0])
    with pytest.raises(storage.StorageError, match=re.escape(items[1][0])):
        next(got)


def test_limit_parsing(cache_dir, tmp_path, monkeypatch):
    assert parse_size("1048576") == 2**20
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1.5GiB") == 3 * 2**29
    assert parse_size(" 20 g ") == 20 * 2**30
    for bad in ("", "lots", "-1", "2 parsecs", "1e9"):
        with pytest.raises(ConfigError, match=ENV_LIMIT):
            parse_size(bad)
    assert default_limit() is None and ShardCache().limit_bytes is None
    monkeypatch.setenv(ENV_LIMIT, "3KiB")
    assert ShardCache().limit_bytes == 3072
    monkeypatch.setenv(ENV_LIMIT, "three")
    with pytest.raises(ConfigError, match=f"{ENV_LIMIT}='three'"):
        ShardCache()
    assert default_root() == cache_dir
    monkeypatch.delenv("BERTFACTORY_SHARD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "xdg" / "bertfactory" / "shards"


def test_two_ranks_fetch_the_same_shard(bucket, tmp_path):
    data = blob(200_000, 40)
    url, sha = put(bucket, data)
    # ranks on two nodes (a cache each), then four ranks of one node sharing one directory, all at once
    caches = [ShardCache(tmp_path / "node0"), ShardCache(tmp_path / "node1")] + \
        [ShardCache(tmp_path / "shared", limit_bytes=10**6) for _ in range(4)]
    paths, errors = [None] * len(caches), []

    def rank(i):
        try:
            paths[i] = caches[i].fetch(url, sha)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(caches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(p.read_bytes() == data for p in paths)
    assert len({paths[0], paths[1], paths[2]}) == 3 and len(set(paths[2:])) == 1
    assert cached(tmp_path / "shared") == {f"{sha}.arrow"}  # no temporary file left
    # a shard evicted by another rank between fetch and open: fetching again brings it back
    paths[2].unlink()
    assert caches[3].fetch(url, sha).read_bytes() == data


def _rows(shards: ShardSet) -> list[tuple]:
    return [(i.input_ids.tolist(), i.len_a, i.nsp_label, i.mask_positions.tolist(), i.mask_tokens.tolist(), i.doc_id,
             i.lang_a, i.lang_b, i.segment_index) for i in shards]


def test_shard_set_opens_from_a_bucket_and_a_working_copy(bucket, cache_dir, tmp_path, monkeypatch):
    run = make_run(tmp_path / "local", train_rows=24, heldout_rows=6, shards=3)
    shard_dir = run / "shards"
    for path in sorted(p for p in shard_dir.rglob("*") if p.is_file()):
        storage.upload_file(path, f"{bucket}/x/shards/{path.relative_to(shard_dir).as_posix()}")
    local = {split: ShardSet.open(shard_dir, split) for split in ("train", "heldout")}

    by_url = {split: ShardSet.open(f"{bucket}/x/shards", split) for split in ("train", "heldout")}
    for split in local:
        assert len(by_url[split]) == len(local[split]) > 0
        assert _rows(by_url[split]) == _rows(local[split])
        assert by_url[split].manifest == local[split].manifest
    assert len(cached(cache_dir)) == 6  # every shard of both splits, content-addressed

    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    work = resolve_run_dir(f"{bucket}/x")
    WorkingCopy(work, f"{bucket}/x").pull(["shards/manifest.json"])
    assert not (work / "shards" / "train").exists()
    # the cache is shared: delete the objects, and the working copy still opens from the cached files
    storage.delete(f"{bucket}/x/shards/train", recursive=True)
    from_copy = ShardSet.open(work / "shards", "train")
    assert _rows(from_copy) == _rows(local["train"])
    assert not (work / "shards" / "train").exists()  # shards are not pulled into the working copy

    with pytest.raises(ContractError, match="no shard manifest at s3://shards/nothing/manifest.json"):
        ShardSet.open(f"{bucket}/nothing")
    # an ordinary local run keeps its own error for a missing shard
    (shard_dir / "train" / "part-00001.arrow").unlink()
    with pytest.raises(ContractError, match=r"shard .*/part-00001.arrow listed in the manifest is missing"):
        ShardSet.open(shard_dir, "train")
