"""Write the Prefect Kubernetes work-pool base job templates of the pretrain-gpu and pretrain-tpu deployments.

Each template is the Kubernetes worker's own default (prefect-kubernetes: job_configuration + variables, what
`prefect work-pool get-default-base-job-template --type kubernetes` prints) with bertfactory's additions:

- both: `completions` / `parallelism` moved from the pod spec (where the default has them, invalid for the
  Kubernetes Job schema) to the Job spec; the run volume (a PersistentVolumeClaim mounted at /runs, where the
  deployments' run_dir lives) and a memory-backed /dev/shm (DataLoader workers and NCCL need more than the
  container runtime's 64 MB);
- gpu: `nvidia.com/gpu` limit from the `gpus` variable, the default command `torchrun --nproc_per_node=gpu
  infra/docker/torchrun_flow_run.py` (a process per GPU, rank 0 the flow run), the NVIDIA taint tolerated, an
  optional node selector (e.g. cloud.google.com/gke-accelerator), the CUDA image (infra/docker/Dockerfile.cuda);
- tpu: `google.com/tpu` limit from `tpu_chips`, GKE's TPU node selectors (accelerator + topology; single-host
  slices), PJRT_DEVICE=TPU in the container, the torch-xla image (infra/docker/Dockerfile.tpu).

The JSON files next to this script are its output and are committed; tests/infra/test_prefect_templates.py checks
that they are up to date and renders them through the real Kubernetes worker. Regenerate / check:

    .venv/bin/python infra/prefect/base_job_templates.py            # rewrite the JSON files
    .venv/bin/python infra/prefect/base_job_templates.py --check    # exit 1 if they differ
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
IMAGE_TAG = "0.1.0"  # the project version (pyproject.toml); images are never referenced as `latest`
RUNS_MOUNT = "/runs"
IMAGE_WORKDIR = "/opt/bertfactory"  # WORKDIR of infra/docker/Dockerfile.*
TORCHRUN_COMMAND = (f"torchrun --standalone --nnodes=1 --nproc_per_node=gpu "
                    f"{IMAGE_WORKDIR}/infra/docker/torchrun_flow_run.py")


def default_template() -> dict[str, Any]:
    """The Kubernetes worker's default base job template (needs prefect-kubernetes installed)."""
    try:
        from prefect_kubernetes.worker import KubernetesWorker
    except ImportError:
        raise SystemExit("prefect-kubernetes is not installed: "
                         "pip install -c constraints.txt prefect-kubernetes") from None
    return copy.deepcopy(KubernetesWorker.get_default_base_job_template())


def _container(template: dict[str, Any]) -> dict[str, Any]:
    return template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]


def _pod_spec(template: dict[str, Any]) -> dict[str, Any]:
    return template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]


def _add_variables(template: dict[str, Any], variables: dict[str, dict[str, Any]]) -> None:
    template["variables"]["properties"].update(variables)


def _pretrain_template(base: dict[str, Any], pool: str, image: str, additions: str) -> dict[str, Any]:
    """A copy of `base` with the image default, the run volume at /runs and a memory-backed /dev/shm: what every
    pretraining pod needs."""
    template = copy.deepcopy(base)
    template["variables"]["description"] = (
        f"Variables of bertfactory's {pool.upper()} pool (infra/prefect/base-job-template-{pool}.json): the "
        f"Kubernetes worker's defaults plus {additions} and the run volume.")
    # The worker's default puts the Job fields `completions` / `parallelism` into the pod spec, which the
    # Kubernetes Job schema does not allow there (strict validation rejects it): they belong to the Job spec.
    job_spec = template["job_configuration"]["job_manifest"]["spec"]
    for field in ("completions", "parallelism"):
        value = _pod_spec(template).pop(field, None)
        if value is not None:
            job_spec[field] = value
    template["variables"]["properties"]["image"]["default"] = image
    _add_variables(template, {
        "runs_volume_claim": {
            "title": "Runs volume claim", "type": "string", "default": "bertfactory-runs",
            "description": f"PersistentVolumeClaim mounted at {RUNS_MOUNT} (run directories: the deployment's "
                           "run_dir must be under it); infra/k8s/runs-pvc.yaml creates one"},
        "shm_size": {
            "title": "Shared memory size", "type": "string", "default": "16Gi",
            "description": "size limit of the memory-backed /dev/shm (DataLoader workers, NCCL)"},
    })
    _container(template)["volumeMounts"] = [{"name": "runs", "mountPath": RUNS_MOUNT},
                                            {"name": "dshm", "mountPath": "/dev/shm"}]
    _pod_spec(template)["volumes"] = [
        {"name": "runs", "persistentVolumeClaim": {"claimName": "{{ runs_volume_claim }}"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "{{ shm_size }}"}},
    ]
    return template


def gpu_template(base: dict[str, Any]) -> dict[str, Any]:
    template = _pretrain_template(base, "gpu", f"bertfactory-cuda:{IMAGE_TAG}", "GPUs, node selection")
    _add_variables(template, {
        "gpus": {"title": "GPUs", "type": "integer", "minimum": 1, "default": 1,
                 "description": "NVIDIA GPUs of the pod (the nvidia.com/gpu limit); the default command starts "
                                "one torchrun process per GPU (infra/docker/torchrun_flow_run.py)"},
        "node_selector": {"title": "Node selector", "type": "object", "additionalProperties": {"type": "string"},
                          "default": {},
                          "description": "node labels the pod requires, e.g. "
                                         "{\"cloud.google.com/gke-accelerator\": \"nvidia-l4\"}"},
        "tolerations": {"title": "Tolerations", "type": "array", "items": {"type": "object"},
                        "default": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "description": "taints of GPU nodes the pod tolerates (GKE and the NVIDIA GPU operator "
                                       "taint GPU nodes with nvidia.com/gpu)"},
    })
    _container(template)["resources"]["limits"]["nvidia.com/gpu"] = "{{ gpus }}"
    # the default command: one process per GPU the pod sees, rank 0 the flow run itself (it runs the worker's
    # `prefect flow-run execute`); a deployment may still set `command`
    command = template["variables"]["properties"]["command"]
    command["default"] = TORCHRUN_COMMAND
    command["description"] = ("The command of the flow run's container; by default torchrun with one process per "
                              "GPU, rank 0 the flow run (infra/docker/torchrun_flow_run.py)")
    pod = _pod_spec(template)
    pod["nodeSelector"] = "{{ node_selector }}"
    pod["tolerations"] = "{{ tolerations }}"
    return template


def tpu_template(base: dict[str, Any]) -> dict[str, Any]:
    template = _pretrain_template(base, "tpu", f"bertfactory-tpu:{IMAGE_TAG}", "the GKE TPU slice (single host)")
    _add_variables(template, {
        "tpu_accelerator": {
            "title": "TPU accelerator", "type": "string", "default": "tpu-v5-lite-podslice",
            "enum": ["tpu-v4-podslice", "tpu-v5-lite-podslice", "tpu-v5p-slice", "tpu-v6e-slice"],
            "description": "GKE TPU type (node label cloud.google.com/gke-tpu-accelerator)"},
        "tpu_topology": {
            "title": "TPU topology", "type": "string", "default": "2x4", "pattern": "^[0-9]+(x[0-9]+){1,2}$",
            "description": "slice topology (node label cloud.google.com/gke-tpu-topology); a single-host slice: "
                           "its chips must all be on the pod's node"},
        "tpu_chips": {
            "title": "TPU chips", "type": "integer", "minimum": 1, "default": 8,
            "description": "TPU chips of the pod (the google.com/tpu limit): all chips of the node, e.g. 8 for "
                           "tpu-v5-lite-podslice 2x4, 4 for tpu-v4-podslice 2x2x1"},
    })
    container = _container(template)
    container["resources"]["limits"]["google.com/tpu"] = "{{ tpu_chips }}"
    # fixed in the manifest: the worker puts the flow run's env first and keeps these unless the run sets them
    container["env"] = [{"name": "PJRT_DEVICE", "value": "TPU"}]
    pod = _pod_spec(template)
    pod["nodeSelector"] = {"cloud.google.com/gke-tpu-accelerator": "{{ tpu_accelerator }}",
                           "cloud.google.com/gke-tpu-topology": "{{ tpu_topology }}"}
    pod["tolerations"] = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    return template


TEMPLATES = {"base-job-template-gpu.json": gpu_template, "base-job-template-tpu.json": tpu_template}


def render(name: str, base: dict[str, Any] | None = None) -> str:
    return json.dumps(TEMPLATES[name](base or default_template()), indent=2, sort_keys=True) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a file is out of date")
    parser.add_argument("--out", type=Path, default=HERE, help="directory of the JSON files (default: here)")
    args = parser.parse_args(argv)
    base = default_template()
    stale = []
    for name in TEMPLATES:
        path, text = args.out / name, render(name, base)
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path))
        else:
            _write_atomic(path, text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run {Path(__file__).name} without --check): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
