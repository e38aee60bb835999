"""infra/docker/torchrun_flow_run.py, the command of the GPU pool's job template, for real on the CPU: a flow run of
a `pretrain` deployment on a real Prefect server, executed under `torchrun --nproc_per_node 2` (gloo), ends
Completed with both ranks in one process group (world size 2) and the final model written. On a GPU node the
template's `--nproc_per_node=gpu` starts a rank per GPU of the pod; here, without GPUs, two CPU ranks. The run directory is the training tests' synthetic one (real shards).
Twice: the tiny BERT twin's recipe, and the `pretrain-gpu` deployment's own parameters (configs/bert-base.yaml with
its overrides: the compiled step, pretrain.compile + static_shapes) at a tiny size with `pretrain.device=cpu`, which
compiles once per rank (inductor on the CPU) and never again."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from prefect.client.orchestration import PrefectClient

from flows import stamps

from .conftest import INFRA, REPO, stop

pytestmark = pytest.mark.slow
TINY = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
        "pretrain.max_steps=4", "pretrain.batch_size=8", "pretrain.warmup_steps=1", "pretrain.log_every=1",
        "pretrain.save_every=4", "pretrain.device=cpu", "pretrain.num_threads=1"]


def _synthetic_run(run_dir: Path) -> Path:
    spec = importlib.util.spec_from_file_location("training_fixtures", REPO / "tests" / "training" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_run(run_dir, min_seq_len=32, max_seq_len=32)


async def _flow_run(api: str, run_dir: Path, config: str = "configs/local.yaml", overrides: list[str] = TINY) -> str:
    """A `pretrain` deployment as prefect.yaml declares it (entrypoint, code in the working directory) and a run."""
    from flows.stages import pretrain

    async with PrefectClient(api=api) as client:
        flow_id = await client.create_flow(pretrain)
        deployment_id = await client.create_deployment(
            flow_id=flow_id, name="torchrun-test", entrypoint="flows/stages.py:pretrain",
            pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}])
        flow_run = await client.create_flow_run_from_deployment(
            deployment_id, parameters={"config": config, "run_dir": str(run_dir), "overrides": overrides})
        return str(flow_run.id)


def test_two_ranks_one_flow_run(entrypoint_server, tmp_path):
    run_dir = _two_ranks(entrypoint_server, tmp_path)
    assert stamps.recorded_summary(run_dir, "pretrain")["world_size"] == 2


def test_the_gpu_deployments_compiled_step_on_two_cpu_ranks(entrypoint_server, tmp_path):
    gpu = next(d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
               if d["name"] == "pretrain-gpu")
    overrides = [o for o in gpu["parameters"]["overrides"] if o != "pretrain.device=cuda"]
    assert {"pretrain.compile=true", "pretrain.static_shapes=true"} <= set(overrides), overrides
    run_dir = _two_ranks(entrypoint_server, tmp_path, gpu["parameters"]["config"], [*overrides, *TINY])
    summary = stamps.recorded_summary(run_dir, "pretrain")
    assert summary["world_size"] == 2 and summary["steps"] == 4, summary
    metrics = [json.loads(line) for line in (run_dir / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    graphs = [m["compiled_graphs"] for m in metrics if "step" in m and "compiled_graphs" in m]
    assert len(graphs) == 4 and graphs[0] >= 1 and len(set(graphs)) == 1, metrics  # compiled at step 1 only


def _two_ranks(entrypoint_server, tmp_path, config: str = "configs/local.yaml", overrides: list[str] = TINY) -> Path:
    """The flow run of a `pretrain` deployment with these parameters under torchrun with 2 gloo ranks: Completed,
    the final model written, both ranks in one group; -> the run directory."""
    api, env, _ = entrypoint_server
    run_dir = _synthetic_run(tmp_path / "run")
    flow_run_id = asyncio.run(_flow_run(api, run_dir, config, overrides))
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nnodes=1", "--nproc_per_node=2",
                str(INFRA / "docker" / "torchrun_flow_run.py")]
    log = tmp_path / "torchrun.log"
    with log.open("w") as out:
        proc = subprocess.Popen(torchrun, cwd=REPO, env={**env, "PREFECT__FLOW_RUN_ID": flow_run_id}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert proc.wait(timeout=400) == 0, log.read_text()[-4000:]
    finally:
        stop(proc)
    state = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=30).json()["state"]
    assert state["type"] == "COMPLETED", (state, log.read_text()[-4000:])
    assert (run_dir / "pretrain" / "final" / "model.safetensors").is_file()
    assert "rank 0 of 2 (gloo)" in log.read_text()
    return run_dir


def test_other_flows_refuse_several_ranks(tmp_path):
    spec = importlib.util.spec_from_file_location("torchrun_flow_run", INFRA / "docker" / "torchrun_flow_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit, match="'evaluate' does not train under torchrun"):
        module.run_other_rank("evaluate", {"config": "configs/local.yaml", "run_dir": str(tmp_path)})
