"""training/prefetch.py and pretrain.loader_workers: batches built ahead by worker threads are exactly the batches
the loop would build (in step order, across epoch boundaries, whatever the number of workers), a build error
reaches the trainer at its step, and a run with workers writes the same metrics as one without. Plus the world-size
errors of the loader, which name the fix."""

import json

import pytest
import torch

from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.distributed import DistContext
from training.prefetch import per_thread, prefetch_batches
from training.pretrain import pretrain

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _batches(run, batch_size=16):
    from bertfactory.io import sha256_file

    return PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), batch_size, seed=7)


@pytest.mark.parametrize("workers", [1, 3])
def test_prefetched_batches_equal_the_loop_batches(shared_tiny_run, workers):
    batches = _batches(shared_tiny_run)
    start, end = batches.steps_per_epoch - 3, 2 * batches.steps_per_epoch + 2  # crosses two epoch boundaries
    expected = [batches.batch(step) for step in range(start, end)]
    got = list(prefetch_batches(per_thread(batches, "batch"), start, workers, end_step=end))
    assert len(got) == len(expected)
    for step, (a, b) in enumerate(zip(expected, got), start):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), step


def test_a_build_error_is_raised_at_its_step():
    def build(step):
        if step == 5:
            raise ValueError("row 5 is broken")
        return step

    source = prefetch_batches(build, 2, workers=2)
    assert [next(source) for _ in range(3)] == [2, 3, 4]
    with pytest.raises(ValueError, match="row 5 is broken"):
        next(source)
    source.close()


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="workers must be >= 0"):
        next(prefetch_batches(lambda s: s, 0, workers=-1))


def test_a_run_with_workers_logs_the_same_metrics(run_factory):
    cfg = PretrainConfig(batch_size=16, max_steps=6, warmup_steps=1, learning_rate=2e-3, log_every=2,
                         save_every=100, seed=5)
    plain, prefetched = run_factory("plain"), run_factory("prefetched")
    pretrain(TINY, cfg, plain)
    pretrain(TINY, cfg.model_copy(update={"loader_workers": 2}), prefetched)

    def losses(run):
        lines = (run / "pretrain" / "metrics.jsonl").read_text().splitlines()
        return [(m["step"], m["loss"], m["mlm_acc"], m["tokens"]) for m in map(json.loads, lines)]

    assert losses(plain) == losses(prefetched)
    assert "loader_workers" in PretrainConfig.RESUME_NEUTRAL  # a resume may change it


def test_world_size_not_dividing_the_batch_names_the_fix(shared_tiny_run):
    from bertfactory.io import sha256_file

    with pytest.raises(ConfigError, match=r"batch_size=16 .* not divisible by the world size 3.*multiple of 3"):
        PretrainBatches.open(shared_tiny_run / "shards", sha256_file(shared_tiny_run / "tokenizer" / "tokenizer.json"),
                             16, seed=1, rank=0, world_size=3)


def test_per_rank_batch_not_dividing_into_micro_batches_names_the_fix(tiny_run, monkeypatch):
    # 2 processes x 8 sequences each; grad_accumulation 16 divides the global 16 but not a rank's 8
    monkeypatch.setattr("training.pretrain.from_environment",
                        lambda device: (DistContext(rank=0, world_size=2, local_rank=0), device))
    # a world of 2 without its process group: the check that the ranks run the same settings has no one to ask
    monkeypatch.setattr("training.pretrain_data.check_same_run", lambda *args: None)
    cfg = PretrainConfig(batch_size=16, grad_accumulation=16, max_steps=2, warmup_steps=1, device="cpu")
    with pytest.raises(ConfigError, match=r"trains 8 sequences per step .* multiple of world size x "
                                          r"grad_accumulation \(32\)"):
        pretrain(TINY, cfg, tiny_run)
