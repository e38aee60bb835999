"""prefect.yaml against a real Prefect server (SQLite): `bertfactory deploy --pool-setup` creates the pools (the
Kubernetes GPU/TPU pools with infra/'s base job templates, though nothing can run there here) and every
deployment; a `pipeline-local` run triggered with `prefect deployment run` and executed by `prefect worker start
--run-once` completes and writes the run directory; the weekly refresh has upcoming runs at its cron times in its
timezone; bad parameters are refused with a message naming them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml

pytestmark = pytest.mark.slow  # real servers and pipeline runs

REPO = Path(__file__).resolve().parents[3]
DEPLOYMENTS = {  # flow/deployment -> work pool, as prefect.yaml says
    "pipeline/pipeline-local": "bertfactory-process",
    "corpus_refresh/corpus-refresh-weekly": "bertfactory-process",
    "pretrain/pretrain-gpu": "bertfactory-gpu",
    "pretrain/pretrain-tpu": "bertfactory-tpu",
    "preprocess/preprocess-dataflow": "bertfactory-process",
}


def test_deploy_creates_pools_and_every_deployment(sqlite_server):
    for name, pool in DEPLOYMENTS.items():
        d = sqlite_server.deployment(name)
        assert d["work_pool_name"] == pool, name
        assert d["enforce_parameter_schema"], name
        if not name.startswith("corpus_refresh"):  # the stage flows take the CLI's --force (issue 35)
            assert d["parameter_openapi_schema"]["properties"]["force"]["type"] == "boolean", name
    pools = {p["name"]: p for p in sqlite_server.api("POST", "/work_pools/filter", json={})}
    assert pools["bertfactory-process"]["type"] == "process"
    gpu, tpu = pools["bertfactory-gpu"], pools["bertfactory-tpu"]
    assert gpu["type"] == tpu["type"] == "kubernetes"
    # the pools carry infra/'s templates, and the deployments' job variables fit them
    job = gpu["base_job_template"]["job_configuration"]["job_manifest"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpus }}"
    assert "tpu_chips" in tpu["base_job_template"]["variables"]["properties"]
    gpu_vars = sqlite_server.deployment("pretrain/pretrain-gpu")["job_variables"]
    assert gpu_vars["image"].startswith("bertfactory-cuda:") and gpu_vars["gpus"] >= 1
    assert sqlite_server.deployment("pretrain/pretrain-tpu")["job_variables"]["image"].startswith("bertfactory-tpu:")
    # container deployments run the image's copy of the code, process ones this checkout
    steps = sqlite_server.deployment("pretrain/pretrain-gpu")["pull_steps"]
    assert steps == [{"prefect.deployments.steps.set_working_directory": {"directory": "/opt/bertfactory"}}]
    steps = sqlite_server.deployment("pipeline/pipeline-local")["pull_steps"]
    assert steps[0]["prefect.deployments.steps.set_working_directory"]["directory"] == str(REPO)


def test_pipeline_local_run_completes_with_its_outputs(sqlite_server, pipeline_runs):
    run = sqlite_server.flow_run(pipeline_runs["good"])
    assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{pipeline_runs['worker_output'][-6000:]}"
    assert run["name"] == "pipeline:local@run"  # flow:recipe@run-directory
    run_dir = pipeline_runs["run_dir"]
    for rel in ("shards/manifest.json", "pretrain/final/model.safetensors", "eval/results.json", "eval/report.md"):
        assert (run_dir / rel).is_file(), rel
    from preprocessing.shards import read_manifest

    manifest = read_manifest(run_dir / "shards")  # validated on read
    assert len(manifest.inputs_seen) == 4 and manifest.tokenizer.vocab_size <= 1000
    # every stage published its markdown artifact to the server
    artifacts = sqlite_server.api("POST", "/artifacts/filter",
                                  json={"artifacts": {"flow_run_id": {"any_": [pipeline_runs["good"]]}}})
    keys = {a["key"] for a in artifacts}
    assert {"preprocess-summary", "pretrain-summary", "evaluate-summary"} <= keys, keys


def _cron_times(minute: int, hour: int, weekday: int, tz: ZoneInfo, after: datetime, n: int) -> list[datetime]:
    """The next `n` local times `minute hour * * weekday` (cron weekday: 0 = Sunday) in `tz`, as UTC."""
    out, day = [], after.astimezone(tz).date()
    while len(out) < n:
        local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
        if (local.isoweekday() % 7) == weekday and local > after:
            out.append(local.astimezone(timezone.utc))
        day += timedelta(days=1)
    return out


def test_weekly_refresh_has_upcoming_runs_at_its_cron_times(sqlite_server):
    spec = next(d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
                if d["name"] == "corpus-refresh-weekly")
    (schedule,) = spec["schedules"]
    minute, hour, dom, month, weekday = schedule["cron"].split()
    assert (dom, month) == ("*", "*"), "this test reads weekly cron expressions only"
    tz = ZoneInfo(schedule["timezone"])
    deployment = sqlite_server.deployment("corpus_refresh/corpus-refresh-weekly")
    assert deployment["schedules"][0]["schedule"]["timezone"] == schedule["timezone"]

    query = {"sort": "EXPECTED_START_TIME_ASC",
             "deployments": {"id": {"any_": [deployment["id"]]}},
             "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}}
    deadline = time.monotonic() + 180  # a bound for a hang: the scheduler's runs are waited for
    while len(runs := sqlite_server.api("POST", "/flow_runs/filter", json=query)) < 3 and time.monotonic() < deadline:
        time.sleep(1)  # the scheduler service runs every 2 s in this server
    assert len(runs) >= 3, runs
    got = [datetime.fromisoformat(r["expected_start_time"].replace("Z", "+00:00")) for r in runs[:3]]
    created = datetime.fromisoformat(deployment["created"].replace("Z", "+00:00"))
    assert got == _cron_times(int(minute), int(hour), int(weekday), tz, created, 3)
    for r, t in zip(runs, got):
        local = t.astimezone(tz)
        assert (local.hour, local.minute) == (int(hour), int(minute)) and local.isoweekday() % 7 == int(weekday)
        assert r["parameters"]["sources"] == spec["parameters"]["sources"]


def test_a_parameter_of_the_wrong_type_is_refused_naming_it(sqlite_server):
    proc = sqlite_server.run("prefect", "deployment", "run", "pipeline/pipeline-local", "--param", "overrides=5",
                             check=False)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "Validation failed for field 'overrides'" in text, text


def test_an_invalid_override_fails_the_run_with_a_clear_message(sqlite_server, pipeline_runs):
    run = sqlite_server.flow_run(pipeline_runs["bad"])
    assert run["state"]["type"] == "FAILED", run["state"]
    message = run["state"]["message"]
    assert "max_steps" in message and "configs/local.yaml" in message, message
    assert run["run_count"] == 1  # a config error is not retried
    assert not (pipeline_runs["bad_dir"] / "shards").exists()
