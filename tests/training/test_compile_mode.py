"""pretrain.compile_mode (issue 31): torch.compile's mode for pretrain.compile. reduce-overhead runs the compiled
forward and backward as CUDA graphs, whose every replay overwrites what the previous one returned; the trainer
therefore starts each micro-step with torch.compiler.cudagraph_mark_step_begin() and copies what it keeps past a
micro-step (the scalars its deferred reads hold for up to log_every steps, the gradients summed over micro-steps)
into tensors of its own (training/trainer.py).

Checked here on the CPU, where inductor runs no CUDA graphs (tests/gpu/test_compile_cuda.py runs them on CUDA):
- the config refuses, each in one line: a mode without pretrain.compile; reduce-overhead without static_shapes,
  with unpad, with a batch ramp; a non-default mode with stacking; xla and fsdp refuse compile itself;
- what CUDA graphs do to the outputs, played on the eager model (`Replays`: every forward overwrites the previous
  forward's scalar outputs and the gradients its backward handed to the parameters): with reduce-overhead's copies
  the run logs exactly the curve of a run without the overwriting (asserted equal), with the default mode's path
  (no copies) it does not. Deferred reads (as on CUDA: fused AdamW vetoing on the device) and grad_accumulation
  1 and 2;
- compiled for real (slow): reduce-overhead trains to the default mode's curve, with 2 micro-batches a step. On the
  CPU the two modes run the same inductor kernels (CUDA graphs skipped): identical metrics lines but the wall
  clock and the process-wide graph count (asserted equal); `model.compile` got the mode, and the default mode is
  still a bare `model.compile()`. Shapes: 8 x 24 micro-batches, those of tests/training/test_compile.py, whose
  cached kernels serve both: 54 s on the shared 2-core machine after test_compile, 12 s with this test's own
  graphs cached too.
"""

from __future__ import annotations

import json

import pytest
import torch

import training.optim as optim
import training.pretrain_model as pretrain_model
from bertfactory.errors import ContractError
from training.config import ModelConfig
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig
from training.trainer import Trainer

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]

TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)
GRAPHS = {"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True}


@pytest.mark.parametrize("settings, message", [
    ({"compile_mode": "reduce-overhead"}, "pretrain.compile_mode reduce-overhead is a mode of pretrain.compile, "
                                           "which is off: set compile: true, or leave compile_mode default"),
    ({"compile_mode": "max-autotune-no-cudagraphs"}, "pretrain.compile_mode max-autotune-no-cudagraphs is a mode "
                                                      "of pretrain.compile"),
    ({**GRAPHS, "static_shapes": False}, "pretrain.compile_mode reduce-overhead \\(CUDA graphs\\) needs "
                                         "pretrain.static_shapes: true"),
    ({**GRAPHS, "unpad": True}, "pretrain.compile_mode reduce-overhead \\(CUDA graphs\\) runs without pretrain.unpad"),
    ({**GRAPHS, "batch_size_ramp": {"start_batch_size": 8, "steps": 10}},
     "pretrain.compile_mode reduce-overhead \\(CUDA graphs\\) runs without pretrain.batch_size_ramp"),
    ({**GRAPHS, "compile_mode": "max-autotune-no-cudagraphs", "stacking": {"stages": [5]}},
     "pretrain.compile_mode max-autotune-no-cudagraphs is not implemented with pretrain.stacking"),
    ({**GRAPHS, "device": "xla"}, "pretrain.device xla runs without pretrain.unpad and pretrain.compile"),
    ({**GRAPHS, "parallelism": "fsdp"}, "pretrain.parallelism fsdp is not implemented with pretrain.compile"),
], ids=["no-compile", "no-compile-autotune", "no-static-shapes", "unpad", "batch-ramp", "stacking", "xla", "fsdp"])
def test_the_config_refuses_a_mode_where_it_cannot_work_in_one_line(settings, message):
    with pytest.raises(ValueError, match=message) as info:
        PretrainConfig(batch_size=16, max_steps=100, warmup_steps=1, **settings)
    problem = info.value.errors()[0]["msg"]
    assert "\n" not in problem, problem


def test_cuda_graphs_take_unpad_in_its_fixed_layout_and_the_layout_needs_unpad():
    # the fixed layout: shapes of [B, T] alone and no host read, what a CUDA graph replays (varlen.py)
    fixed = PretrainConfig(batch_size=16, max_steps=100, warmup_steps=1, unpad=True, unpad_layout="fixed", **GRAPHS)
    assert fixed.trajectory_fields()["unpad_layout"] == "fixed"
    assert "unpad_layout" not in PretrainConfig(unpad=True).trajectory_fields()  # earlier runs keep their keys
    with pytest.raises(ValueError, match="pretrain.unpad_layout fixed is a layout of pretrain.unpad, which is off: "
                                         "set unpad: true, or leave unpad_layout packed"):
        PretrainConfig(unpad_layout="fixed")


def test_the_mode_is_in_the_fingerprint_and_the_default_leaves_earlier_keys_unchanged():
    assert "compile_mode" not in PretrainConfig.RESUME_NEUTRAL
    default = PretrainConfig(compile=True, static_shapes=True)
    assert "compile_mode" not in default.trajectory_fields()  # runs started before the option keep their keys
    graphs = PretrainConfig(**GRAPHS)
    assert graphs.trajectory_fields() == {**default.trajectory_fields(), "compile_mode": "reduce-overhead"}
    for mode in ("default", "reduce-overhead", "max-autotune-no-cudagraphs"):  # the modes it takes on the CPU too
        PretrainConfig(compile=True, static_shapes=True, compile_mode=mode)


class Replays:
    """What CUDA graphs do to a compiled model, played on the eager one: each call overwrites the previous call's
    outputs (the graph's output memory: here its scalar outputs become NaN / -1) and the gradients its backward
    handed to the parameters (autograd keeps a backward graph's output as a parameter's first gradient of a
    step, without a copy: here those become NaN)."""

    def __init__(self, model: torch.nn.Module):
        self.outputs: list[torch.Tensor] = []
        self.handed: list[torch.Tensor] = []
        self.before: dict[int, torch.Tensor | None] = {}
        self.calls = 0
        model.register_forward_pre_hook(self.replay)
        model.register_forward_hook(self.returned)
        for param in model.parameters():
            param.register_post_accumulate_grad_hook(self.accumulated)

    def replay(self, module, args):
        self.calls += 1
        for tensor in self.outputs:
            tensor.fill_(float("nan") if tensor.is_floating_point() else -1)
        for grad in self.handed:
            grad.fill_(float("nan"))
        self.outputs, self.handed = [], []
        self.before = {id(p): p.grad for p in module.parameters()}

    def returned(self, module, args, output):
        self.outputs = [v.detach() for v in output.values() if isinstance(v, torch.Tensor) and v.dim() == 0]

    def accumulated(self, param):
        if self.before.get(id(param)) is None:  # no gradient before this backward: its output became .grad
            self.handed.append(param.grad)


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _curve(metrics):
    return [{k: v for k, v in m.items() if k not in ("tokens_per_s", "mfu")} for m in metrics]


def _replayed_run(run_factory, monkeypatch, name, accumulation, **settings):
    """4 steps of the tiny twin with deferred reads (fused AdamW vetoing on the device, as on CUDA); with
    compile: the eager model under `Replays` in place of torch.compile."""
    run = run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=64, heldout_rows=8)
    replays = []
    with monkeypatch.context() as patch:
        patch.setattr(optim, "adamw_kernel", lambda params: {"fused": True})
        patch.setattr(Trainer, "_defers_reads", lambda self: True)
        patch.setattr(pretrain_model, "compile_model", lambda model, cfg: replays.append(Replays(model)))
        cfg = PretrainConfig(batch_size=16, grad_accumulation=accumulation, max_steps=4, warmup_steps=1,
                             learning_rate=2e-3, log_every=2, save_every=4, seed=5, static_shapes=True, device="cpu",
                             **settings)
        try:
            pretrain(TINY, cfg, run)
        except ContractError:  # the default mode's path under Replays: no loss to plot at the end (checked below)
            if not settings.get("compile") or settings.get("compile_mode", "default") != "default":
                raise
    if settings.get("compile"):
        assert replays and replays[0].calls == 4 * accumulation
    return _metrics(run)


@pytest.mark.parametrize("accumulation", [1, 2], ids=["one-batch", "two-micro-batches"])
def test_the_trainers_copies_keep_what_a_replay_overwrites(run_factory, monkeypatch, accumulation):
    plain = _replayed_run(run_factory, monkeypatch, "plain", accumulation)
    graphs = _replayed_run(run_factory, monkeypatch, "graphs", accumulation, compile=True,
                           compile_mode="reduce-overhead")
    without = _replayed_run(run_factory, monkeypatch, "without", accumulation, compile=True)
    assert [m["step"] for m in plain] == [2, 4] and all(m["skipped_steps"] == 0 for m in plain)
    assert _curve(graphs) == _curve(plain)  # the copies: every value read as it was computed
    # the default mode's path keeps the overwritten tensors: the scalars read as NaN (accumulation 1), the first
    # micro-batch's gradients as NaN (2: every update skipped)
    assert _curve(without) != _curve(plain) and without[-1]["skipped_steps"] >= 1


@pytest.mark.slow
def test_reduce_overhead_trains_to_the_default_modes_curve_on_the_cpu(run_factory, monkeypatch):
    modes, real = [], torch.nn.Module.compile

    def compile_spy(self, *args, **kwargs):
        modes.append(kwargs.get("mode"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "compile", compile_spy)
    cfg = PretrainConfig(batch_size=16, grad_accumulation=2, max_steps=3, warmup_steps=1, learning_rate=2e-3,
                         log_every=1, save_every=3, seed=5, static_shapes=True, num_threads=1, device="cpu",
                         compile=True)
    curves = {}
    for mode in ("default", "reduce-overhead"):
        run = run_factory(mode, max_seq_len=24, min_seq_len=24, train_rows=64, heldout_rows=8)
        pretrain(TINY, cfg.model_copy(update={"compile_mode": mode}), run)
        curves[mode] = _metrics(run)
        torch.compiler.reset()
    assert modes == [None, "reduce-overhead"]  # the default mode as before: model.compile()
    assert [m["step"] for m in curves["default"]] == [1, 2, 3]
    default, graphs = ([{k: v for k, v in m.items() if k != "compiled_graphs"} for m in _curve(curves[mode])]
                       for mode in ("default", "reduce-overhead"))
    assert graphs == default
    counts = [m["compiled_graphs"] for m in curves["reduce-overhead"]]
    assert counts == [counts[0]] * len(counts), counts  # compiled in step 1, nothing after
