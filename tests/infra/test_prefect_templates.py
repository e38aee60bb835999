"""infra/prefect/base-job-template-{gpu,tpu}.json: up to date with their generator, accepted by the Prefect server's
own work-pool validation, and rendered by the real Kubernetes worker (prefect-kubernetes) into Job manifests that
pass strict Kubernetes schema validation, with the GPU / TPU resources, node selection and PJRT_DEVICE in place.
prefect.yaml's pretrain-gpu / pretrain-tpu job variables are validated against the templates' variables."""

import asyncio
import importlib.util
import json
import uuid

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.objects import FlowRun
from prefect.server.schemas.actions import WorkPoolCreate
from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

from .conftest import INFRA, REPO

K8S_VERSION = "1.33.0"
TEMPLATES = {name: INFRA / "prefect" / f"base-job-template-{name}.json" for name in ("gpu", "tpu")}
DEPLOYMENTS = {"gpu": "pretrain-gpu", "tpu": "pretrain-tpu"}


def _template(name):
    return json.loads(TEMPLATES[name].read_text(encoding="utf-8"))


def _render(name, values):
    """The Job manifest the Kubernetes worker would submit for a flow run with these job variables. The templates
    hold no block or Prefect-variable references, so the client (pointing nowhere) is never called."""
    client = PrefectClient(api="http://127.0.0.1:9/api")
    config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(_template(name), values,
                                                                                  client=client))
    config.prepare_for_flow_run(FlowRun(id=uuid.uuid4(), name="brave-otter", flow_id=uuid.uuid4()))
    return config.job_manifest


def _container(manifest):
    return manifest["spec"]["template"]["spec"]["containers"][0]


def _generator():
    spec = importlib.util.spec_from_file_location("base_job_templates", INFRA / "prefect" / "base_job_templates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_json_files_are_up_to_date(tmp_path, capsys):
    generator = _generator()
    for name, path in TEMPLATES.items():
        assert path.read_text(encoding="utf-8") == generator.render(path.name), f"{path.name} is out of date: run " \
            "infra/prefect/base_job_templates.py"
    # --check reports a stale file and the writer makes it current, atomically (no temporary file left over)
    (tmp_path / "base-job-template-gpu.json").write_text("{}")
    assert generator.main(["--check", "--out", str(tmp_path)]) == 1
    assert generator.main(["--out", str(tmp_path)]) == 0 and generator.main(["--check", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in TEMPLATES.values())


@pytest.mark.parametrize("name", TEMPLATES)
def test_server_accepts_the_template(name):
    """The server's validation of a work pool's base job template (every placeholder declared, a valid variables
    schema with defaults of the right type)."""
    template = _template(name)
    pool = WorkPoolCreate(name=f"bertfactory-{name}", type="kubernetes", base_job_template=template)
    assert pool.base_job_template == template
    jsonschema.Draft7Validator.check_schema(template["variables"])
    defaults = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    jsonschema.validate(defaults, template["variables"])


def test_server_rejects_an_undeclared_placeholder():
    template = _template("gpu")
    template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["priorityClassName"] = "{{ prio }}"
    with pytest.raises(ValueError, match="prio"):
        WorkPoolCreate(name="broken", type="kubernetes", base_job_template=template)


@pytest.mark.parametrize("name", TEMPLATES)
def test_rendered_job_is_valid_kubernetes(name):
    manifest = _render(name, {})
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    container = _container(manifest)
    if name == "tpu":  # the worker's command: the flow run itself
        assert container["args"] == ["prefect", "flow-run", "execute"]
    else:  # under torchrun, one process per GPU (tests/infra/test_torchrun_flow_run.py runs this command)
        assert container["args"] == ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=gpu",
                                     "/opt/bertfactory/infra/docker/torchrun_flow_run.py"]
    assert {"mountPath": "/runs", "name": "runs"} in container["volumeMounts"]
    assert manifest["spec"]["completions"] == 1 and manifest["spec"]["parallelism"] == 1


def test_gpu_resources():
    manifest = _render("gpu", {"gpus": 4, "image": "registry.example.com/bertfactory-cuda:0.1.0",
                               "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    container, pod = _container(manifest), manifest["spec"]["template"]["spec"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4  # torchrun: a rank per GPU the pod sees
    assert "--nproc_per_node=gpu" in container["args"]
    custom = _container(_render("gpu", {"command": "python -m prefect.engine"}))["args"]
    assert custom == ["python", "-m", "prefect.engine"]  # a deployment's own command wins
    assert container["image"] == "registry.example.com/bertfactory-cuda:0.1.0"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert _render("gpu", {})["spec"]["template"]["spec"]["containers"][0]["image"] == "bertfactory-cuda:0.1.0"


def test_tpu_resources_and_pjrt():
    manifest = _render("tpu", {"tpu_accelerator": "tpu-v6e-slice", "tpu_topology": "2x2", "tpu_chips": 4,
                               "env": {"BERTFACTORY_EXTRA": "1"}})
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    container, pod = _container(manifest), manifest["spec"]["template"]["spec"]
    assert container["resources"]["limits"]["google.com/tpu"] == 4
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                                   "cloud.google.com/gke-tpu-topology": "2x2"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PJRT_DEVICE"] == "TPU" and env["BERTFACTORY_EXTRA"] == "1" and "PREFECT__FLOW_RUN_ID" in env
    assert [e["name"] for e in container["env"]].count("PJRT_DEVICE") == 1


def test_variables_reject_bad_values():
    variables = _template("tpu")["variables"]
    for bad in ({"tpu_chips": 0}, {"tpu_topology": "eight"}, {"tpu_accelerator": "tpu-v1"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, variables)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"gpus": 0}, _template("gpu")["variables"])


@pytest.mark.parametrize("name", TEMPLATES)
def test_prefect_yaml_job_variables_fit_the_template(name):
    """The deployments of prefect.yaml pass job variables this pool accepts, and they render to a valid Job."""
    prefect_yaml = yaml.safe_load((REPO / "prefect.yaml").read_text(encoding="utf-8"))
    deployments = {d["name"]: d for d in prefect_yaml["deployments"]}
    job_variables = deployments[DEPLOYMENTS[name]]["work_pool"].get("job_variables", {})
    jsonschema.validate(job_variables, _template(name)["variables"])
    image = job_variables.get("image", _template(name)["variables"]["properties"]["image"]["default"])
    assert image.rsplit(":", 1)[0].endswith(f"bertfactory-{'cuda' if name == 'gpu' else 'tpu'}"), \
        f"{DEPLOYMENTS[name]} must run the image of infra/docker/Dockerfile.{'cuda' if name == 'gpu' else 'tpu'}"
    kubernetes_validate.validate(_render(name, job_variables), K8S_VERSION, strict=True)
