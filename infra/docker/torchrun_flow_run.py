"""One Prefect flow run of the `pretrain` flow on every GPU of a pod: the command of the GPU pool's job template
(infra/prefect/base-job-template-gpu.json), started by torchrun with one process per GPU.

    torchrun --standalone --nnodes=1 --nproc_per_node=N infra/docker/torchrun_flow_run.py

The Kubernetes worker puts the flow run's id (PREFECT__FLOW_RUN_ID) and the API (PREFECT_API_URL) into the pod.
Rank 0 is the flow run itself (`prefect flow-run execute`: its states, logs, artifacts, parameter checks and the
run-directory lock). Ranks 1..N-1 read the same flow run's parameters from the API and run the same stage without
Prefect, as `torchrun ... bertfactory pretrain --no-prefect` ranks do (flows.stages.run_stage, no lock: rank 0 holds
it). torchrun's RANK / WORLD_SIZE / MASTER_* make training/distributed.py join them into one process group; when
one rank fails torchrun stops the others, and the flow run ends Crashed or Failed. With N = 1 this is exactly
`prefect flow-run execute`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from uuid import UUID

DISTRIBUTED_FLOWS = ("pretrain",)  # the flows whose stage trains under torchrun


def flow_run_parameters(flow_run_id: str) -> tuple[str, dict]:
    """(flow name, parameters) of a flow run, from the Prefect API the environment names."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(UUID(flow_run_id))
        return client.read_flow(flow_run.flow_id).name, dict(flow_run.parameters)


def run_other_rank(flow_name: str, parameters: dict) -> dict:
    """What rank k > 0 runs: the flow's stage on the flow run's parameters, checked as the flow checks them."""
    from bertfactory.config import validate
    from flows.params import StageParams
    from flows.recipe import load_recipe
    from flows.stages import run_stage

    if flow_name not in DISTRIBUTED_FLOWS:
        raise SystemExit(f"torchrun_flow_run: flow {flow_name!r} does not train under torchrun (only "
                         f"{', '.join(DISTRIBUTED_FLOWS)}); run it with one process per pod (gpus: 1)")
    params = validate(StageParams, parameters, f"the parameters of flow {flow_name!r}")
    recipe = load_recipe(params.config, params.overrides)
    return run_stage(flow_name, recipe, Path(params.run_dir).resolve())


def main() -> int:
    flow_run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not flow_run_id:
        raise SystemExit("torchrun_flow_run: PREFECT__FLOW_RUN_ID is not set (Prefect's worker sets it for a flow run)")
    if int(os.environ.get("RANK", "0")) == 0:
        # the engine of this Python (the image's), whatever PATH says
        os.execv(sys.executable, [sys.executable, "-m", "prefect", "flow-run", "execute", flow_run_id])
    flow_name, parameters = flow_run_parameters(flow_run_id)
    run_other_rank(flow_name, parameters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
