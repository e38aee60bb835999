"""`bertfactory deploy`: create the work pools that prefect.yaml's deployments need and deploy them to a server.

    prefect server start &                                  # or any Prefect 3 server / Prefect Cloud workspace
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    bertfactory deploy --pool-setup                         # pools (types + infra/ base job templates), then all
    bertfactory deploy --name pipeline-local                # one deployment (repeatable); pools must exist
    bertfactory deploy --list                               # what prefect.yaml deploys, to which pool

The deployments themselves are prefect.yaml (repository root), deployed by Prefect's own `prefect deploy`, so
`prefect deploy --all` gives the same result once the pools exist. This command adds what prefect.yaml can't say:
each pool's type and base job template (WORK_POOLS), and a refusal to deploy to the throwaway ephemeral API
(deployments there vanish with the process). Triggering and watching runs: README.md "Deployments".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal, Sequence

import yaml
from pydantic import Field

from bertfactory.config import StrictModel
from bertfactory.errors import BertfactoryError, ConfigError

REPO = Path(__file__).resolve().parents[1]
PREFECT_FILE = REPO / "prefect.yaml"


class WorkPoolSpec(StrictModel):
    """A work pool a deployment of prefect.yaml runs on."""

    name: str = Field(description="the pool's name, as prefect.yaml's work_pool.name says")
    type: Literal["process", "kubernetes", "docker"] = Field(description="Prefect worker type that serves the pool")
    base_job_template: str | None = Field(
        None, description="base job template JSON, relative to the repository (None: the type's Prefect default)")
    description: str = Field("", description="one line on what runs there")


WORK_POOLS = {p.name: p for p in (
    WorkPoolSpec(name="bertfactory-process", type="process",
                 description="a process worker on a machine with this checkout (local runs, refresh, Beam submits)"),
    WorkPoolSpec(name="bertfactory-gpu", type="kubernetes",
                 base_job_template="infra/prefect/base-job-template-gpu.json",
                 description="Kubernetes jobs on GPU nodes (CUDA image, nvidia.com/gpu resources)"),
    WorkPoolSpec(name="bertfactory-tpu", type="kubernetes",
                 base_job_template="infra/prefect/base-job-template-tpu.json",
                 description="Kubernetes jobs on Cloud TPU nodes (torch-xla image, PJRT_DEVICE=TPU)"),
)}


class DeployError(BertfactoryError):
    """prefect.yaml, a pool or the server is not usable for deploying."""


def read_deployments(prefect_file: Path = PREFECT_FILE) -> list[dict]:
    """prefect.yaml's deployments (YAML anchors resolved), each with a known work pool."""
    try:
        data = yaml.safe_load(Path(prefect_file).read_text(encoding="utf-8"))
    except OSError as err:
        raise DeployError(f"cannot read {prefect_file}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{prefect_file} is not valid YAML: {err}") from None
    deployments = (data or {}).get("deployments") if isinstance(data, dict) else None
    if not isinstance(deployments, list) or not deployments:
        raise ConfigError(f"{prefect_file} has no `deployments:` list")
    for i, d in enumerate(deployments):
        name = d.get("name") if isinstance(d, dict) else None
        pool = ((d.get("work_pool") or {}).get("name")) if isinstance(d, dict) else None
        if not name or not d.get("entrypoint"):
            raise ConfigError(f"{prefect_file}: deployments[{i}] needs a name and an entrypoint")
        if pool not in WORK_POOLS:
            raise ConfigError(f"{prefect_file}: deployment {name!r} uses work pool {pool!r}, which flows/deploy.py "
                              f"does not know; known pools: {', '.join(WORK_POOLS)}")
    return deployments


def select(deployments: list[dict], names: Sequence[str]) -> list[dict]:
    """The deployments named (all when none), in prefect.yaml's order; an unknown name is an error."""
    known = [d["name"] for d in deployments]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"no deployment named {', '.join(map(repr, unknown))} in prefect.yaml; "
                          f"deployments: {', '.join(known)}")
    return [d for d in deployments if not names or d["name"] in names]


def api_url() -> str:
    """The Prefect API deployments go to; refuses the ephemeral API, where they would not outlive the command."""
    from .prefect_api import configured_api_url, misplaced_message, url_problem

    url = configured_api_url()
    if not url:
        raise DeployError(
            "no Prefect server: deployments live on a server, not on the ephemeral API of a local run. Start one "
            "(`prefect server start`, or the compose file of infra/, infra/README.md) and set PREFECT_API_URL, e.g. "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api")
    # checked before `prefect work-pool create` / `prefect deploy`, which otherwise fail in their own way: a
    # traceback of connection errors for a server that is down, "work pool ... does not exist" for a server's base
    # address without /api (its pools were there all along)
    problem = url_problem(url)
    if problem is not None and problem[0] == "misplaced":
        raise DeployError(misplaced_message(url, problem[1]))
    if problem is not None:
        raise DeployError(f"the Prefect API at {url} (PREFECT_API_URL) does not answer ({problem[1]}): start that "
                          "server (`prefect server start`, or the compose file of infra/) or point PREFECT_API_URL "
                          "at the one to deploy to")
    return url


def pool_command(pool: WorkPoolSpec, root: Path = REPO) -> list[str]:
    """`prefect work-pool create` for `pool`, overwriting an existing one (so a changed template is applied)."""
    cmd = ["work-pool", "create", pool.name, "--type", pool.type, "--overwrite"]
    if pool.base_job_template:
        template = root / pool.base_job_template
        if not template.is_file():
            raise DeployError(f"work pool {pool.name!r}: base job template {template} does not exist "
                              "(infra/README.md says what each template is for)")
        cmd += ["--base-job-template", str(template)]
    return cmd


def _prefect(args: list[str], cwd: Path) -> None:
    """Run the prefect CLI of this environment; its output goes straight to the user."""
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", *args]
    print("$ prefect " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, cwd=cwd, env=dict(os.environ))
    if proc.returncode != 0:
        raise DeployError(f"`prefect {' '.join(args)}` exited with {proc.returncode} (its output is above)")


def deploy(names: Sequence[str] = (), pool_setup: bool = False, prefect_file: Path = PREFECT_FILE) -> list[str]:
    """Deploy the named deployments of `prefect_file` (all when none), creating their pools first when
    `pool_setup`. Returns the deployed names. Runs in prefect.yaml's directory: process deployments run the
    code of the checkout that deployed them (Prefect's default pull step is that directory)."""
    prefect_file = Path(prefect_file).resolve()
    chosen = select(read_deployments(prefect_file), names)
    url = api_url()
    print(f"Prefect API: {url}")
    root = prefect_file.parent
    if pool_setup:
        for pool_name in dict.fromkeys(d["work_pool"]["name"] for d in chosen):
            _prefect(pool_command(WORK_POOLS[pool_name], root), root)
    targets = ["--all"] if not names else [a for d in chosen for a in ("--name", d["name"])]
    _prefect(["deploy", "--prefect-file", str(prefect_file), *targets], root)
    return [d["name"] for d in chosen]


def describe(prefect_file: Path = PREFECT_FILE) -> str:
    """One line per deployment: flow/deployment name, pool (type) and schedule."""
    lines = []
    for d in read_deployments(prefect_file):
        flow = d["entrypoint"].rsplit(":", 1)[-1]
        pool = WORK_POOLS[d["work_pool"]["name"]]
        schedules = ", ".join(f"cron '{s['cron']}' {s.get('timezone', 'UTC')}" for s in d.get("schedules") or []
                              if "cron" in s)
        lines.append(f"{flow + '/' + d['name']:<38} pool {pool.name} ({pool.type})"
                     + (f"  schedule {schedules}" if schedules else ""))
    return "\n".join(lines)


def add_deploy_parser(sub) -> None:
    pools = "; ".join(f"{p.name} ({p.type}{', ' + p.base_job_template if p.base_job_template else ''})"
                      for p in WORK_POOLS.values())
    p = sub.add_parser(
        "deploy", help="deploy prefect.yaml's deployments (and their work pools) to a Prefect server",
        description="Deploy the deployments of prefect.yaml (pipeline-local, corpus-refresh-weekly, pretrain-gpu, "
        "pretrain-tpu, preprocess-dataflow) to the Prefect server at PREFECT_API_URL with `prefect deploy`. With "
        f"--pool-setup, first create or update the work pools they use: {pools}. Then trigger a run with "
        "`prefect deployment run 'pipeline/pipeline-local' --param overrides='[\"pretrain.max_steps=200\"]'` and "
        "execute it with `prefect worker start --pool bertfactory-process` (README.md, Deployments).")
    p.add_argument("--pool-setup", action="store_true",
                   help="create (or overwrite) the work pools of the chosen deployments first, with the base job "
                   "templates of infra/prefect/")
    p.add_argument("--name", dest="names", action="append", default=[], metavar="DEPLOYMENT",
                   help="deploy only this deployment (repeatable; default: all of prefect.yaml)")
    p.add_argument("--prefect-file", default=str(PREFECT_FILE), help="the deployments file (default: prefect.yaml "
                   "at the repository root)")
    p.add_argument("--list", action="store_true", help="list the deployments and their pools; deploy nothing")


def cmd_deploy(args) -> int:
    if args.list:
        print(describe(Path(args.prefect_file)))
        return 0
    deployed = deploy(args.names, pool_setup=args.pool_setup, prefect_file=Path(args.prefect_file))
    print(f"deployed: {', '.join(deployed)}")
    return 0
