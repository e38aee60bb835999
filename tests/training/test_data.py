"""Pretraining data: collate, deterministic order, O(1) start at any step, mask variant = epoch % K, and the
tokenizer check."""

import numpy as np
import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import sha256_file
from preprocessing.shards import Instance, ShardSet
from training.data import PretrainBatches, collate


def _tok_sha(run):
    return sha256_file(run / "tokenizer" / "tokenizer.json")


def test_collate_applies_masks_pads_and_segments():
    a = Instance(input_ids=np.array([2, 10, 11, 3, 12, 3], np.uint16), len_a=4, nsp_label=1,
                 mask_positions=np.array([1, 4], np.uint16), mask_tokens=np.array([4, 12], np.int32), doc_id=7)
    b = Instance(input_ids=np.array([2, 20, 3, 21, 3], np.uint16), len_a=3, nsp_label=0,
                 mask_positions=np.array([3], np.uint16), mask_tokens=np.array([4], np.int32), doc_id=8)
    out = collate([a, b], pad_id=0, max_predictions=3)
    assert out["input_ids"].tolist() == [[2, 4, 11, 3, 12, 3], [2, 20, 3, 4, 3, 0]]
    assert out["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]]
    assert out["masked_positions"].tolist() == [[1, 4, 0], [3, 0, 0]]
    assert out["masked_labels"].tolist() == [[10, 12, -100], [21, -100, -100]]
    assert out["nsp_labels"].tolist() == [1, 0]
    assert all(t.dtype == torch.int64 for t in out.values())
    assert a.input_ids.tolist() == [2, 10, 11, 3, 12, 3]  # the shard's data is not modified
    with pytest.raises(ContractError, match="document 7 has 2 masked positions"):
        collate([a], pad_id=0, max_predictions=1)


def test_order_is_deterministic_and_each_epoch_is_a_permutation(shared_tiny_run):
    one = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=32, seed=5)
    two = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=32, seed=5)
    other = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=32, seed=6)
    spe = one.steps_per_epoch
    assert spe == 256 // 32
    for step in range(0, 3 * spe, 3):
        b1, b2 = one.batch(step), two.batch(step)
        assert all(torch.equal(b1[k], b2[k]) for k in b1)
    epoch0 = np.concatenate([one.rows_of(s) for s in range(spe)])
    epoch1 = np.concatenate([one.rows_of(s) for s in range(spe, 2 * spe)])
    assert sorted(epoch0.tolist()) == list(range(256)) == sorted(epoch1.tolist())
    assert not np.array_equal(epoch0, epoch1)  # reshuffled every epoch
    assert not np.array_equal(epoch0, np.concatenate([other.rows_of(s) for s in range(spe)]))  # seed matters


def test_start_at_any_step_without_replaying(shared_tiny_run, monkeypatch):
    sequential = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=16, seed=1)
    expected = {}
    it = sequential.iter_from(0)
    for step in range(40):
        expected[step] = next(it)
    fresh = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=16, seed=1)
    reads = []
    original = ShardSet.instance
    monkeypatch.setattr(ShardSet, "instance", lambda self, i, v=0: reads.append(i) or original(self, i, v))
    got = fresh.batch(37)
    assert all(torch.equal(got[k], expected[37][k]) for k in got)
    assert len(reads) == 16  # only the rows of that one batch were read
    reads.clear()
    fresh.batch(1_000_003)  # far beyond anything trained: still one batch of reads
    assert len(reads) == 16
    pos = fresh.position(1_000_003)
    assert (pos.epoch, pos.batch_in_epoch) == divmod(1_000_003, fresh.steps_per_epoch)


def test_mask_variant_is_epoch_mod_k(shared_tiny_run):
    batches = PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=32, seed=3)
    shards = batches.shards
    assert batches.variants == 3
    for epoch in range(5):
        step = epoch * batches.steps_per_epoch + 2
        assert batches.position(step).variant == epoch % 3
        batch = batches.batch(step)
        for i, row in enumerate(batches.rows_of(step)):
            inst = shards.instance(int(row), epoch % 3)
            n = len(inst.mask_positions)
            assert batch["masked_positions"][i, :n].tolist() == inst.mask_positions.tolist()
            assert batch["masked_labels"][i, :n].tolist() == inst.input_ids[inst.mask_positions].tolist()
    # the variants really differ, so the check above could fail
    inst0, inst1 = shards.instance(0, 0), shards.instance(0, 1)
    assert inst0.mask_positions.tolist() != inst1.mask_positions.tolist()


def test_tokenizer_mismatch_is_refused(shared_tiny_run):
    with pytest.raises(ContractError, match="tokenizer sha256"):
        PretrainBatches.open(shared_tiny_run / "shards", "0" * 64, batch_size=8, seed=0)


def test_split_smaller_than_a_batch_is_a_clear_error(shared_tiny_run):
    with pytest.raises(ConfigError, match="fewer than one batch"):
        PretrainBatches.open(shared_tiny_run / "shards", _tok_sha(shared_tiny_run), batch_size=1000, seed=0)


def test_length_buckets_group_rows_pad_to_a_bucket_and_keep_the_epoch_contract(shared_tiny_run):
    """pretrain.length_buckets: every batch is padded to one of the buckets, most batches hold rows of one bucket
    (less padding than random batches), each row is still read once per epoch, the order depends only on (seed,
    epoch), any step's batch is found directly, and ranks together read what one process reads."""
    buckets = [16, 24, 32]
    sha = _tok_sha(shared_tiny_run)
    one = PretrainBatches.open(shared_tiny_run / "shards", sha, batch_size=8, seed=5, length_buckets=buckets,
                               bucket_window=8)
    plain = PretrainBatches.open(shared_tiny_run / "shards", sha, batch_size=8, seed=5)
    spe = one.steps_per_epoch
    lengths = one.shards.lengths()
    for epoch in range(2):
        rows = np.concatenate([one.rows_of(s) for s in range(epoch * spe, (epoch + 1) * spe)])
        assert sorted(rows.tolist()) == list(range(len(one.shards)))
    widths = [one.batch(s)["input_ids"].shape[1] for s in range(spe)]
    assert set(widths) <= set(buckets)
    padding = sum(w * 8 - lengths[one.rows_of(s)].sum() for s, w in enumerate(widths))
    plain_padding = sum(plain.batch(s)["input_ids"].shape[1] * 8 - lengths[plain.rows_of(s)].sum() for s in range(spe))
    assert padding < plain_padding, (padding, plain_padding)
    pure = {int(np.searchsorted(buckets, lengths[one.rows_of(s)]).min() == np.searchsorted(buckets, lengths[one.rows_of(s)]).max())
            for s in range(spe)}
    assert 1 in pure  # some batches hold a single bucket
    fresh = PretrainBatches.open(shared_tiny_run / "shards", sha, batch_size=8, seed=5, length_buckets=buckets,
                                 bucket_window=8)
    assert all(torch.equal(fresh.batch(s)[k], one.batch(s)[k]) for s in (spe + 5, 3, spe * 3 + 1) for k in one.batch(s))
    halves = [PretrainBatches.open(shared_tiny_run / "shards", sha, batch_size=8, seed=5, length_buckets=buckets,
                                   bucket_window=8, rank=r, world_size=2) for r in range(2)]
    for s in (0, 7):
        assert np.array_equal(np.concatenate([h.local_rows_of(s) for h in halves]), one.rows_of(s))
        assert {h.batch(s)["input_ids"].shape[1] for h in halves} == {one.batch(s)["input_ids"].shape[1]}
    with pytest.raises(ConfigError, match="longer than the largest of pretrain.length_buckets"):
        PretrainBatches.open(shared_tiny_run / "shards", sha, batch_size=8, seed=5, length_buckets=[8, 16])
