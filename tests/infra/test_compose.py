"""infra/compose/compose.yaml against the Compose Specification's JSON schema (the copy check-jsonschema vendors),
plus what the schema cannot see: images and build files exist, health-gated start order, the worker and server
agree on the API, the database URL matches the PostgreSQL service. Starting the stack needs a Docker daemon,
which this machine lacks; the server-on-PostgreSQL path itself is tested in tests/flows/server/."""

import copy
import importlib.resources
import json
import re

import jsonschema
import pytest
import yaml

from .conftest import INFRA, REPO

COMPOSE = INFRA / "compose" / "compose.yaml"


@pytest.fixture(scope="module")
def schema():
    text = (importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text()
    return json.loads(text)


@pytest.fixture
def compose():
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _errors(schema, doc):
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return sorted(validator.iter_errors(doc), key=str)


def test_valid_against_the_compose_spec(schema, compose):
    errors = _errors(schema, compose)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


@pytest.mark.parametrize("mutation", ["unknown_key", "bad_healthcheck", "bad_depends_condition"])
def test_schema_rejects_broken_files(schema, compose, mutation):
    """The schema check is live: typical mistakes fail it."""
    broken = copy.deepcopy(compose)
    worker = broken["services"]["worker"]
    if mutation == "unknown_key":
        worker["enviroment"] = {"A": "1"}
    elif mutation == "bad_healthcheck":
        worker["healthcheck"]["test"] = {"cmd": "true"}
    else:
        worker["depends_on"]["prefect-server"]["condition"] = "service_ready"
    assert _errors(schema, broken)


def test_server_postgres_worker(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "prefect-server", "worker"}
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: {image} must be pinned"
        for dependency in service.get("depends_on", {}).values():
            assert dependency["condition"] == "service_healthy"
    # start order: postgres -> server -> worker, each waiting for the previous one's health
    assert set(services["prefect-server"]["depends_on"]) == {"postgres"}
    assert set(services["worker"]["depends_on"]) == {"prefect-server"}
    # named volumes exist for every volume a service mounts
    for service in services.values():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source in compose["volumes"], f"volume {source} is not declared"


def test_images_build_from_the_cpu_dockerfile(compose):
    for name in ("prefect-server", "worker"):
        build = compose["services"][name]["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == REPO
        dockerfile = (context / build["dockerfile"]).read_text(encoding="utf-8")
        assert re.search(rf"^FROM .* AS {build['target']}$", dockerfile, re.MULTILINE)
    assert compose["services"]["prefect-server"]["command"] == ["server"]
    assert compose["services"]["worker"]["command"][0] == "worker"  # infra/docker/entrypoint.sh verbs


def test_database_and_api_urls_agree(compose):
    services = compose["services"]
    pg = services["postgres"]["environment"]
    url = services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    match = re.fullmatch(r"postgresql\+asyncpg://(\w+):(\S+)@postgres:5432/(\w+)", url)
    assert match, url
    assert (match.group(1), match.group(2), match.group(3)) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"],
                                                                pg["POSTGRES_DB"])
    assert services["worker"]["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    published = services["prefect-server"]["ports"][0]
    assert published.startswith("127.0.0.1:")  # the UI/API are not exposed beyond the host by default


def test_worker_pool_is_the_process_pool_of_prefect_yaml(compose):
    """The compose worker polls the work pool that prefect.yaml's process deployments use."""
    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]
    pool = compose["services"]["worker"]["environment"]["PREFECT_WORK_POOL"]
    default = re.fullmatch(r"\$\{\w+:-([\w-]+)\}", pool).group(1)
    assert default in {d["work_pool"]["name"] for d in deployments}


def test_the_documented_deploy_step_can_deploy_every_deployment_it_names(compose):
    """The deploy command that compose.yaml's header and infra/README.md give (`compose run --rm worker ...`) runs
    on a server where only the worker's own pool exists: `prefect deploy` refuses a deployment whose pool does not
    exist and stops there (a bare `prefect deploy --all` ended at pretrain-gpu), so it must create the pools
    first (`bertfactory deploy --pool-setup`) or deploy only to the worker's pool."""
    deployments = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))["deployments"]
    worker_pool = re.fullmatch(r"\$\{\w+:-([\w-]+)\}",
                               compose["services"]["worker"]["environment"]["PREFECT_WORK_POOL"]).group(1)
    commands = []
    for doc in (COMPOSE, INFRA / "README.md"):
        for line in doc.read_text(encoding="utf-8").splitlines():
            if match := re.search(r"compose\.yaml run --rm worker (.*?)(?:\s+#.*)?$", line):
                commands.append((doc.name, match.group(1).strip()))
    assert {name for name, _ in commands} == {"compose.yaml", "README.md"}, commands
    for name, command in commands:
        args = command.split()
        if args[:2] == ["bertfactory", "deploy"]:
            assert "--pool-setup" in args, (name, command)
            continue
        assert args[:2] == ["prefect", "deploy"], (name, command)
        chosen = [d for d in deployments if "--all" in args or d["name"] in args]
        missing = {d["name"]: d["work_pool"]["name"] for d in chosen if d["work_pool"]["name"] != worker_pool}
        assert not missing, f"{name}: `{command}` deploys to pools nothing created: {missing}"
