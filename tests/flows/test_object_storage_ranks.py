"""The ranks of a torchrun job on a run location (docs/cluster.md, "torchrun on several nodes + a bucket"): every
rank, on its own node's working copy, must resume from the same checkpoint. Against an S3 API server on 127.0.0.1.

A node that was the job's rank 0 when it died while uploading a checkpoint keeps that checkpoint complete in its
working copy; the bucket never got its `.complete`. When the job is started again that node may be rank 1 (another
node took rank 0): it used to keep the checkpoint and resume from it while rank 0 resumed from the bucket's newest,
so the two ranks trained different steps and the job hung in a collective (reproduced with two torchrun
launchers: rank 0 "resuming from step 4", rank 1 "resuming from step 8", killed by `timeout 300`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.run_location import WorkingCopy, resolve_run_dir
from flows import run_sync
from tests.storage_servers import s3_bucket
from training import checkpoint
from training.models.bert.model import BertConfig, BertForPreTraining
from training.resume import intact_checkpoint

CONFIG = BertConfig(vocab_size=8, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                    max_position_embeddings=16)


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("ranks") as url:
        yield url


def _tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"])}
    path.parent.mkdir(parents=True, exist_ok=True)
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    return path


def _save(run_dir: Path, step: int) -> None:
    checkpoint.save_checkpoint(run_dir / "pretrain/checkpoints", step, BertForPreTraining(CONFIG), CONFIG,
                               run_dir / "tokenizer/tokenizer.json", {"metrics": {"loss": 1.0}}, {"version": 1},
                               keep_last=3)


@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_drops_a_checkpoint_the_bucket_never_completed(bucket, rank, tmp_path, monkeypatch):
    url = storage.join(bucket, f"died-as-rank-0-now-rank-{rank}")
    # the first job: this node was rank 0; step-4 went up, the process died while uploading step-8
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "node-a"))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    run_dir = resolve_run_dir(url)
    _tokenizer(run_dir / "tokenizer/tokenizer.json")
    _save(run_dir, 4)
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "publish_checkpoint", lambda directory, pruned=(), also=(): None)
        _save(run_dir, 8)
    assert WorkingCopy.of(run_dir).complete_dirs("pretrain/checkpoints") == ["step-4"]
    assert intact_checkpoint(run_dir / "pretrain/checkpoints")[0] == 8  # complete here, never in the bucket

    # the job again, this node as rank `rank` of 2 (rank 0 on another node pulls step-4 from the bucket)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", str(rank))
    run_sync.after_begin("pretrain", run_dir)
    assert not (run_dir / "pretrain/checkpoints/step-8").exists()
    assert intact_checkpoint(run_dir / "pretrain/checkpoints")[0] == 4  # what every rank resumes from
