"""flows/deploy.py and prefect.yaml without a server: every deployment's parameters are a valid recipe (what its
first run would check), the pools they name are known with their templates present, names are checked, and
deploying to the ephemeral API, to a server that does not answer or to a server's address without /api is refused. The server tests are tests/flows/server/."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bertfactory.errors import ConfigError
from flows.deploy import PREFECT_FILE, REPO, WORK_POOLS, DeployError, api_url, deploy, describe, pool_command, \
    read_deployments, select
from flows.recipe import load_recipe


def _spec(name: str) -> dict:
    return next(d for d in read_deployments() if d["name"] == name)


def test_every_deployment_has_valid_recipe_parameters():
    names = [d["name"] for d in read_deployments()]
    assert names == ["pipeline-local", "corpus-refresh-weekly", "pretrain-gpu", "pretrain-tpu", "preprocess-dataflow"]
    for d in read_deployments():
        p = d["parameters"]
        if d["name"] == "preprocess-dataflow":
            continue  # needs the user's cloud project: below
        recipe = load_recipe(REPO / p["config"], p["overrides"])
        if d["name"] == "pretrain-tpu":
            assert recipe.pretrain.device == "xla" and recipe.pretrain.xla_spmd
        if d["name"] == "pretrain-gpu":  # the compiled step, whose measured speed-up docs/gpu-step.md quotes
            assert recipe.pretrain.device == "cuda" and recipe.pretrain.compile and recipe.pretrain.static_shapes


@pytest.mark.parametrize("missing", ["project", "region", "temp_location"])
def test_dataflow_deployment_without_its_cloud_settings_fails_naming_them(missing):
    spec = _spec("preprocess-dataflow")
    given = {"project": "p", "region": "europe-west1", "temp_location": "gs://b/tmp"}
    given.pop(missing)
    overrides = spec["parameters"]["overrides"] + [f"preprocess.runner.dataflow.{k}={v}" for k, v in given.items()]
    with pytest.raises(ConfigError, match=missing):
        load_recipe(REPO / spec["parameters"]["config"], overrides)
    given[missing] = "x" if missing != "temp_location" else "gs://b/tmp"
    overrides = spec["parameters"]["overrides"] + [f"preprocess.runner.dataflow.{k}={v}" for k, v in given.items()]
    assert load_recipe(REPO / spec["parameters"]["config"], overrides).preprocess.runner.preset == "dataflow"


def test_pools_and_their_templates():
    for pool in WORK_POOLS.values():
        cmd = pool_command(pool)
        assert cmd[:5] == ["work-pool", "create", pool.name, "--type", pool.type]
        if pool.base_job_template:
            assert Path(cmd[-1]).is_file()
    missing = WORK_POOLS["bertfactory-gpu"].model_copy(update={"base_job_template": "infra/prefect/nope.json"})
    with pytest.raises(DeployError, match="nope.json does not exist"):
        pool_command(missing)


def test_select_checks_names():
    deployments = read_deployments()
    assert [d["name"] for d in select(deployments, ["pretrain-tpu"])] == ["pretrain-tpu"]
    assert len(select(deployments, [])) == len(deployments)
    with pytest.raises(ConfigError, match="no deployment named 'pretrain-cpu'"):
        select(deployments, ["pretrain-cpu"])


def test_unknown_pool_is_refused(tmp_path):
    data = yaml.safe_load(PREFECT_FILE.read_text())
    data["deployments"][0]["work_pool"] = {"name": "somewhere-else"}
    bad = tmp_path / "prefect.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="work pool 'somewhere-else'"):
        read_deployments(bad)


def test_ephemeral_api_is_refused(monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with pytest.raises(DeployError, match="PREFECT_API_URL"):
        api_url()


@pytest.fixture
def no_prefect_command(monkeypatch):
    """Fails the test if deploy() gets as far as running a `prefect` command."""
    def refuse(args, cwd):
        raise AssertionError(f"`prefect {' '.join(args)}` was run")

    monkeypatch.setattr("flows.deploy._prefect", refuse)


def test_a_server_that_does_not_answer_is_refused_in_one_line(monkeypatch, no_prefect_command):
    # it was `prefect work-pool create` failing with a 70-line traceback of connection errors
    from tests.storage_servers import free_port

    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    monkeypatch.setenv("PREFECT_API_URL", url)
    with pytest.raises(DeployError) as err:
        deploy(pool_setup=True)
    assert str(err.value).startswith(f"the Prefect API at {url} (PREFECT_API_URL) does not answer (")
    assert "\n" not in str(err.value)


def test_a_servers_address_without_api_is_refused_naming_the_api_url(monkeypatch, no_prefect_command):
    # it was `prefect deploy` saying "work pool 'bertfactory-process' does not exist" of a pool that did
    import threading
    from http.server import HTTPServer

    from tests.flows.test_prefect_api import ServerRoot

    server = HTTPServer(("127.0.0.1", 0), ServerRoot)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        monkeypatch.setenv("PREFECT_API_URL", url)
        with pytest.raises(DeployError, match=f"set PREFECT_API_URL={url}/api "):
            deploy(["pipeline-local"])
    finally:
        server.shutdown()


def test_list_names_the_schedule():
    text = describe()
    assert "corpus_refresh/corpus-refresh-weekly" in text and "cron '30 2 * * 1' Europe/Berlin" in text


def test_container_deployments_name_files_of_their_image():
    """The images copy the repository to /opt/bertfactory (infra/docker): what a container deployment's command
    and pull step name there must exist here."""
    gpu = _spec("pretrain-gpu")
    (pull,) = gpu["pull"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == "/opt/bertfactory"
    command = gpu["work_pool"]["job_variables"]["command"].split()
    assert command[0] == "torchrun" and "--nproc_per_node=gpu" in command
    script = command[-1]
    assert script.startswith("/opt/bertfactory/") and (REPO / script.removeprefix("/opt/bertfactory/")).is_file()
    for name, dockerfile in (("pretrain-gpu", "Dockerfile.cuda"), ("pretrain-tpu", "Dockerfile.tpu")):
        assert "WORKDIR /opt/bertfactory" in (REPO / "infra" / "docker" / dockerfile).read_text(), dockerfile
        assert _spec(name)["pull"] == gpu["pull"]
