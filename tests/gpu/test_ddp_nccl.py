"""DDP over nccl (training/distributed.py) on the GPUs torch sees.

One GPU: the collectives the trainer runs every step (DistContext.mean for the step guard, reduce_step for the
logged values, barrier) and the DDP wrapper, on the process group `from_environment` creates (nccl), in one
process (tests/gpu/rank_worker.py, one-gpu-ddp: NCCL refuses two ranks on one device). Two GPUs or more: 2 nccl
processes x batch B train like one process x 2B through the real stage, as tests/training/test_distributed.py
checks for gloo.

Tolerance of the 2-process test: rel 1e-4 / abs 1e-5 on the losses (the gloo test allows 1e-5). Both runs are
fp32 (`pretrain.bf16: false`; torch leaves TF32 off for matmuls), but CUDA picks GEMM and attention kernels by
shape, so batch B and batch 2B sum the same products in another order, and the all-reduce adds the two ranks'
gradients in its own order: last-bit differences that grow over 8 steps of AdamW."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

pytestmark = pytest.mark.cuda

# no dropout: the ranks' dropout masks over B rows cannot be the one process's masks over 2B rows
NO_DROPOUT = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=32,
                         hidden_dropout=0.0, attention_dropout=0.0)
CFG = PretrainConfig(device="cuda", bf16=False, batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3,
                     log_every=1, save_every=4, seed=11)


def test_one_gpu_nccl_group_runs_the_trainers_collectives_and_ddp(ranks):
    result = ranks.result_line(ranks.launch(1, [ranks.worker, "one-gpu-ddp"])[0], "OK")
    assert "nccl" in result["backend"].lower(), result
    assert result["grad_relative_error"] < 1e-5


def test_two_nccl_processes_of_batch_b_train_like_one_process_of_batch_2b(run_factory, ranks):
    ranks.needs_gpus(2)
    # fixed-length instances: every row holds the same number of predictions, so the ranks' mean losses over B
    # rows, averaged by DDP, are the one process's mean over 2B rows (training/distributed.py)
    one_run, two_run = (run_factory(name, min_seq_len=32, max_seq_len=32) for name in ("one", "two"))
    single = pretrain(NO_DROPOUT, CFG, one_run)
    outputs = ranks.launch(2, [ranks.worker, "pretrain", NO_DROPOUT.model_dump_json(), CFG.model_dump_json(),
                               str(two_run)])
    summaries = [ranks.result_line(out, "SUMMARY") for out in outputs]
    assert single["world_size"] == 1 and [s["world_size"] for s in summaries] == [2, 2]
    assert [s["device"] for s in summaries] == ["cuda:0", "cuda:1"]  # a GPU per rank (LOCAL_RANK)
    one, two = ranks.metrics(one_run), ranks.metrics(two_run)  # rank 0 alone wrote metrics.jsonl
    assert [m["step"] for m in two] == list(range(1, CFG.max_steps + 1))
    ranks.assert_same_curve(two, one, rel=1e-4, abs_=1e-5)
    assert two[-1]["loss"] < two[0]["loss"]  # it trained (the comparison is not between two idle runs)
    final_one = load_file(str(one_run / "pretrain/final/model.safetensors"))
    final_two = load_file(str(two_run / "pretrain/final/model.safetensors"))
    assert final_one.keys() == final_two.keys()
    assert all(torch.allclose(final_one[k], final_two[k], rtol=1e-3, atol=1e-4) for k in final_one)
    assert (two_run / "pretrain/checkpoints/step-4/training_state.pt").is_file()  # rank 0 saved between barriers
