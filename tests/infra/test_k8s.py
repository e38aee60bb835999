"""infra/k8s: every manifest validated (strictly: unknown fields are errors) against the Kubernetes OpenAPI schemas
that kubernetes-validate ships; the worker Deployment's settings are real prefect-kubernetes settings; the RBAC
covers what the worker does. Applying them needs a cluster, which this machine lacks."""

import re

import kubernetes_validate
import pytest
import yaml

from .conftest import INFRA

K8S_VERSION = "1.33.0"  # oldest GKE/EKS version still in standard support when this was written
MANIFESTS = sorted((INFRA / "k8s").glob("*.yaml"))


def _documents():
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                yield path, doc


def _by_kind(kind):
    return [doc for _, doc in _documents() if doc["kind"] == kind]


@pytest.mark.parametrize("path,doc", list(_documents()), ids=lambda x: getattr(x, "name", None) or x.get("kind"))
def test_valid_kubernetes_resource(path, doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert doc["metadata"].get("namespace", "bertfactory") == "bertfactory" or doc["kind"] == "Namespace"


def test_validation_is_live():
    deployment = _by_kind("Deployment")[0]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_one_worker_per_pool_of_prefect_yaml(repo):
    [deployment] = _by_kind("Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    pools = {}
    for container in containers:
        args = container["args"]
        assert args[:3] == ["prefect", "worker", "start"] and args[args.index("--type") + 1] == "kubernetes"
        prefect_pin = re.search(r"^prefect==(\S+)$", (repo / "constraints.txt").read_text(), re.MULTILINE).group(1)
        image, tag = container["image"].rsplit(":", 1)
        assert tag.startswith(prefect_pin + "-") and tag.endswith("-kubernetes"), container["image"]
        pools[args[args.index("--pool") + 1]] = container
    assert set(pools) == {"bertfactory-gpu", "bertfactory-tpu"}
    kube_pools = {d["work_pool"]["name"] for d in yaml.safe_load((repo / "prefect.yaml").read_text())["deployments"]
                  if d["name"] in ("pretrain-gpu", "pretrain-tpu")}
    assert kube_pools == set(pools)
    ports = [c["env"][0]["value"] for c in containers]
    assert len(set(ports)) == len(ports), "two workers in one pod need distinct healthcheck ports"


def test_worker_settings_are_prefect_kubernetes_settings(monkeypatch):
    """The ConfigMap's variable names are the ones prefect-kubernetes reads (a typo would be silently ignored)."""
    from prefect_kubernetes.settings import KubernetesSettings

    [configmap] = _by_kind("ConfigMap")
    for key, value in configmap["data"].items():
        monkeypatch.setenv(key, value)
    settings = KubernetesSettings()
    assert settings.observer.namespaces == {"bertfactory"}
    assert settings.cluster_uid == configmap["data"]["PREFECT_INTEGRATIONS_KUBERNETES_CLUSTER_UID"]


def test_rbac_covers_the_worker():
    [role] = _by_kind("Role")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    needed = {("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")}
    needed |= {("", "pods", v) for v in ("get", "list", "watch")} | {("", "pods/log", "get")}
    assert needed <= granted, needed - granted
    [binding] = _by_kind("RoleBinding")
    [account] = _by_kind("ServiceAccount")
    [deployment] = _by_kind("Deployment")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_runs_claim_is_the_templates_default():
    [claim] = _by_kind("PersistentVolumeClaim")
    import json

    for name in ("gpu", "tpu"):
        template = json.loads((INFRA / "prefect" / f"base-job-template-{name}.json").read_text())
        assert template["variables"]["properties"]["runs_volume_claim"]["default"] == claim["metadata"]["name"]
