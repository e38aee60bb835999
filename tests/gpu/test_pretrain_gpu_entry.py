"""The `pretrain-gpu` deployment as its pod runs it, on this machine's GPUs: prefect.yaml's entry (flow entrypoint,
config, overrides `pretrain.device=cuda` and the compiled step) becomes a flow run on a real Prefect server (started as the images start
it), and the GPU pool's command (`job_variables.command`: torchrun --standalone --nnodes=1 --nproc_per_node=gpu
infra/docker/torchrun_flow_run.py) executes it with one rank per GPU torch sees: rank 0 is the flow run, the others
join its nccl process group (tests/infra/test_torchrun_flow_run.py runs the same on the CPU with 2 gloo ranks).

Only what the image fixes is translated: its /opt/bertfactory (the deployment's working directory) is this checkout
and `torchrun` is this environment's. The recipe is the deployment's own (configs/bert-base.yaml, bf16 autocast
on by default) at a tiny size for 4 steps (model and step overrides), on the training tests' synthetic run directory
(real shards). The run must end Completed, train on CUDA with world size = the GPU count and write its final
model."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
import yaml
from prefect.client.orchestration import PrefectClient

from flows import stamps

pytestmark = pytest.mark.cuda

REPO = Path(__file__).resolve().parents[2]
TINY = ["model.hidden_size=64", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=128",
        "pretrain.max_steps=4", "pretrain.warmup_steps=1", "pretrain.log_every=1", "pretrain.save_every=4"]


def _deployment() -> dict:
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    return next(d for d in spec["deployments"] if d["name"] == "pretrain-gpu")


def _image_root(deployment: dict) -> str:
    steps = [step["prefect.deployments.steps.set_working_directory"] for step in deployment["pull"]
             if "prefect.deployments.steps.set_working_directory" in step]
    assert len(steps) == 1, deployment["pull"]
    return steps[0]["directory"]


async def _flow_run(api: str, deployment: dict, run_dir: Path, overrides: list[str]) -> str:
    """The deployment as prefect.yaml declares it (entrypoint and parameters; code in this checkout) and a run."""
    from flows.stages import pretrain

    params = deployment["parameters"]
    async with PrefectClient(api=api) as client:
        flow_id = await client.create_flow(pretrain)
        deployment_id = await client.create_deployment(
            flow_id=flow_id, name="pretrain-gpu-test", entrypoint=deployment["entrypoint"],
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}])
        flow_run = await client.create_flow_run_from_deployment(
            deployment_id, parameters={"config": params["config"], "run_dir": str(run_dir),
                                       "overrides": [*params["overrides"], *overrides]})
        return str(flow_run.id)


def test_pretrain_gpu_command_runs_the_flow_on_every_gpu(entrypoint_server, run_factory, ranks, tmp_path):
    deployment = _deployment()
    assert deployment["parameters"]["overrides"] == ["pretrain.device=cuda", "pretrain.compile=true",
                                                     "pretrain.static_shapes=true"], deployment
    assert deployment["entrypoint"] == "flows/stages.py:pretrain", deployment
    command = shlex.split(deployment["work_pool"]["job_variables"]["command"])
    root = _image_root(deployment)
    assert command[0] == "torchrun" and "--nproc_per_node=gpu" in command, command
    assert command[-1] == f"{root}/infra/docker/torchrun_flow_run.py", command
    local = [str(Path(sys.executable).parent / "torchrun"), *command[1:-1],
             str(REPO / Path(command[-1]).relative_to(root))]

    api, env, _ = entrypoint_server
    gpus = torch.cuda.device_count()
    run_dir = run_factory("pretrain-gpu", min_seq_len=32, max_seq_len=32)
    # the global batch must split over the ranks (training/data.py): 8 rows per GPU
    flow_run_id = asyncio.run(_flow_run(api, deployment, run_dir, [*TINY, f"pretrain.batch_size={8 * gpus}"]))
    log = tmp_path / "torchrun.log"
    with log.open("w") as out:
        proc = subprocess.Popen(local, cwd=REPO, env={**env, "PREFECT__FLOW_RUN_ID": flow_run_id}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert proc.wait(timeout=500) == 0, log.read_text()[-4000:]
    finally:
        ranks.stop(proc)
    state = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=30).json()["state"]
    assert state["type"] == "COMPLETED", (state, log.read_text()[-4000:])
    summary = stamps.recorded_summary(run_dir, "pretrain")
    assert summary["world_size"] == gpus and summary["steps"] == 4, summary
    assert summary["device"].startswith("cuda"), summary  # cuda (one GPU) or cuda:0 (rank 0 of several)
    assert (run_dir / "pretrain" / "final" / "model.safetensors").is_file()
    metrics = [json.loads(line) for line in (run_dir / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    graphs = [m["compiled_graphs"] for m in metrics if "compiled_graphs" in m]
    assert graphs and graphs[0] >= 1 and graphs[-1] == graphs[0], metrics  # compiled at step 1, never again
    if gpus > 1:
        assert f"rank 0 of {gpus} (nccl)" in log.read_text()
