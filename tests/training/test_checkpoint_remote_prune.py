"""keep_last and keep_best_by on a run on object storage, across machines: a resumed run's working copy holds only
the checkpoint it resumed from, and the checkpoints an earlier machine saved are pruned in the bucket by the same
rule, over both together (they used to stay there for good). Against an S3 API server on 127.0.0.1."""

from __future__ import annotations

import shutil

import pytest

from bertfactory import storage
from bertfactory.run_location import WorkingCopy, resolve_run_dir
from training.checkpoint import save_checkpoint
from training.models.bert.model import BertConfig, BertForPreTraining
from tests.storage_servers import s3_bucket

CONFIG = BertConfig(vocab_size=45, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                    max_position_embeddings=32)


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("prune") as url:
        yield url


def _save(run_dir, tokenizer, step, loss, **policy):
    save_checkpoint(run_dir / "pretrain/checkpoints", step, BertForPreTraining(CONFIG), CONFIG, tokenizer,
                    {"metrics": {"loss": loss}}, {"version": 1}, **policy)


def _in_bucket(run_dir):
    return WorkingCopy.of(run_dir).complete_dirs("pretrain/checkpoints")


def test_checkpoints_of_an_earlier_machine_are_pruned_in_the_bucket(bucket, tiny_run, tmp_path, monkeypatch):
    tokenizer = tiny_run / "tokenizer" / "tokenizer.json"
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    run_dir = resolve_run_dir(storage.join(bucket, "newest"))
    for step in (1, 2, 3):
        _save(run_dir, tokenizer, step, 1.0, keep_last=2)
    assert _in_bucket(run_dir) == ["step-2", "step-3"]

    shutil.rmtree(tmp_path / "work")  # a fresh machine, resuming with none of them here
    run_dir = resolve_run_dir(storage.join(bucket, "newest"))
    _save(run_dir, tokenizer, 4, 1.0, keep_last=2)
    assert _in_bucket(run_dir) == ["step-3", "step-4"]
    _save(run_dir, tokenizer, 5, 1.0, keep_last=2)
    assert _in_bucket(run_dir) == ["step-4", "step-5"]
    assert not any(name.startswith(("step-2/", "step-3/"))
                   for name in storage.list_files(storage.join(bucket, "newest/pretrain/checkpoints")))


def test_the_best_checkpoint_of_an_earlier_machine_is_kept(bucket, tiny_run, tmp_path, monkeypatch):
    tokenizer = tiny_run / "tokenizer" / "tokenizer.json"
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    run_dir = resolve_run_dir(storage.join(bucket, "best"))
    for step, loss in [(1, 0.5), (2, 2.0), (3, 3.0)]:
        _save(run_dir, tokenizer, step, loss, keep_last=1, keep_best_by="loss")
    assert _in_bucket(run_dir) == ["step-1", "step-3"]

    shutil.rmtree(tmp_path / "work")
    run_dir = resolve_run_dir(storage.join(bucket, "best"))
    _save(run_dir, tokenizer, 4, 4.0, keep_last=1, keep_best_by="loss")
    assert _in_bucket(run_dir) == ["step-1", "step-4"]  # the newest, and the best of both machines
    _save(run_dir, tokenizer, 5, 0.25, keep_last=1, keep_best_by="loss")
    assert _in_bucket(run_dir) == ["step-5"]  # a new best, which is also the newest
