"""The processes of the GPU tests (tests/gpu/), started the way torchrun starts ranks (tests/gpu/conftest.py:
launch). Not a test module: each mode checks what it can only check inside a rank and prints one result line.

    python tests/gpu/rank_worker.py pretrain MODEL_JSON PRETRAIN_JSON RUN_DIR  # the stage -> SUMMARY {...}
    python tests/gpu/rank_worker.py one-gpu-ddp                                # DDP + DistContext -> OK {...}
    python tests/gpu/rank_worker.py one-gpu-fsdp                               # FSDP2 bf16 policy -> OK {...}

The one-gpu modes run on a single GPU: NCCL refuses two ranks on one device, so instead of two processes they
call training/distributed.py's `from_environment` as rank 0 of 2 would (WORLD_SIZE=2: the repository's own
backend choice and device placement) while the group it creates holds this process alone (init_process_group's
explicit rank 0 / world size 1). Every collective then really runs through the repository's process group with
a predictable result: a sum over one member, which DistContext divides by its world size 2.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from training.distributed import DistContext, from_environment, unwrap  # noqa: E402
from training.models.bert.model import BertConfig, BertForPreTraining  # noqa: E402

CONFIG = BertConfig(vocab_size=512, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256,
                    max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)


def pretrain_rank(model_json: str, cfg_json: str, run_dir: str) -> None:
    from training.config import ModelConfig
    from training.pretrain_config import PretrainConfig
    from training.pretrain import pretrain

    summary = pretrain(ModelConfig(**json.loads(model_json)), PretrainConfig(**json.loads(cfg_json)), Path(run_dir))
    print("SUMMARY", json.dumps(summary), flush=True)


def random_batch(device: torch.device, batch: int = 8, seq_len: int = 48, predictions: int = 6,
                 vocab: int = CONFIG.vocab_size) -> dict:
    """Full-length pretraining batch (MLM + NSP) with `predictions` masked positions per row."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch, seq_len), generator=g)
    positions = torch.stack([torch.randperm(seq_len - 2, generator=g)[:predictions] + 1 for _ in range(batch)])
    positions = positions.sort(dim=1).values
    labels = ids.gather(1, positions)
    types = (torch.arange(seq_len) >= seq_len // 2).long().expand(batch, seq_len).contiguous()
    out = {"input_ids": ids.scatter(1, positions, 4), "token_type_ids": types,
           "attention_mask": torch.ones_like(ids), "masked_positions": positions, "masked_labels": labels,
           "nsp_labels": torch.randint(0, 2, (batch,), generator=g)}
    return {k: v.to(device) for k, v in out.items()}


def one_member_group() -> tuple[DistContext, torch.device, str]:
    """from_environment as rank 0 of 2, its process group created with this process as the only member (see the
    module docstring); the backend it asked for."""
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2")
    real_init, asked = dist.init_process_group, []

    def init(*args, **kwargs):
        asked.append(kwargs.get("backend", args[0] if args else None))
        return real_init(*args, **{**kwargs, "rank": 0, "world_size": 1})

    dist.init_process_group = init
    try:
        ctx, device = from_environment(torch.device("cuda"))
    finally:
        dist.init_process_group = real_init
    assert len(asked) == 1, asked
    assert ctx.world_size == 2 and ctx.enabled and device == torch.device("cuda", 0), (ctx, device)
    assert torch.cuda.current_device() == 0
    assert "nccl" in str(dist.get_backend()).lower(), dist.get_backend()
    return ctx, device, str(asked[0])


def relative_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    a = torch.cat([g.detach().float().flatten() for g in got])
    b = torch.cat([w.detach().float().flatten() for w in want])
    return float((a - b).norm() / b.norm())


def one_gpu_ddp() -> dict:
    """DistContext's DDP wrapper and collectives on the nccl group: DDP gradients equal to the unwrapped model's,
    then the values the trainer logs and the step guard reads (float64 sums) and a barrier."""
    ctx, device, backend = one_member_group()
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG).to(device).train()
    reference = copy.deepcopy(model)
    wrapped = ctx.wrap(model, device)
    assert type(wrapped).__name__ == "DistributedDataParallel" and unwrap(wrapped) is model
    batch = random_batch(device)
    loss = wrapped(**batch)["loss"]
    loss.backward()
    ref_loss = reference(**batch)["loss"]
    ref_loss.backward()
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=0), (loss, ref_loss)
    # DDP averaged the gradients over the group (one member): the same gradients, up to the atomics of the
    # fused attention / embedding backward kernels
    grads = [p.grad for p in model.parameters()]
    ref_grads = [p.grad for p in reference.parameters()]
    assert all(g is not None for g in grads)
    error = relative_error(grads, ref_grads)
    assert error < 1e-5, error
    # the trainer's collectives (training/trainer.py: the step guard's mean loss, the logged step values)
    assert ctx.mean(3.0) == 1.5
    scalars, tokens = ctx.reduce_step({"loss": 2.0, "mlm_loss": 1.0, "mlm_correct": 5, "mlm_count": 7}, 100)
    assert scalars == {"loss": 1.0, "mlm_loss": 0.5, "mlm_correct": 5.0, "mlm_count": 7.0}, scalars
    assert tokens == 100
    ctx.barrier()
    ctx.shutdown()
    return {"backend": backend, "loss": loss.item(), "grad_relative_error": error}


@dataclasses.dataclass(frozen=True)
class OneMemberContext(DistContext):
    """A DistContext over the one-member group: `enabled` (a process group exists) with world size 1, so that
    training/fsdp.py shards over a mesh of the one device."""

    @property
    def enabled(self) -> bool:
        return True


def one_gpu_fsdp() -> dict:
    """training/fsdp.shard_model with pretrain.fsdp's defaults and bf16 on a one-device nccl mesh: the layers
    compute with bf16 parameters, the sharded master weights and their gradients stay fp32, the loss and the
    gradients match the fp32 model within bf16 rounding, an AdamW step works and the full state gathers fp32."""
    from torch.distributed.tensor import DTensor

    from training.fsdp import full_model_state, is_sharded, local_parameter_count, shard_model
    from training.fsdp_config import FsdpConfig

    ctx, device, backend = one_member_group()
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG).to(device).train()
    reference = copy.deepcopy(model)
    total = sum(p.numel() for p in model.parameters())
    sharded = shard_model(model, OneMemberContext(rank=0, world_size=1, local_rank=0), device, FsdpConfig(),
                          bf16=True)
    assert is_sharded(sharded) and local_parameter_count(sharded) == total
    assert all(isinstance(p, DTensor) and p.dtype == torch.float32 for p in sharded.parameters())

    seen = []  # the dtype of each linear layer's weight while it runs: FSDP's all-gathered compute copy
    hooks = [m.register_forward_pre_hook(lambda mod, args: seen.append(mod.weight.dtype))
             for m in sharded.modules() if isinstance(m, torch.nn.Linear)]
    batch = random_batch(device)
    loss = sharded(**batch)["loss"]
    for hook in hooks:
        hook.remove()
    assert seen and set(seen) == {torch.bfloat16}, seen
    ref_loss = reference(**batch)["loss"]
    assert torch.isfinite(loss)
    # bf16 keeps 8 significant bits (2^-9 relative rounding); the loss is a mean over 48 predictions and the
    # model has 2 layers: 2 % is a margin of ~10x over what this shape shows
    assert abs(loss.item() - ref_loss.item()) <= 2e-2 * abs(ref_loss.item()), (loss.item(), ref_loss.item())
    loss.backward()
    ref_loss.backward()
    grads = [p.grad.full_tensor() for p in sharded.parameters()]
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)  # reduce_dtype float32
    error = relative_error(grads, [p.grad for p in reference.parameters()])
    assert error < 5e-2, error  # bf16 compute: the whole gradient within 5 % in L2
    optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
    optimizer.step()
    state = full_model_state(sharded)
    expected = reference.state_dict()
    assert state.keys() == expected.keys()
    for name, tensor in state.items():
        assert tensor.dtype == torch.float32 and tensor.device.type == "cpu", (name, tensor.dtype, tensor.device)
        assert tensor.shape == expected[name].shape, name
    ctx.shutdown()
    return {"backend": backend, "loss": loss.item(), "fp32_loss": ref_loss.item(), "grad_relative_error": error,
            "parameters": total}


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "pretrain":
        pretrain_rank(*argv[1:4])
    elif mode == "one-gpu-ddp":
        print("OK", json.dumps(one_gpu_ddp()), flush=True)
    elif mode == "one-gpu-fsdp":
        print("OK", json.dumps(one_gpu_fsdp()), flush=True)
    else:
        raise SystemExit(f"rank_worker: unknown mode {mode!r} (pretrain, one-gpu-ddp, one-gpu-fsdp)")


if __name__ == "__main__":
    main(sys.argv[1:])
