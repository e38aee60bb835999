"""pretrain.parallelism fsdp (training/fsdp.py) on the CPU with gloo, 2 processes launched as torchrun does: the
loss curve of FSDP 2 x B equals DDP 2 x B and one process x 2B, each rank holds half the parameters, a resume
reproduces the uninterrupted run, checkpoints cross between FSDP, DDP and one process both ways, and LAMB's trust
ratio sees the full parameter norms.

Tolerance: rel 1e-5 / abs 1e-6 on the losses (as the DDP test): the sharded gradient norm (partial norms of the
shards, all-reduced) and the reduce-scatter sum the same numbers in another order than one process does, so the
clipping factor and the updates differ in the last float32 bits, and the losses drift by ~1e-7 relative over 8
steps. A resume on the same layout is exact (==): it restores the same bits (gathered, then re-sharded)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertfactory.config import validate
from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

from .conftest import make_run
from .ranks import launch_ranks

pytestmark = pytest.mark.slow  # torchrun-style process groups: several 2-rank runs

# no dropout: the ranks' dropout masks over B rows cannot be the one process's masks over 2B rows
NO_DROPOUT = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                         hidden_dropout=0.0, attention_dropout=0.0)
CFG = PretrainConfig(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3, log_every=1, save_every=4,
                     seed=11, num_threads=1, device="cpu")
FSDP = CFG.model_copy(update={"parallelism": "fsdp"})
LOSSES = ("loss", "mlm_loss", "nsp_loss")

def _launch(cfg: PretrainConfig, run: Path, stop_after: int | None = None, world: int = 2) -> list[dict]:
    """What torchrun does (tests/training/ranks.py); each rank's summary."""
    return launch_ranks(NO_DROPOUT, cfg, run, world=world, stop_after=stop_after, timeout=600)  # a bound for a hang


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def _assert_same_curve(got: list[dict], want: list[dict], exact: bool = False) -> None:
    assert [m["step"] for m in got] == [m["step"] for m in want] == list(range(1, CFG.max_steps + 1))
    for a, b in zip(want, got):
        assert b["tokens"] == a["tokens"] and b["lr"] == a["lr"]  # the same samples, the same schedule
        for key in LOSSES:
            if exact:
                assert b[key] == a[key], (key, a, b)
            else:
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)


def _fixed_length_run(root: Path, name: str) -> Path:
    # fixed-length instances: every row has the same number of masked tokens, so the ranks' mean losses over B
    # rows, averaged, are the one process's mean over 2B rows (training/distributed.py)
    return make_run(root / name, min_seq_len=32, max_seq_len=32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Trained once for the module: one process x 16 (in this process) and FSDP 2 x 8, both uninterrupted,
    and FSDP stopped after its step-4 checkpoint (the run every resume below starts from)."""
    root = tmp_path_factory.mktemp("fsdp")
    single = _fixed_length_run(root, "single")
    pretrain(NO_DROPOUT, CFG, single)
    fsdp = _fixed_length_run(root, "fsdp")
    summaries = _launch(FSDP, fsdp)
    stopped = _fixed_length_run(root, "stopped")
    _launch(FSDP, stopped, stop_after=4)
    return {"root": root, "single": single, "fsdp": fsdp, "fsdp_summaries": summaries, "stopped": stopped}


def test_fsdp_two_processes_train_like_ddp_and_one_process_with_half_the_parameters_each(runs):
    ddp = _fixed_length_run(runs["root"], "ddp")
    ddp_summaries = _launch(CFG, ddp)
    single, fsdp = _metrics(runs["single"]), _metrics(runs["fsdp"])
    _assert_same_curve(fsdp, single)
    _assert_same_curve(fsdp, _metrics(ddp))
    assert fsdp[-1]["loss"] < fsdp[0]["loss"]  # it trained (the comparison is not between two idle runs)
    final_single = load_file(str(runs["single"] / "pretrain/final/model.safetensors"))
    final_fsdp = load_file(str(runs["fsdp"] / "pretrain/final/model.safetensors"))  # gathered, written by rank 0
    assert final_fsdp.keys() == final_single.keys()
    assert all(torch.allclose(final_single[k], final_fsdp[k], rtol=1e-4, atol=1e-5) for k in final_single)

    # memory: each rank holds its dim-0 shards, together every parameter exactly once; uneven dim 0 puts at most
    # one row of each parameter more on a rank
    total = runs["fsdp_summaries"][0]["parameters"]
    local = [s["parameters_on_this_rank"] for s in runs["fsdp_summaries"]]
    assert sum(local) == total
    assert all(abs(n - total / 2) <= 0.02 * total for n in local), (local, total)
    assert [s["parameters_on_this_rank"] for s in ddp_summaries] == [total, total]  # DDP: a full replica each
    print(f"fsdp parameters per rank {local} of {total}")


def test_fsdp_resume_reproduces_the_uninterrupted_run_and_checkpoints_cross_layouts(runs):
    stopped = runs["stopped"]
    assert [m["step"] for m in _metrics(stopped)] == [1, 2, 3, 4]
    assert (stopped / "pretrain/checkpoints/step-4/model.safetensors").is_file()
    # the FSDP checkpoint holds the full model (what one process saves), not shards
    saved = load_file(str(stopped / "pretrain/checkpoints/step-4/model.safetensors"))
    assert saved["bert.embeddings.word_embeddings.weight"].shape == (45, 32)
    copies = {name: runs["root"] / f"from-fsdp-{name}" for name in ("ddp", "single")}
    for copy in copies.values():
        shutil.copytree(stopped, copy)

    summaries = _launch(FSDP, stopped)  # FSDP resumes its own checkpoint: the uninterrupted run, bit for bit
    assert summaries[0]["resumed_from_step"] == 4
    _assert_same_curve(_metrics(stopped), _metrics(runs["fsdp"]), exact=True)

    _launch(CFG, copies["ddp"])  # DDP resumes the FSDP checkpoint (model and optimiser state)
    assert pretrain(NO_DROPOUT, CFG, copies["single"])["resumed_from_step"] == 4  # and so does one process
    for copy in copies.values():
        _assert_same_curve(_metrics(copy), _metrics(runs["single"]))


def test_fsdp_resumes_a_single_process_checkpoint(runs, tmp_path):
    run = _fixed_length_run(tmp_path, "single-then-fsdp")
    pretrain(NO_DROPOUT, CFG, run, stop_after=4)  # one process writes step-4 (torch's own optimiser state)
    summaries = _launch(FSDP, run)
    assert summaries[0]["resumed_from_step"] == 4
    _assert_same_curve(_metrics(run), _metrics(runs["single"]))


def test_lamb_under_fsdp_uses_the_full_parameter_norms(tmp_path):
    # LAMB scales each weight's update by ||w|| / ||update||: on shards, the shard norms would give each rank
    # another ratio. The DTensor norms are all-reduced (sum of squared shard norms), so FSDP's LAMB steps are one
    # process's
    lamb = CFG.model_copy(update={"optimizer": "lamb", "learning_rate": 1e-2})
    single = _fixed_length_run(tmp_path, "single")
    pretrain(NO_DROPOUT, lamb, single)
    fsdp = _fixed_length_run(tmp_path, "fsdp")
    _launch(lamb.model_copy(update={"parallelism": "fsdp"}), fsdp)
    _assert_same_curve(_metrics(fsdp), _metrics(single))
    assert _metrics(fsdp)[-1]["loss"] < _metrics(fsdp)[0]["loss"]


def test_fsdp_alone_trains_unsharded_like_one_process(runs, tmp_path):
    run = _fixed_length_run(tmp_path, "alone")
    summary = pretrain(NO_DROPOUT, FSDP, run)  # world size 1: a warning, nothing to shard
    assert summary["parameters_on_this_rank"] == summary["parameters"]
    _assert_same_curve(_metrics(run), _metrics(runs["single"]), exact=True)


@pytest.mark.parametrize("update, message", [
    ({"optimizer": "adafactor"}, "adafactor is not supported with parallelism fsdp"),
    ({"device": "xla", "static_shapes": True}, "parallelism fsdp runs on cpu or cuda"),
    ({"compile": True}, "not implemented with pretrain.compile"),
])
def test_fsdp_refuses_what_it_cannot_shard(update, message):
    with pytest.raises(ConfigError, match=message):
        validate(PretrainConfig, {"parallelism": "fsdp", **update}, "pretrain")
    validate(PretrainConfig, {"parallelism": "ddp", **update}, "pretrain")  # fine without FSDP
