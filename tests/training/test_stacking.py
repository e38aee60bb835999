"""Progressive stacking: the new layers are copies of their sources (weights and AdamW state), the stacked model
is the old layers applied twice, a checkpoint after a stack loads onto a freshly stacked model, and in a
pretraining run the loss does not jump at the stack steps, falls over the run, and resuming across a stack point
reproduces the uninterrupted run exactly. The other members that declare stacking (SpanBERT, XLM) stack alike and
pretrain through a stack; tests/training/test_recipe_checks.py has the refusal for those that do not."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from flows.recipe import load_recipe
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.models.core.attention import padding_mask
from training.models.bert.model import BertConfig, BertForPreTraining
from training.models.core.encoder import TransformerLayer
from training.models.registry import STACKING, get_architecture
from training.objectives import get_objective_spec
from training.optim import build_optimizer, build_scheduler
from training.pretrain import pretrain
from training.stacking import StackingSchedule, stack_layers, stack_trainer, stacked_config
from training.objectives.mlm_nsp import mlm_nsp

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(**overrides) -> BertConfig:
    base = dict(vocab_size=45, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0)
    return BertConfig(**{**base, **overrides})


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([12, 30, 5, 21])
    mask = (torch.arange(30)[None] < lengths[:, None]).long()
    ids = torch.randint(5, 45, (4, 30), generator=g) * mask
    positions = torch.stack([torch.tensor([1, 2, 3])] * 4)
    labels = torch.randint(5, 45, (4, 3), generator=g)
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
            "masked_positions": positions, "masked_labels": labels, "nsp_labels": torch.tensor([0, 1, 0, 1])}


def _trained(config: BertConfig, steps=3):
    """A model and an AdamW optimizer with state after a few steps (so moments differ between layers)."""
    torch.manual_seed(0)
    model = BertForPreTraining(config)
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6)
    for step in range(steps):
        model(**_batch(step))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_new_layers_are_copies_of_their_sources_with_their_own_tensors():
    model, optimizer = _trained(_config())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stacked, _ = stack_layers(model, optimizer)
    assert stacked.config == stacked_config(model.config) and stacked.config.num_layers == 4
    assert model.config.num_layers == 2 and all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    new = stacked.state_dict()
    assert len(new) == len(before) + sum(1 for k in before if k.startswith("bert.encoder.layer."))
    for name, tensor in new.items():
        source = name
        if name.startswith("bert.encoder.layer."):
            index, rest = name[len("bert.encoder.layer."):].split(".", 1)
            source = f"bert.encoder.layer.{int(index) % 2}.{rest}"
        assert torch.equal(tensor, before[source]), name
    pointers = [t.data_ptr() for t in new.values()] + [t.data_ptr() for t in model.state_dict().values()]
    assert len(set(pointers)) == len(pointers)  # no tensor shared between layers or with the old model


def test_the_stacked_model_keeps_the_runs_switches():
    # pretrain.unpad / unpad_layout / static_shapes / fused_mlm_loss are attributes of the built model, not of its
    # config or weights: the deeper model must take them over, or the run drops them silently at the first stack
    from training.models.core.capabilities import MODEL_SWITCHES

    model, optimizer = _trained(_config())
    switched = {"unpad_by_default": True, "unpad_layout": "fixed", "static_shapes": True, "fused_mlm_loss": True}
    assert set(switched) == set(MODEL_SWITCHES)
    for name, value in switched.items():
        setattr(model, name, value)
    stacked, stacked_optimizer = stack_layers(model, optimizer)
    assert {name: getattr(stacked, name) for name in MODEL_SWITCHES} == switched
    twice, _ = stack_layers(stacked, stacked_optimizer)
    assert {name: getattr(twice, name) for name in MODEL_SWITCHES} == switched
    fresh, _ = stack_layers(*_trained(_config()))
    assert (fresh.unpad_by_default, fresh.unpad_layout, fresh.static_shapes, fresh.fused_mlm_loss) == (
        False, "packed", False, False)


def _layers_twice(model, batch, times):
    """The old model's encoder layers applied `times` times in a row (what stacking `log2(times)` times means)."""
    bert = model.bert
    hidden = bert.embeddings(batch["input_ids"], batch["token_type_ids"])
    if hasattr(bert, "embeddings_project"):
        hidden = bert.embeddings_project(hidden)
    mask = padding_mask(batch["attention_mask"])
    for _ in range(times):
        for attention, ffn in bert.encoder.plan:
            hidden = TransformerLayer.run(hidden, mask, bert.encoder.layer[attention], bert.encoder.layer[ffn])
    return hidden


@pytest.mark.parametrize("overrides", [
    {}, {"num_layers": 1}, {"share_layers": "all"}, {"share_layers": "attention", "num_layer_groups": 2},
    {"embedding_size": 16, "share_layers": "ffn"},
])
def test_stacked_model_is_the_old_layers_applied_twice_and_equals_a_directly_built_model(overrides):
    model, optimizer = _trained(_config(**overrides))
    once, once_optimizer = stack_layers(model, optimizer)
    twice, _ = stack_layers(once, once_optimizer)
    assert twice.config.num_layers == 4 * model.config.num_layers
    batch = _batch(7)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        for stacked, times in ((once, 2), (twice, 4)):
            direct = BertForPreTraining(stacked.config)
            direct.load_state_dict(stacked.state_dict())
            for m in (model, stacked, direct):
                m.eval()
            hidden = stacked.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            assert torch.allclose(hidden[real], _layers_twice(model, batch, times)[real], atol=1e-6, rtol=0)
            assert torch.equal(stacked(**batch)["loss"], direct(**batch)["loss"])


def test_optimizer_state_is_copied_and_loads_onto_a_freshly_built_optimizer():
    model, optimizer = _trained(_config())
    stacked, stacked_optimizer = stack_layers(model, optimizer)
    old_state = {n: optimizer.state[p] for n, p in model.named_parameters()}
    new_state = {n: stacked_optimizer.state[p] for n, p in stacked.named_parameters()}
    for name, state in new_state.items():
        source = name.replace("layer.2.", "layer.0.").replace("layer.3.", "layer.1.")
        assert state.keys() == old_state[source].keys() == {"step", "exp_avg", "exp_avg_sq"}
        for key in state:
            assert torch.equal(state[key], old_state[source][key]), (name, key)
        assert state["exp_avg"].data_ptr() != old_state[source]["exp_avg"].data_ptr()
    assert [g["lr"] for g in stacked_optimizer.param_groups] == [g["lr"] for g in optimizer.param_groups]
    assert [g["weight_decay"] for g in stacked_optimizer.param_groups] == [0.01, 0.0]
    # what resuming does: a fresh optimizer of the stacked model receives the saved state on the same parameters
    fresh = build_optimizer(stacked, 5e-4, 0.01, (0.9, 0.999), 1e-6)
    fresh.load_state_dict(stacked_optimizer.state_dict())
    for p in stacked.parameters():
        assert all(torch.equal(fresh.state[p][k], stacked_optimizer.state[p][k]) for k in fresh.state[p])


def test_stack_trainer_continues_the_schedule_at_the_same_step_and_learning_rate():
    model, optimizer = _trained(_config())
    scheduler = build_scheduler(optimizer, warmup_steps=2, max_steps=10)
    for _ in range(4):
        optimizer.step()  # no gradients: changes nothing, but keeps the scheduler's call-order check quiet
        scheduler.step()
    lr = optimizer.param_groups[0]["lr"]
    assert 0 < lr < 1e-3
    trainer = SimpleNamespace(model=model, optimizer=optimizer, scheduler=scheduler)
    stack_trainer(trainer, lambda o: build_scheduler(o, warmup_steps=2, max_steps=10))
    assert trainer.model.config.num_layers == 4 and trainer.scheduler.optimizer is trainer.optimizer
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [lr, lr]
    assert trainer.scheduler.get_last_lr() == scheduler.get_last_lr() and trainer.scheduler.last_epoch == 4
    for opt, sched in ((trainer.optimizer, trainer.scheduler), (optimizer, scheduler)):
        opt.step()
        sched.step()
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [g["lr"] for g in optimizer.param_groups]


def test_the_loss_barely_moves_when_stacking_a_trained_model(run_factory):
    """Held-out loss right before and right after each stack of a model trained between stacks (1 -> 2 -> 4)."""
    run = run_factory("jump")
    sha = sha256_file(run / "tokenizer" / "tokenizer.json")
    train = PretrainBatches.open(run / "shards", sha, 16, seed=1)
    heldout = PretrainBatches.open(run / "shards", sha, 32, seed=0, split="heldout")
    model, optimizer = _trained(_config(num_layers=1, hidden_size=64, intermediate_size=128), steps=0)

    def heldout_loss(m):
        m.eval()
        with torch.no_grad():
            return sum(float(mlm_nsp(m, heldout.batch(i))["loss"]) for i in range(2)) / 2

    step = 0
    for _ in range(2):
        for _ in range(40):
            model.train()
            mlm_nsp(model, train.batch(step))["loss"].backward()  # as the trainer calls it
            optimizer.step()
            optimizer.zero_grad()
            step += 1
        before = heldout_loss(model)
        model, optimizer = stack_layers(model, optimizer)
        assert heldout_loss(model) - before < 0.1, (step, before, heldout_loss(model))


SMALL = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _layers_in(directory):
    return json.loads((directory / "config.json").read_text())["model"]["num_layers"]


def test_stacking_run_loss_continues_at_the_stacks_and_falls(tiny_run):
    model = SMALL.model_copy(update={"hidden_size": 64, "intermediate_size": 128})
    cfg = PretrainConfig(batch_size=16, max_steps=120, warmup_steps=10, learning_rate=3e-3, log_every=1,
                         save_every=1000, seed=1, stacking={"stages": [40, 80]})
    summary = pretrain(model, cfg, tiny_run)
    mlm = [m["mlm_loss"] for m in _metrics(tiny_run)]
    assert len(mlm) == 120 and _layers_in(tiny_run / "pretrain" / "final") == 4

    def mean(values):
        return sum(values) / len(values)

    for stage in (40, 80):  # mlm_loss of steps stage-4..stage (before) and stage+1..stage+5 (after the stack)
        assert mean(mlm[stage:stage + 5]) < mean(mlm[stage - 5:stage]) + 0.1, (stage, mlm[stage - 5:stage + 5])
    assert mean(mlm[-10:]) < mean(mlm[:10]) - 0.3, (mlm[:10], mlm[-10:])
    assert summary["parameters"] == BertForPreTraining(stacked_config(model.to_bert_config(45, 0), 2)).num_parameters()


@pytest.mark.parametrize("stop_after, resumed_from", [(13, 10), (9, 5)])
def test_resume_across_a_stack_point_reproduces_the_run_exactly(run_factory, stop_after, resumed_from):
    """Stages at 5 and 10: resume from the checkpoint at 10 (taken right after the second stack, 4 layers) or at
    5 (2 layers, the second stack happens in the resumed run)."""
    straight_run, resumed_run = run_factory("straight"), run_factory("resumed")
    cfg = PretrainConfig(batch_size=16, max_steps=20, warmup_steps=3, learning_rate=2e-3, log_every=1, save_every=5,
                         keep_last=10, seed=3, stacking={"stages": [5, 10]})
    assert SMALL.hidden_dropout > 0  # dropout on: the RNG stream must survive the stacks and the resume
    straight = pretrain(SMALL, cfg, straight_run)
    checkpoints = straight_run / "pretrain" / "checkpoints"
    assert [_layers_in(checkpoints / f"step-{s}") for s in (5, 10, 15)] == [2, 4, 4]

    assert pretrain(SMALL, cfg, resumed_run, stop_after=stop_after)["status"] == "stopped"
    resumed = pretrain(SMALL, cfg, resumed_run)
    assert resumed["resumed_from_step"] == resumed_from

    def curve(run):
        return [{k: v for k, v in m.items() if k != "tokens_per_s"} for m in _metrics(run)]

    assert curve(resumed_run) == curve(straight_run)  # every loss, lr and accuracy bit for bit
    final = "pretrain/final/model.safetensors"
    assert (straight_run / final).read_bytes() == (resumed_run / final).read_bytes()


# the members besides BERT that declare STACKING, with the model section of their objective (as in
# tests/training/test_objectives_distributed.py)
OTHER_MEMBERS_THAT_STACK = {
    "mlm_sbo": {"spanbert": {"max_span_tokens": 8, "position_size": 8}},
    "xlm_mlm": {"num_languages": 2, "xlm": {"language_id": 1}},
}


def _member_model_config(objective: str) -> ModelConfig:
    return ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                       hidden_dropout=0.0, attention_dropout=0.0, **OTHER_MEMBERS_THAT_STACK[objective])


def _encoder_applied(backbone, hidden, attention_mask, times):
    """`backbone`'s encoder layers applied `times` times in a row to `hidden` (its embeddings' output)."""
    mask = padding_mask(attention_mask)
    for _ in range(times):
        for attention, ffn in backbone.encoder.plan:
            hidden = TransformerLayer.run(hidden, mask, backbone.encoder.layer[attention], backbone.encoder.layer[ffn])
    return hidden


@pytest.mark.parametrize("objective", sorted(OTHER_MEMBERS_THAT_STACK))
def test_spanbert_and_xlm_stack_to_their_layers_applied_twice_and_reload_as_resume_does(objective):
    arch = get_architecture(get_objective_spec(objective).architecture)
    assert STACKING in arch.supports
    torch.manual_seed(0)
    model = arch.build(arch.from_model_config(_member_model_config(objective), 45, 0))
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6)
    for param in model.parameters():
        param.grad = torch.randn_like(param) * 1e-2  # AdamW state and weights that differ between the layers
    optimizer.step()
    stacked, stacked_optimizer = stack_layers(model, optimizer)
    assert type(stacked) is type(model) and stacked.config.num_layers == 4
    batch = _batch(7)
    inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    model.eval()
    stacked.eval()
    with torch.no_grad():
        _, hidden = model.backbone()(*inputs, output_hidden_states=True)
        twice = _encoder_applied(model.backbone(), hidden[0], batch["attention_mask"], times=2)
        deep = stacked.backbone()(*inputs)
    assert torch.allclose(deep[real], twice[real], atol=1e-6, rtol=0)
    # what resuming after the stack does: a model built at the stacked config, then a fresh optimizer, take both
    direct = arch.build(arch.config_from_dict(stacked.config.to_dict(), "test"))
    direct.load_state_dict(stacked.state_dict(), strict=True)
    build_optimizer(direct, 1e-3, 0.01, (0.9, 0.999), 1e-6).load_state_dict(stacked_optimizer.state_dict())


@pytest.mark.parametrize("objective", sorted(OTHER_MEMBERS_THAT_STACK))
def test_spanbert_and_xlm_pretrain_through_a_stack(objective, tiny_run):
    model_cfg = _member_model_config(objective)
    cfg = PretrainConfig(objective=objective, batch_size=16, max_steps=6, warmup_steps=2, learning_rate=2e-3,
                         log_every=1, save_every=1000, seed=1, device="cpu", stacking={"stages": [3]})
    summary = pretrain(model_cfg, cfg, tiny_run)
    losses = [m["loss"] for m in _metrics(tiny_run)]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses), losses
    assert _layers_in(tiny_run / "pretrain" / "final") == 4
    arch = get_architecture(get_objective_spec(objective).architecture)
    stacked = stacked_config(arch.from_model_config(model_cfg, 45, 0))  # 45: the tiny run's vocabulary
    assert summary["parameters"] == arch.build(stacked).num_parameters()


def test_stacking_config_is_validated():
    with pytest.raises(ValueError, match="strictly increasing"):
        PretrainConfig(max_steps=100, warmup_steps=0, stacking={"stages": [20, 20]})
    with pytest.raises(ValueError, match="before max_steps"):
        PretrainConfig(max_steps=100, warmup_steps=0, stacking={"stages": [50, 100]})
    with pytest.raises(ConfigError, match="BERT-style"):
        StackingSchedule(PretrainConfig(max_steps=100, warmup_steps=0, stacking={"stages": [5]}).stacking,
                         object(), build_scheduler=lambda o: None)


def test_tiny_stacking_recipe_grows_one_layer_to_four():
    recipe = load_recipe(REPO / "configs" / "tiny-stacking.yaml")
    assert recipe.model.num_layers == 1 and len(recipe.pretrain.stacking.stages) == 2
    assert recipe.corpus.inputs == ["sample:enwiki"]
    assert recipe.pretrain.stacking.stages[-1] < recipe.pretrain.max_steps
