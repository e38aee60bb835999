"""FSDP mixed precision on CUDA (training/fsdp.py, `pretrain.fsdp`): the precision policy the settings give, the
bf16 compute copies with fp32 master shards and gradients on an nccl mesh (one GPU: tests/gpu/rank_worker.py,
one-gpu-fsdp), and with two GPUs or more the real stage under 2 nccl processes: fp32 on one process x 2B's
trajectory (rel 1e-4, as tests/gpu/test_ddp_nccl.py explains) and the default bf16 policy within 5 % of it,
each rank holding half the parameters."""

from __future__ import annotations

import pytest
import torch

from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.fsdp import mixed_precision
from training.fsdp_config import FsdpConfig
from training.pretrain import pretrain

pytestmark = pytest.mark.cuda

NO_DROPOUT = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=32,
                         hidden_dropout=0.0, attention_dropout=0.0)
CFG = PretrainConfig(device="cuda", bf16=False, batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3,
                     log_every=1, save_every=4, seed=11)


@pytest.mark.parametrize("settings, bf16, param, reduce", [
    ({}, True, torch.bfloat16, torch.float32),  # the defaults: bf16 compute copies, fp32 gradient reduction
    ({}, False, torch.float32, torch.float32),  # auto follows pretrain.bf16
    ({"param_dtype": "bfloat16"}, False, torch.bfloat16, torch.float32),
    ({"param_dtype": "float32"}, True, torch.float32, torch.float32),
    ({"reduce_dtype": "bfloat16"}, True, torch.bfloat16, torch.bfloat16),
])
def test_precision_policy_on_cuda(settings, bf16, param, reduce):
    assert torch.cuda.is_bf16_supported(), "bf16 needs compute capability >= 8.0"
    policy = mixed_precision(FsdpConfig(**settings), torch.device("cuda", 0), bf16)
    assert (policy.param_dtype, policy.reduce_dtype) == (param, reduce)


def test_one_gpu_fsdp_computes_in_bf16_with_fp32_master_shards(ranks):
    result = ranks.result_line(ranks.launch(1, [ranks.worker, "one-gpu-fsdp"])[0], "OK")
    assert "nccl" in result["backend"].lower(), result
    assert result["grad_relative_error"] < 5e-2 and result["loss"] != result["fp32_loss"]  # bf16 really ran


def test_two_nccl_processes_fsdp_fp32_and_bf16(run_factory, ranks):
    ranks.needs_gpus(2)
    runs = {name: run_factory(name, min_seq_len=32, max_seq_len=32) for name in ("single", "fp32", "bf16")}
    pretrain(NO_DROPOUT, CFG, runs["single"])  # one process x 16, fp32, in this process
    summaries = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        cfg = CFG.model_copy(update={"parallelism": "fsdp", "bf16": bf16})
        outputs = ranks.launch(2, [ranks.worker, "pretrain", NO_DROPOUT.model_dump_json(), cfg.model_dump_json(),
                                   str(runs[name])])
        summaries[name] = [ranks.result_line(out, "SUMMARY") for out in outputs]
    single = ranks.metrics(runs["single"])
    ranks.assert_same_curve(ranks.metrics(runs["fp32"]), single, rel=1e-4, abs_=1e-5)
    bf16 = ranks.metrics(runs["bf16"])
    ranks.assert_same_curve(bf16, single, rel=5e-2, abs_=1e-3)
    assert bf16[-1]["loss"] < bf16[0]["loss"]  # it trained
    for name, pair in summaries.items():
        assert [s["device"] for s in pair] == ["cuda:0", "cuda:1"] and [s["world_size"] for s in pair] == [2, 2]
        total, local = pair[0]["parameters"], [s["parameters_on_this_rank"] for s in pair]
        assert sum(local) == total and all(abs(n - total / 2) <= 0.02 * total for n in local), (name, local)
    assert (runs["bf16"] / "pretrain/final/model.safetensors").is_file()  # gathered by every rank, written by rank 0
