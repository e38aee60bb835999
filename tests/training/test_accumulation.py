"""Gradient accumulation (k micro-batches give the update of one whole batch), the step guard (non-finite and
spiking losses skip the update, too many skips stop training) and exact resume with the new optimisers and
schedules, on the tiny synthetic run of conftest.py."""

import json
import math

import pytest
import torch

from bertfactory.io import sha256_file
from training.accumulation import split_batch, weighted_loss
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.models.bert.model import IGNORE_INDEX, BertConfig, BertForPreTraining
from training.objectives import get_objective_spec
from training.optim import build_optimizer, build_scheduler
from training.pretrain import pretrain
from training.step_guard import StepGuard, TrainingDiverged
from training.trainer import Trainer
from training.trainer_settings import TrainerSettings

SMALL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)
NO_DROPOUT = SMALL.model_copy(update={"hidden_dropout": 0.0, "attention_dropout": 0.0})


def _batches(run, batch_size):
    return PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), batch_size, seed=0)


def _tiny_model(batches):
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=batches.shards.manifest.tokenizer.vocab_size, hidden_size=32,
                                         num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                                         hidden_dropout=0.0, attention_dropout=0.0, pad_token_id=batches.pad_id))


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("objective", ["mlm_nsp", "mlm"])
def test_accumulated_micro_batches_give_the_whole_batch_gradient(shared_tiny_run, objective):
    batches = _batches(shared_tiny_run, 8)
    model = _tiny_model(batches)
    loss_fn = get_objective_spec(objective).loss
    batch = batches.batch(0)

    whole = loss_fn(model, batch)
    whole["loss"].backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)

    parts = split_batch(batch, 4)
    masked = [int((p["masked_labels"] != IGNORE_INDEX).sum()) for p, _ in parts]
    assert len(set(masked)) > 1, masked  # micro-batches hold different numbers of masked tokens: 1/k would be wrong
    total = 0.0
    for micro, weights in parts:
        loss = weighted_loss(loss_fn(model, micro), weights)
        loss.backward()
        total += float(loss.detach())
    assert total == pytest.approx(float(whole["loss"].detach()), rel=1e-6)
    assert torch.allclose(_grads(model), expected, rtol=1e-4, atol=1e-7)
    model.zero_grad(set_to_none=True)

    for micro, _ in parts:  # the naive mean of micro-batch means is measurably another gradient
        (loss_fn(model, micro)["loss"] / 4).backward()
    assert not torch.allclose(_grads(model), expected, rtol=1e-4, atol=1e-7)


def test_pretraining_with_accumulation_follows_the_whole_batch_run(run_factory):
    cfg = PretrainConfig(batch_size=8, max_steps=6, warmup_steps=2, learning_rate=2e-3, log_every=2, save_every=100,
                         seed=4)
    runs = {k: run_factory(f"accumulate-{k}") for k in (1, 4)}
    for k, run in runs.items():
        pretrain(NO_DROPOUT, cfg.model_copy(update={"grad_accumulation": k}), run)
    curves = {k: [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
              for k, run in runs.items()}
    for one, four in zip(curves[1], curves[4]):
        assert one["step"] == four["step"] and one["lr"] == four["lr"] and one["tokens"] == four["tokens"]
        for key in ("loss", "mlm_loss", "nsp_loss", "mlm_acc"):
            assert four[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (key, one, four)


class Poisoned:
    """The mlm_nsp objective with a NaN loss on the listed calls and a NaN gradient (finite loss) on others."""

    def __init__(self, nan_loss_calls=(), nan_grad_calls=()):
        self.loss = get_objective_spec("mlm_nsp").loss
        self.nan_loss_calls, self.nan_grad_calls = set(nan_loss_calls), set(nan_grad_calls)
        self.calls = 0

    def __call__(self, model, batch):
        self.calls += 1
        out = self.loss(model, batch)
        if self.calls in self.nan_loss_calls:
            out["loss"] = out["loss"] * float("nan")
        if self.calls in self.nan_grad_calls:  # forward 0 * sqrt(0) = 0; backward 0 * inf = nan
            weight = next(model.parameters())
            out["loss"] = out["loss"] + 0.0 * torch.sqrt(weight.abs().sum() * 0.0)
        return out


def _trainer(run, tmp_path, objective, max_steps, guard=None):
    batches = _batches(run, 8)
    model = _tiny_model(batches)
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6, name="lamb")
    settings = TrainerSettings(max_steps=max_steps, metrics_path=tmp_path / "metrics.jsonl", max_grad_norm=1.0,
                               log_every=2)
    return Trainer(model, optimizer, build_scheduler(optimizer, 1, max_steps), batches, objective,
                   torch.device("cpu"), settings, guard=guard)


def test_non_finite_losses_and_gradients_skip_the_update(shared_tiny_run, tmp_path):
    objective = Poisoned(nan_loss_calls={3}, nan_grad_calls={5})
    trainer = _trainer(shared_tiny_run, tmp_path, objective, max_steps=6)
    snapshots = []

    def snapshot(t):
        snapshots.append((t.step, t.last_step_skipped, [p.detach().clone() for p in t.model.parameters()]))

    trainer.train(on_step_end=snapshot)
    skipped = [step for step, was_skipped, _ in snapshots if was_skipped]
    assert skipped == [3, 5] and trainer.guard.skipped == 2 and trainer.guard.consecutive == 0
    params = {step: p for step, _, p in snapshots}
    for step in (3, 5):  # no parameter moved on a skipped step; every other step moved them
        assert all(torch.equal(a, b) for a, b in zip(params[step], params[step - 1]))
        assert not all(torch.equal(a, b) for a, b in zip(params[step + 1], params[step]))
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["skipped_steps"] for m in metrics] == [0, 1, 2]
    assert all(math.isfinite(m["loss"]) for m in metrics)  # the NaN never reached the averages
    assert trainer.scheduler.last_epoch == 6  # the schedule advanced on skipped steps too


def test_too_many_skipped_steps_stop_with_a_clear_error(shared_tiny_run, tmp_path):
    objective = Poisoned(nan_loss_calls=set(range(3, 100)))
    trainer = _trainer(shared_tiny_run, tmp_path, objective, max_steps=20, guard=StepGuard(max_consecutive=3))
    with pytest.raises(TrainingDiverged, match="stopped at step 6: 4 updates skipped in total and 4 in a row.*"
                                               "max_consecutive_skipped_steps=3.*non-finite loss nan"):
        trainer.train()
    assert trainer.step == 5
    total = _trainer(shared_tiny_run, tmp_path, Poisoned(nan_loss_calls={2, 4, 6}), max_steps=20,
                     guard=StepGuard(max_skipped=2))
    with pytest.raises(TrainingDiverged, match="stopped at step 6: 3 updates skipped in total and 1 in a row"):
        total.train()


def test_loss_spikes_are_skipped_against_the_running_median():
    guard = StepGuard(spike_factor=3.0, window=5, min_history=3)
    assert guard.check(7.0, 1.0, 1) is None  # too little history to call anything a spike
    for step, loss in enumerate([2.0, 2.2, 1.9, 2.1], start=2):
        assert guard.check(loss, 1.0, step) is None
    assert guard.history == [7.0, 2.0, 2.2, 1.9, 2.1]  # median 2.1
    assert "loss spike 6.5 > 3.0 x running median 2.1" in guard.check(6.5, 1.0, 6)
    assert guard.check(6.2, 1.0, 7) is None and guard.history[-1] == 6.2
    assert "non-finite gradient norm inf" in guard.check(2.0, float("inf"), 8)
    restored = StepGuard(spike_factor=3.0, window=5, min_history=3)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    assert restored.state_dict() == guard.state_dict() == {"history": [2.0, 2.2, 1.9, 2.1, 6.2], "skipped": 2,
                                                           "consecutive": 1}


@pytest.mark.parametrize("options", [
    {"optimizer": "lamb", "schedule": "slanted_triangular", "grad_accumulation": 2, "spike_factor": 5.0},
    {"optimizer": "adafactor", "schedule": "one_cycle", "learning_rate": 1e-2},
])
def test_resume_is_exact_with_the_new_optimizers_and_schedules(run_factory, options):
    cfg = PretrainConfig(batch_size=8, max_steps=10, warmup_steps=3, learning_rate=2e-3, log_every=2, save_every=4,
                         seed=5).model_copy(update=options)
    PretrainConfig.model_validate(cfg.model_dump())  # the combination validates
    straight_run, resumed_run = run_factory("straight"), run_factory("resumed")
    straight = pretrain(SMALL, cfg, straight_run)
    assert pretrain(SMALL, cfg, resumed_run, stop_after=6)["status"] == "stopped"
    resumed = pretrain(SMALL, cfg, resumed_run)
    assert resumed["resumed_from_step"] == 4

    def curve(run):
        return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
                for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]

    assert curve(resumed_run) == curve(straight_run) and len(curve(straight_run)) == 5
    final = "pretrain/final/model.safetensors"
    assert (straight_run / final).read_bytes() == (resumed_run / final).read_bytes()
    assert resumed["loss"] == straight["loss"]


def test_accumulation_is_refused_for_two_stage_electra(tiny_run):
    from bertfactory.errors import ConfigError
    from training.models.electra.model import ElectraSettings

    model = SMALL.model_copy(update={"electra": ElectraSettings(two_stage=True, generator_steps=2, generator_size=1.0)})
    cfg = PretrainConfig(objective="electra", batch_size=8, max_steps=4, warmup_steps=1, grad_accumulation=2)
    with pytest.raises(ConfigError, match="grad_accumulation > 1 is not supported with model.electra.two_stage"):
        pretrain(model, cfg, tiny_run)
