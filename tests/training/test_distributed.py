"""Data parallelism: each rank's slice of the global batch, every sample once per epoch across ranks, a clear
error when the world size does not divide the batch, and 2 gloo processes x B training exactly like 1 x 2B."""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.pretrain import pretrain

from .ranks import launch_ranks

# no dropout: the ranks' dropout masks over B rows cannot be the one process's masks over 2B rows
NO_DROPOUT = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                         hidden_dropout=0.0, attention_dropout=0.0)


def _open(run, batch_size, rank=0, world_size=1, seed=7):
    return PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), batch_size, seed,
                                rank=rank, world_size=world_size)


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_split_each_global_batch_and_see_every_sample_once_per_epoch(shared_tiny_run, world):
    whole = _open(shared_tiny_run, 32)
    ranks = [_open(shared_tiny_run, 32, r, world) for r in range(world)]
    assert all(r.steps_per_epoch == whole.steps_per_epoch for r in ranks)  # a step is a global batch
    for epoch in range(2):
        steps = range(epoch * whole.steps_per_epoch, (epoch + 1) * whole.steps_per_epoch)
        for step in steps:  # the ranks' slices, in rank order, are the one-process batch
            assert np.array_equal(np.concatenate([r.local_rows_of(step) for r in ranks]), whole.rows_of(step))
        seen = np.concatenate([r.local_rows_of(s) for r in ranks for s in steps])
        assert sorted(seen.tolist()) == list(range(whole.rows))  # each of the 256 rows exactly once
    step = 3
    local = ranks[1].batch(step)
    assert local["input_ids"].shape[0] == 32 // world
    mine = ranks[1].local_rows_of(step)
    assert local["nsp_labels"].tolist() == [whole.shards.instance(int(r), 0).nsp_label for r in mine]


def test_world_size_that_does_not_divide_the_batch_is_refused(shared_tiny_run):
    with pytest.raises(ConfigError, match=r"batch_size=30 .*not divisible by the world size 4.*multiple of 4 "
                                          r"\(e.g. 28 or 32\)"):
        _open(shared_tiny_run, 30, rank=0, world_size=4)
    with pytest.raises(ConfigError, match="rank 2 is not in"):
        _open(shared_tiny_run, 32, rank=2, world_size=2)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_two_gloo_processes_of_batch_b_train_like_one_process_of_batch_2b(run_factory):
    # fixed-length instances: every row has the same number of masked tokens, so each rank's mean MLM loss over
    # its B rows, averaged by DDP, is the one process's mean over 2B rows (see training/distributed.py)
    one_run, two_run = (run_factory(name, min_seq_len=32, max_seq_len=32) for name in ("one", "two"))
    cfg = PretrainConfig(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3, log_every=1, save_every=4,
                         seed=11, num_threads=1, device="cpu")
    single = pretrain(NO_DROPOUT, cfg, one_run)
    summaries = launch_ranks(NO_DROPOUT, cfg, two_run, world=2, timeout=600)  # a bound for a hang
    assert [s["world_size"] for s in summaries] == [2, 2] and single["world_size"] == 1

    one, two = _metrics(one_run), _metrics(two_run)  # rank 0 alone wrote metrics.jsonl
    assert [m["step"] for m in two] == list(range(1, 9))
    for a, b in zip(one, two):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]  # the same samples, the same schedule
        assert b["mlm_acc"] == a["mlm_acc"]
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)
    assert two[-1]["loss"] < two[0]["loss"]  # it trained (the comparison is not between two idle runs)
    final_one = load_file(str(one_run / "pretrain/final/model.safetensors"))
    final_two = load_file(str(two_run / "pretrain/final/model.safetensors"))
    assert all(torch.allclose(final_one[k], final_two[k], rtol=1e-4, atol=1e-5) for k in final_one)
    assert (two_run / "pretrain/checkpoints/step-4/training_state.pt").is_file()  # rank 0 saved between barriers


def test_ranks_started_with_different_settings_are_refused_in_one_line(run_factory):
    # on several nodes each node starts its own command: a --set given on one node only used to train rank 1 under
    # another learning rate without a word (the replicas drift apart: DDP averages the gradients, not the updates),
    # and another max_steps or save_every left the ranks in different collectives until gloo's 30-min timeout
    run = run_factory("mismatch", max_seq_len=24, min_seq_len=24, train_rows=32, heldout_rows=8)
    tiny = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=8, max_steps=2, warmup_steps=1, log_every=1, save_every=2, num_threads=3,
                         device="cpu")
    other = cfg.model_copy(update={"learning_rate": 5e-4, "num_threads": 1})  # num_threads: a node's own choice
    with pytest.raises(AssertionError, match=r"ConfigError: the 2 processes of this job were not started with the "
                                             r"same settings: rank 1 \(host [^)]+\) differs from rank 0 \(host [^)]+\) "
                                             r"in pretrain.learning_rate: rank 0 0.0001, rank 1 0.0005\. Start every"):
        launch_ranks(tiny, cfg, run, world=2, timeout=300, rank_cfgs={1: other})  # timeout: a bound for a hang
    assert not (run / "pretrain/checkpoints").exists()  # refused before a step was trained


def test_a_node_that_cannot_warm_start_is_named_on_every_rank(run_factory, tmp_path):
    # pretrain.init_from is a node's own path (each node may keep the model elsewhere): a node without it raised
    # alone at the warm start, and the other ranks stopped in DDP's constructor with gloo's "Connection closed by
    # peer" traceback, which does not say why
    run = run_factory("warm", max_seq_len=24, min_seq_len=24, train_rows=32, heldout_rows=8)
    tiny = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=8, max_steps=1, warmup_steps=1, log_every=1, save_every=1, device="cpu")
    pretrain(tiny, cfg, run)  # the model to warm-start from, trained on the same tokenizer
    source = tmp_path / "source"
    (run / "pretrain/final").rename(source)
    shutil.rmtree(run / "pretrain")
    ranks = {0: cfg.model_copy(update={"init_from": str(source)}),
             1: cfg.model_copy(update={"init_from": str(tmp_path / "not-on-this-node")})}
    with pytest.raises(AssertionError, match=r"rank 0 failed:[\s\S]*ContractError: rank 1 \(host [^)]+\) cannot "
                                             r"warm-start from pretrain.init_from: no config.json in [^ ]*not-on-this-"
                                             r"node"):
        launch_ranks(tiny, cfg, run, world=2, timeout=120, rank_cfgs=ranks, wait_all=True)  # timeout: bounds a hang
    assert not (run / "pretrain/checkpoints").exists()


def test_the_launcher_retries_a_port_taken_before_rank_0_binds_it(run_factory, monkeypatch):
    # tests/training/ranks.py: free_port() lets the port go before rank 0's store binds it; a launch that loses it
    # (here: a port held open by this test) starts again on another, and a real failure still fails
    import socket

    from . import ranks

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    offered, free_port = [], ranks.free_port

    def taken_first() -> int:
        offered.append(held.getsockname()[1] if not offered else free_port())
        return offered[-1]

    monkeypatch.setattr(ranks, "free_port", taken_first)
    run = run_factory("ports", max_seq_len=24, min_seq_len=24, train_rows=32, heldout_rows=8)
    tiny = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=8, max_steps=2, warmup_steps=1, log_every=1, save_every=2, num_threads=1,
                         device="cpu")
    try:
        summaries = ranks.launch_ranks(tiny, cfg, run, world=2, timeout=300)
        assert [s["world_size"] for s in summaries] == [2, 2] and len(offered) == 2
        with pytest.raises(AssertionError, match="rank 0 failed"):  # not a port: no retry
            ranks.launch_ranks(tiny, cfg.model_copy(update={"batch_size": 7}), run, world=2, timeout=300)
    finally:
        held.close()
