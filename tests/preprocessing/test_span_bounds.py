"""Span bounds in the shards (column mask_spans, masking policy span): written by the pipeline on a real
(synthetic-dump) corpus, byte-identical on a rerun with another worker count, consistent with the masks and the
masker's own units; made the same way at read time under dynamic masking; absent for other policies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tokenizers import Tokenizer

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker, dynamic_rng, spans_at_read_time
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import SPAN_COLUMN, ShardSet, read_manifest, shard_batch, write_shard_table
from training.data import PretrainBatches, collate


def _run(tmp_path: Path, wiki, name: str, policy: str = "span", dynamic: bool = False, **runner) -> Path:
    dump = tmp_path / "tiny-pages-articles.xml.bz2"
    if not dump.exists():
        wiki.write_dump(dump, wiki.standard_pages())
    cfg = wiki.config(**(runner or {"preset": "in_process", "num_workers": 1}))
    cfg.instances.format = "single-segment"
    cfg.masking.policy = policy
    cfg.masking.dynamic = dynamic
    cfg.masking.max_predictions_per_seq = 8
    run_dir = tmp_path / name
    run_preprocess(wiki.corpus(dump), cfg, run_dir)
    return run_dir


def _runs(positions: list[int]) -> list[int]:
    """Lengths of the maximal runs of consecutive positions (sorted)."""
    lengths: list[int] = []
    for i, p in enumerate(positions):
        if i and p == positions[i - 1] + 1:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def test_span_shards_store_each_span_and_are_deterministic(tmp_path, wiki):
    run = _run(tmp_path, wiki, "a")
    manifest = read_manifest(run / "shards")
    assert manifest.masking["policy"] == "span" and manifest.masking["span_bounds"].startswith(SPAN_COLUMN)
    tokenizer = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    masker = Masker.from_tokenizer(_masking_cfg(manifest), manifest.seed, tokenizer)
    seen = 0
    for split in ("train", "heldout"):
        shards = ShardSet.open(run / "shards", split)
        assert shards.span_bounds
        for i in range(len(shards)):
            for v in range(shards.k):
                inst = shards.instance(i, v)
                positions, spans = inst.mask_positions.tolist(), inst.mask_spans.tolist()
                assert sum(spans) == len(positions) and min(spans) >= 1
                # the policy keeps spans apart, so here (only here) the runs of positions are the spans
                assert spans == _runs(positions)
                # and each is a unit the masker chose: whole words, at most 10 of them
                ids = inst.input_ids.tolist()
                start = 0
                for length in spans:
                    first, last = positions[start], positions[start + length - 1]
                    assert ids[first] not in masker.continuation_ids or ids[first - 1] in masker.special_ids
                    assert last + 1 == len(ids) or ids[last + 1] not in masker.continuation_ids
                    start += length
                seen += len(spans)
    assert seen > 100
    # another worker count and runner: the same bytes (shards and manifest but for the runner record)
    other = _run(tmp_path, wiki, "b", preset="local", num_workers=2)
    for info in manifest.splits["train"].shards + manifest.splits["heldout"].shards:
        assert sha256_file(other / "shards" / info.path) == info.sha256
    assert read_manifest(other / "shards").masking == manifest.masking


def _masking_cfg(manifest) -> MaskingConfig:
    return MaskingConfig(**{k: v for k, v in manifest.masking.items() if k in MaskingConfig.model_fields})


def test_dynamic_span_masking_makes_the_same_bounds_at_read_time(tmp_path, wiki):
    run = _run(tmp_path, wiki, "dyn", dynamic=True)
    manifest = read_manifest(run / "shards")
    shards = ShardSet.open(run / "shards", "train")
    assert shards.k == 0 and shards.span_bounds and "dynamic" in manifest.masking["span_bounds"]
    batches = PretrainBatches(shards, batch_size=8, seed=5, pad_id=0)
    masker = Masker.from_tokenizer(_masking_cfg(manifest), manifest.seed,
                                   Tokenizer.from_file(str(run / "tokenizer/tokenizer.json")))
    for step in (0, batches.steps_per_epoch + 1):  # two epochs: other masks, bounds made the same way
        batch = batches.batch(step)
        epoch = batches.position(step).epoch
        for slot, row in enumerate(batches.rows_of(step).tolist()):
            ids = shards.instance(row).input_ids.tolist()
            positions, _, lengths = spans_at_read_time(masker, ids, epoch, row)
            units = masker.mask_with_spans(ids, dynamic_rng(masker.seed, epoch, row))[2]
            assert lengths == [last - first + 1 for first, last in units]
            n = len(positions)
            assert batch["masked_positions"][slot, :n].tolist() == positions
            left = [first - 1 for first, last in units for _ in range(first, last + 1)]
            right = [last + 1 for first, last in units for _ in range(first, last + 1)]
            assert batch["span_left"][slot, :n].tolist() == left
            assert batch["span_right"][slot, :n].tolist() == right


def test_other_policies_write_no_span_column(tmp_path, wiki):
    run = _run(tmp_path, wiki, "ww", policy="whole-word")
    manifest = read_manifest(run / "shards")
    assert "span_bounds" not in manifest.masking
    shards = ShardSet.open(run / "shards", "train")
    assert not shards.span_bounds and shards.instance(0).mask_spans is None
    with pa.memory_map(str(run / "shards" / manifest.splits["train"].shards[0].path)) as source:
        assert SPAN_COLUMN not in pa.ipc.open_stream(source).schema.names
    assert "span_left" not in collate([shards.instance(0)], 0, 8)


def _shard(path: Path, spans: list[int], positions: list[int]) -> Path:
    ids = np.array([2, 10, 11, 12, 13, 14, 15, 3], np.int64)
    batch = shard_batch(100, np.array([0, len(ids)]), ids, np.array([len(ids)]), np.zeros(1),
                        np.array([len(positions)]), np.array(positions), np.full(len(positions), 4), 1, np.array([7]),
                        np.zeros(1), np.zeros(1), np.zeros(1), np.array([len(spans)]), np.array(spans))
    write_shard_table(path, pa.Table.from_batches([batch]))
    return path


@pytest.mark.parametrize("spans, positions, message", [([2, 1], [2, 3, 5, 6], "do not add up"),
                                                       ([3], [2, 3, 5], "not consecutive"),
                                                       ([0, 2], [2, 3], "do not add up")])
def test_inconsistent_span_bounds_are_refused(tmp_path, spans, positions, message):
    from preprocessing.shards.reader import _load_shard

    assert _load_shard(_shard(tmp_path / "ok.arrow", [2, 2], [2, 3, 4, 5]), 1).span_lengths.tolist() == [2, 2]
    with pytest.raises(ContractError, match=message):
        _load_shard(_shard(tmp_path / "bad.arrow", spans, positions), 1)
