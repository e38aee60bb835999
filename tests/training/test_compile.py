"""pretrain.compile: a torch.compile'd model (inductor; on the CPU here, as CI runs it) trains to the eager model's
loss curve, for the tiny twins of BERT (mlm_nsp) and ModernBERT (modernbert_mlm, local and global layers), in one
process and under DDP with 2 gloo ranks; after the first step (the warm-up, where the forward and backward graphs
are compiled) it compiles nothing again on the recipe's shapes (`compiled_graphs` in metrics.jsonl stays flat);
it writes the same checkpoint layout; ModernBERT unpadded (pretrain.unpad, configs/modernbert-base.yaml's GPU step)
on rows of varied length follows the unpadded eager curve and recompiles once, when the packed token count first
changes, and in the fixed layout (pretrain.unpad_layout fixed, with compile_mode reduce-overhead, which the CPU
runs as default) follows the same curve with its graphs compiled once per row length; compile is part of the
resume fingerprint (with dropout on, inductor draws
its own dropout masks, so a compiled run follows another sample path than an eager one).

The shapes: rows of one length (every recipe's rows fill max_seq_len but a few) with pretrain.static_shapes, the
compiled path's setting (MLM logits at every prediction slot: no data-dependent size in the step, one graph).
Tolerance: with dropout off eager and compiled compute the same function and differ only in rounding (inductor
fuses and reorders float32 operations): every logged loss within 2e-5 absolute of the eager run's over 4 steps
(the losses are ~4; observed: under 5e-7). Under DDP the compiled 2 x 8 run is compared with one eager
process of batch 16 (fixed-length rows: the same step, tests/training/test_distributed.py) within the same bound.

Slow: inductor compiles the forward and backward graphs with the C++ compiler (about 75 s cold per model on the
shared 2-core machine, seconds with a warm inductor cache, /tmp/torchinductor_$USER, which the 2 ranks of the DDP
test share with this process: they compile the same graphs as the one-process BERT test, at its batch of 8)."""

import json

import pytest
import torch

from bertfactory.errors import ContractError
from training.checkpoint import load_pretrained
from training.config import ModelConfig
from training.models.modernbert.model import ModernBertSettings
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain
from training.trainer import compiled_graphs

from .ranks import launch_ranks

# importing torch._dynamo (model.compile) makes torch.jit warn about its own deprecated internals
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

# dropout off: eager and compiled then compute the same function and differ only in rounding
TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)
TINY_MODERN = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48, max_position_embeddings=32,
                          type_vocab_size=1, hidden_dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5,
                          modernbert=ModernBertSettings(global_attn_every_n_layers=2, local_attention=8))
TOLERANCE = 2e-5
CFG = PretrainConfig(batch_size=8, max_steps=4, warmup_steps=1, learning_rate=2e-3, log_every=1, save_every=2, seed=5,
                     static_shapes=True, num_threads=1, device="cpu")


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _fixed_rows(run_factory, name):
    # every row of the same length: one batch shape, so inductor compiles once
    return run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=64, heldout_rows=8)


def _assert_same_curve(compiled, eager_run, losses):
    eager = _metrics(eager_run)
    assert [m["step"] for m in compiled] == [m["step"] for m in eager] == [1, 2, 3, 4]
    for e, c in zip(eager, compiled):
        assert c["tokens"] == e["tokens"] and c["lr"] == e["lr"]
        for key in losses:
            assert abs(c[key] - e[key]) < TOLERANCE, (key, e, c)
    assert "compiled_graphs" not in eager[0]
    # the steps did train (the curves compared are not those of weights that never moved): steps 3 and 4 changed
    # the step-2 checkpoint's weights. Not "the loss fell": over 4 tiny steps it need not, and on torch 2.11
    # (scripts/torch_compat.sh) ModernBERT's eager loss rose from step 1 to 4 where 2.13's fell
    early = load_pretrained(eager_run / "pretrain" / "checkpoints" / "step-2")[0].state_dict()
    final = load_pretrained(eager_run / "pretrain" / "final")[0].state_dict()
    moved = [name for name, weight in final.items() if not torch.equal(weight, early[name])]
    assert moved, "no weight changed after step 2"


def _assert_no_recompiles(compiled):
    counts = [m["compiled_graphs"] for m in compiled]
    assert counts[0] >= 1 and counts == [counts[0]] * len(counts), counts  # all compiled in step 1


@pytest.mark.slow
@pytest.mark.parametrize("model_cfg, objective, losses", [
    (TINY, "mlm_nsp", ("loss", "mlm_loss", "nsp_loss")),
    (TINY_MODERN, "modernbert_mlm", ("loss", "mlm_loss")),
], ids=["bert", "modernbert"])
def test_compiled_model_trains_to_the_eager_losses_without_recompiling(run_factory, model_cfg, objective, losses):
    eager_run, compiled_run = (_fixed_rows(run_factory, name) for name in ("eager", "compiled"))
    cfg = CFG.model_copy(update={"objective": objective})
    pretrain(model_cfg, cfg, eager_run)
    pretrain(model_cfg, cfg.model_copy(update={"compile": True}), compiled_run)

    compiled = _metrics(compiled_run)
    _assert_same_curve(compiled, eager_run, losses)
    _assert_no_recompiles(compiled)
    model, _, _ = load_pretrained(compiled_run / "pretrain" / "final")  # plain parameter names, loadable eagerly
    assert not any("_orig_mod" in name for name in model.state_dict())
    torch.compiler.reset()


@pytest.mark.slow
def test_compiled_model_under_ddp_with_two_gloo_ranks_trains_to_the_eager_losses(run_factory):
    eager_run, ddp_run = (_fixed_rows(run_factory, name) for name in ("eager16", "ddp"))
    cfg = CFG.model_copy(update={"batch_size": 16})  # 8 rows per rank: the one-process test's compiled shapes
    pretrain(TINY, cfg, eager_run)
    summaries = launch_ranks(TINY, cfg.model_copy(update={"compile": True}), ddp_run, world=2, timeout=900)
    assert [s["world_size"] for s in summaries] == [2, 2]

    compiled = _metrics(ddp_run)  # rank 0's: the losses averaged over the ranks, its own graph count
    _assert_same_curve(compiled, eager_run, ("loss", "mlm_loss", "nsp_loss"))
    _assert_no_recompiles(compiled)


def test_compile_is_part_of_the_resume_fingerprint(tiny_run):
    cfg = PretrainConfig(batch_size=16, max_steps=4, warmup_steps=1, log_every=1, save_every=1)
    assert "compile" not in PretrainConfig.RESUME_NEUTRAL
    pretrain(TINY, cfg, tiny_run, stop_after=1)
    with pytest.raises(ContractError, match="pretrain.compile \\(checkpoint False, now True\\)"):
        pretrain(TINY, cfg.model_copy(update={"compile": True}), tiny_run)


def _unpadded_runs(run_factory, compiled_settings: dict) -> tuple[list[dict], list[dict], int]:
    """ModernBERT unpadded (pretrain.unpad) on rows of varied length: the eager packed run and a compiled one with
    `compiled_settings` -> (eager metrics, compiled metrics, graphs compiled before the compiled run)."""
    eager_run, compiled_run = (run_factory(name, max_seq_len=24, min_seq_len=10, train_rows=64, heldout_rows=8)
                               for name in ("eager-unpad", "compiled-unpad"))
    cfg = CFG.model_copy(update={"objective": "modernbert_mlm", "unpad": True, "max_steps": 6})
    pretrain(TINY_MODERN, cfg, eager_run)
    before = compiled_graphs()  # the count is the process's: earlier tests' graphs are in it
    pretrain(TINY_MODERN, cfg.model_copy(update={"compile": True, **compiled_settings}), compiled_run)
    eager, compiled = _metrics(eager_run), _metrics(compiled_run)
    for e, c in zip(eager, compiled, strict=True):
        assert c["step"] == e["step"] and c["tokens"] == e["tokens"]
        assert abs(c["loss"] - e["loss"]) < TOLERANCE and abs(c["mlm_loss"] - e["mlm_loss"]) < TOLERANCE, (e, c)
    return eager, compiled, before


@pytest.mark.slow
def test_compiled_modernbert_unpadded_on_rows_of_varied_length_trains_to_the_eager_losses(run_factory):
    # configs/modernbert-base.yaml's GPU step: pretrain.unpad (real tokens only, varlen attention with the local
    # layers' window) with compile and static_shapes; rows of varied length, so the packed token count changes
    # from batch to batch
    eager, compiled, _ = _unpadded_runs(run_factory, {})
    assert len({m["tokens"] for m in eager}) > 1  # the packed shapes did change
    # the first change of the packed token count recompiles once with it symbolic (step 2); nothing after that.
    # Observed on torch 2.13 CPU: 5 graphs, then 10 (the packing's nonzero and its longest-row read split the
    # forward; the static-shape gather of the masked rows keeps the head and loss in one graph)
    counts = [m["compiled_graphs"] for m in compiled]
    assert counts[0] >= 1 and counts[1:] == [counts[1]] * (len(counts) - 1) and counts[1] <= 2 * counts[0], counts
    torch.compiler.reset()


@pytest.mark.slow
def test_compiled_modernbert_in_the_fixed_layout_trains_to_the_unpadded_eager_losses(run_factory):
    # pretrain.unpad_layout fixed: every slot kept, each row's padding a sequence of its own; shapes of [B, T] alone
    # and no host read, so CUDA graphs (reduce-overhead) are allowed with unpad, on the eager packed curve
    _, compiled, before = _unpadded_runs(run_factory, {"unpad_layout": "fixed", "compile_mode": "reduce-overhead"})
    # one graph for the forward and loss (no break: nothing read on the host), recompiled at most once, when a
    # batch's longest row (its width T) first changes
    counts = [m["compiled_graphs"] - before for m in compiled]
    assert counts[0] == 1 and counts[-1] <= 2 and counts == sorted(counts), counts
    torch.compiler.reset()
