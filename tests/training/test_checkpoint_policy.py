"""Checkpoint policy and bad inputs: best-by-metric kept beside the newest N, a damaged checkpoint detected by its
recorded sha256 (fallback to the previous intact one, or a refusal when none is left), shards changed since the
checkpoint refused unless allowed, and the observability outputs (mfu, loss-curve PNG)."""

import json
import logging

import pytest

from bertfactory.errors import ContractError
from training.checkpoint import best_checkpoint, list_checkpoints, save_checkpoint, verify_checkpoint
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.flops import train_flops_per_token
from training.distributed import DistContext
from training.models.bert.model import BertConfig, BertForPreTraining
from training.pretrain import pretrain
from .conftest import make_run

SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)
CFG = PretrainConfig(batch_size=16, max_steps=12, warmup_steps=2, learning_rate=2e-3, log_every=2, save_every=4,
                     seed=5, device="cpu")


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_keep_best_by_keeps_the_best_checkpoint_beside_the_newest(tiny_run):
    config = BertConfig(vocab_size=45, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
                        max_position_embeddings=32)
    model = BertForPreTraining(config)
    tok = tiny_run / "tokenizer" / "tokenizer.json"
    ckpts = tiny_run / "ckpts"
    for step, loss in [(1, 3.0), (2, 1.0), (3, 2.0), (4, 2.5)]:
        save_checkpoint(ckpts, step, model, config, tok, {"metrics": {"loss": loss, "mlm_acc": 1 / loss}},
                        {"version": 1}, keep_last=1, keep_best_by="loss")
    assert [s for s, _ in list_checkpoints(ckpts)] == [2, 4]  # the newest and the lowest loss
    assert best_checkpoint(ckpts, "loss")[::2] == (2, 1.0)
    save_checkpoint(ckpts, 5, model, config, tok, {"metrics": {"loss": 0.5}}, {"version": 1}, keep_last=1,
                    keep_best_by="loss")
    assert [s for s, _ in list_checkpoints(ckpts)] == [5]  # a new best replaces the old one
    save_checkpoint(ckpts, 6, model, config, tok, {"metrics": {"loss": 9.0}}, {"version": 1}, keep_last=1)
    assert [s for s, _ in list_checkpoints(ckpts)] == [6]  # without keep_best_by: only the newest N
    with pytest.raises(ValueError, match="keep_best_by must name a loss"):
        PretrainConfig(keep_best_by="tokens_per_s")


def test_keep_best_by_through_pretraining(tiny_run):
    summary = pretrain(SMALL, CFG.model_copy(update={"keep_last": 1, "keep_best_by": "mlm_acc"}), tiny_run)
    recorded = {m["step"]: m["mlm_acc"] for m in _metrics(tiny_run) if m["step"] in (4, 8)}
    best_step = max(recorded, key=lambda s: (recorded[s], s))
    kept = [s for s, _ in list_checkpoints(tiny_run / "pretrain" / "checkpoints")]
    assert kept == sorted({best_step, 8})
    assert summary["best_checkpoint"]["step"] == best_step
    assert summary["best_checkpoint"]["mlm_acc"] == recorded[best_step]


def test_damaged_checkpoint_is_detected_and_the_previous_one_resumed(tiny_run, caplog):
    pretrain(SMALL, CFG, tiny_run, stop_after=9)  # checkpoints at 4 and 8
    step8 = tiny_run / "pretrain" / "checkpoints" / "step-8"
    assert verify_checkpoint(step8) is True
    weights = step8 / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte inside a tensor: safetensors would load it without complaint
    weights.write_bytes(bytes(data))
    with pytest.raises(ContractError, match="step-8/model.safetensors is corrupted"):
        verify_checkpoint(step8)
    with caplog.at_level(logging.WARNING, logger="training.pretrain"):
        summary = pretrain(SMALL, CFG, tiny_run, stop_after=10)
    assert summary["resumed_from_step"] == 4
    assert "NOT resuming from" in caplog.text and "step-8" in caplog.text
    assert "resuming from step 4" in caplog.text

    # every checkpoint damaged (here the training state): refused, nothing loaded
    for _, directory in list_checkpoints(tiny_run / "pretrain" / "checkpoints"):
        state = directory / "training_state.pt"
        state.write_bytes(state.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(ContractError, match="no intact checkpoint.*training_state.pt is corrupted"):
        pretrain(SMALL, CFG, tiny_run)


def test_a_checkpoint_missing_a_file_is_said_and_the_previous_one_resumed(tiny_run, caplog):
    """A file deleted from a published checkpoint (by hand, or lost in a copy) made it invisible: the run resumed
    from an older one, or started over, without a word."""
    pretrain(SMALL, CFG, tiny_run, stop_after=8)
    checkpoints = tiny_run / "pretrain" / "checkpoints"
    (checkpoints / "step-8" / "model.safetensors").unlink()
    with caplog.at_level(logging.WARNING, logger="training.pretrain"):
        summary = pretrain(SMALL, CFG, tiny_run, stop_after=10)
    assert summary["resumed_from_step"] == 4
    warned = [r.getMessage() for r in caplog.records if "NOT resuming" in r.getMessage()]
    assert warned == [f"pretrain: NOT resuming from {checkpoints / 'step-8'}: {checkpoints / 'step-8'}/model.safetensors "
                      "is missing (deleted or lost since the checkpoint was written); falling back to the previous "
                      "checkpoint"]

    for _, directory in list_checkpoints(checkpoints):  # none left whole: refused, not trained from scratch
        (directory / "training_state.pt").unlink()
    with pytest.raises(ContractError, match="no intact checkpoint.*training_state.pt is missing"):
        pretrain(SMALL, CFG, tiny_run)


def test_changed_shards_are_refused_unless_allowed(tiny_run, caplog):
    pretrain(SMALL, CFG, tiny_run, stop_after=4)
    make_run(tiny_run, seed=1)  # the same tokenizer, other instances: new shard hashes in the manifest
    with pytest.raises(ContractError, match="train shards changed since checkpoint .*step-4.*allow_shard_change"):
        pretrain(SMALL, CFG, tiny_run)
    with pytest.raises(ContractError, match="pretrain.seed"):  # the override covers the shards, nothing else
        pretrain(SMALL, CFG.model_copy(update={"allow_shard_change": True, "seed": 6}), tiny_run)
    with caplog.at_level(logging.WARNING, logger="training.pretrain"):
        summary = pretrain(SMALL, CFG.model_copy(update={"allow_shard_change": True}), tiny_run, stop_after=6)
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 6
    assert "continuing on the new shards" in caplog.text


def test_mfu_in_metrics_and_loss_curve_png(run_factory):
    plain, peaked = run_factory("plain"), run_factory("peaked")
    cfg = CFG.model_copy(update={"max_steps": 4, "save_every": 100})
    pretrain(SMALL, cfg, plain)
    assert all(m["mfu"] is None for m in _metrics(plain))
    pretrain(SMALL, cfg.model_copy(update={"peak_flops": 1e9}), peaked)
    manifest = json.loads((peaked / "shards" / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    # the objective's FLOPs (training/flops.py) at the mean length, 16 rows per pass (no max_predictions cap here)
    per_token = train_flops_per_token(SMALL, CFG.objective, 45, train["tokens"] / train["rows"], 0.15, 16)
    for m in _metrics(peaked):
        assert m["mfu"] == pytest.approx(m["tokens_per_s"] * per_token / 1e9) and 0 < m["mfu"]
    png = peaked / "pretrain" / "loss_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


class _Ranks(DistContext):
    """A rank 0 whose job's ranks chose the given steps (failures: rank -> why it could not choose); gather answers
    DistContext.fail_together's outcomes and agree_on_resume_step's steps."""

    def __init__(self, *steps, failures=None):
        super().__init__(rank=0, world_size=len(steps))
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "failures", failures or {})

    def gather(self, value):
        if len(value) == 3:  # fail_together: (host, kind, why)
            assert value[2] == self.failures.get(0)  # this process is rank 0
            return [(f"node{rank}", "ContractError" if rank in self.failures else None, self.failures.get(rank))
                    for rank in range(len(self.steps))]
        assert value[0] == self.steps[0]
        return [(step, f"node{rank}") for rank, step in enumerate(self.steps)]


def test_ranks_resuming_from_different_checkpoints_are_refused_on_every_rank():
    """A node whose copy of the checkpoints differs (its own newest, or none) resumed at another step than rank 0's,
    and the job hung at its first collective with the ranks steps apart."""
    from training.resume import agree_on_resume_step

    agree_on_resume_step(_Ranks(8, 8), 8)
    agree_on_resume_step(_Ranks(None, None), None)
    with pytest.raises(ContractError, match=r"^the ranks of this job would resume from different checkpoints: rank 0 "
                                            r"\(host node0\) from step 4, rank 1 \(host node1\) from step 8; their "
                                            r"nodes hold different checkpoints"):
        agree_on_resume_step(_Ranks(4, 8), 4)
    with pytest.raises(ContractError, match=r"rank 0 \(host node0\) from step 8, rank 1 \(host node1\) from scratch"):
        agree_on_resume_step(_Ranks(8, None), 8)


def test_a_rank_that_cannot_resume_is_named_on_every_rank_instead_of_hanging_the_others():
    """No intact checkpoint on one node: that rank raised alone and the others waited for it at their next
    collective until the process group's timeout."""
    from training.resume import agree_on_resume_step

    with pytest.raises(ContractError, match=r"^rank 1 \(host node1\) cannot resume: no intact checkpoint to resume "
                                            r"from"):
        agree_on_resume_step(_Ranks(8, None, failures={1: "no intact checkpoint to resume from, ..."}), 8)
    own = ContractError("no intact checkpoint to resume from: step-8/model.safetensors is missing")
    with pytest.raises(ContractError, match="^no intact checkpoint to resume from: step-8"):  # its own error, as it was
        agree_on_resume_step(_Ranks(None, 8, failures={0: str(own)}), None, own)
