"""infra/docker: the three Dockerfiles parsed with a real Dockerfile parser (dockerfile-parse) and linted with
hadolint; what they COPY exists, images are pinned (never `latest`), torch / torch-xla / Beam versions match the pins
of the environments they mirror, third-party packages are installed against constraints.txt. Building the images
needs a Docker daemon, which this machine lacks (infra/README.md says what was and was not run)."""

import io
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from .conftest import INFRA, REPO

DOCKERFILES = sorted((INFRA / "docker").glob("Dockerfile.*"))
VARIANTS = {"cpu": "2.13.0", "cuda": "2.13.0", "tpu": "2.9.0"}  # the torch each image must carry


def _pin(text: str, name: str) -> str:
    match = re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE | re.IGNORECASE)
    assert match, f"{name} is not pinned"
    return match.group(1)


def _parse(path: Path) -> DockerfileParser:
    # from a file object: given a path, the parser may write the file back
    return DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))


def _instructions(path: Path, name: str) -> list[dict]:
    return [i for i in _parse(path).structure if i["instruction"] == name]


def _arg_defaults(path: Path) -> dict[str, str]:
    out = {}
    for arg in _instructions(path, "ARG"):
        key, _, value = arg["value"].partition("=")
        out[key] = value
    return out


def test_every_variant_has_a_dockerfile():
    assert {p.suffix.lstrip(".") for p in DOCKERFILES} == set(VARIANTS)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_pinned(path):
    args = _arg_defaults(path)
    stages = set()
    for item in _instructions(path, "FROM"):
        image = item["value"].split()[0]
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), image)
        if image in stages:  # FROM an earlier stage
            continue
        assert "$" not in image, f"{path.name}: FROM {image} uses an ARG without a default"
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest", f"{path.name}: {image} must carry an explicit version tag"
        assert re.search(r"\d", tag), f"{path.name}: {image}: tag without a version"
        if " AS " in item["value"].upper():
            stages.add(item["value"].split()[-1])


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copied_paths_exist(path):
    for item in _instructions(path, "COPY"):
        words = item["value"].split()
        if any(w.startswith("--from=") for w in words):
            continue
        sources = [w for w in words if not w.startswith("--")][:-1]
        for source in sources:
            assert (REPO / source).exists(), f"{path.name} line {item['startline'] + 1}: COPY {source}: no such path"
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    for item in _instructions(path, "COPY"):
        for source in item["value"].split()[:-1]:
            assert source not in ignored, f"{path.name}: {source} is COPYed but excluded by .dockerignore"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_entrypoint_is_the_shared_script(path):
    entrypoints = [i["value"] for i in _instructions(path, "ENTRYPOINT")]
    assert '["/opt/bertfactory/infra/docker/entrypoint.sh"]' in entrypoints
    assert _parse(path).baseimage  # parsed into a final stage


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_versions_match_the_pins(path):
    variant = path.suffix.lstrip(".")
    runs = " ".join(i["value"] for i in _instructions(path, "RUN"))
    torch_pins = re.findall(r"\btorch==([\w.+]+)", runs)
    assert torch_pins == [VARIANTS[variant]], f"{path.name}: torch pins {torch_pins}"
    if variant in ("cpu", "cuda"):  # the main environment: pyproject.toml's torch
        assert f'"torch=={VARIANTS[variant]}"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    else:  # the XLA environment of scripts/xla_env.sh
        xla_env = (REPO / "scripts" / "xla_env.sh").read_text(encoding="utf-8")
        assert f'"torch=={VARIANTS[variant]}"' in xla_env
        xla = re.search(r"torch_xla\[tpu\]==([\w.]+)", runs)
        assert xla and f'"torch-xla=={xla.group(1)}"' in xla_env, f"{path.name}: torch-xla differs from xla_env.sh"
        assert "PJRT_DEVICE=TPU" in " ".join(i["value"] for i in _instructions(path, "ENV"))
    if variant == "cpu":
        assert "--index-url https://download.pytorch.org/whl/cpu torch==" in runs
        beam = _arg_defaults(path)["BEAM_SDK_IMAGE"]
        assert beam.endswith(":" + _pin((REPO / "constraints.txt").read_text(), "apache-beam")), beam
    # every third-party install after torch goes through constraints.txt; the project itself with --no-deps
    for command in re.split(r"&&|\n", runs):
        if "pip install" in command and "torch" not in command:
            assert "-c constraints.txt" in command or "--no-deps ." in command, f"{path.name}: {command.strip()}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_clean(path):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_latest_tag(tmp_path):
    """The lint is live: an unpinned base image fails it."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\n")
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_requirements_script_leaves_out_torch_only(repo):
    script = repo / "infra" / "docker" / "requirements.py"
    out = subprocess.run([sys.executable, str(script), "--without", "torch"], cwd=repo, capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out == [d.replace(" ", "") for d in deps if not d.startswith("torch")]
    # the image's third-party layer is fully pinned: each requirement has an exact pin in constraints.txt
    pinned = {_normalise(line.split("==")[0]) for line in (repo / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    for dep in out:
        name = _normalise(re.match(r"[A-Za-z0-9._-]+", dep).group(0))
        assert name in pinned, f"{name} (pyproject.toml) has no pin in constraints.txt"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def test_entrypoint_dispatch(tmp_path):
    """entrypoint.sh: `worker` needs the pool and the API URL and says which is missing; anything else is exec'd."""
    script = INFRA / "docker" / "entrypoint.sh"
    env = {"PATH": "/usr/bin:/bin"}
    missing = subprocess.run(["bash", str(script), "worker"], env=env, capture_output=True, text=True, timeout=30)
    assert missing.returncode != 0 and "PREFECT_WORK_POOL" in missing.stderr
    passthrough = subprocess.run(["bash", str(script), "echo", "flow-run", "execute"], env=env, capture_output=True,
                                 text=True, timeout=30)
    assert passthrough.returncode == 0 and passthrough.stdout == "flow-run execute\n"


def test_every_image_carries_the_object_storage_clients(repo):
    # a Beam worker or a training node of a run on a bucket reads and writes it (docs/cluster.md)
    script = repo / "infra" / "docker" / "requirements.py"
    out = subprocess.run([sys.executable, str(script), "--without", "torch", "--extra", "s3", "--extra", "gcs"],
                         cwd=repo, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    names = {_normalise(re.match(r"[A-Za-z0-9._-]+", dep).group(0)) for dep in out}
    assert {"s3fs", "gcsfs"} <= names
    pinned = {_normalise(line.split("==")[0]) for line in (repo / "constraints.txt").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    assert {"s3fs", "gcsfs"} <= pinned
    for dockerfile in DOCKERFILES:
        assert "requirements.py --without torch --extra s3 --extra gcs" in dockerfile.read_text(), dockerfile.name
    bad = subprocess.run([sys.executable, str(script), "--extra", "nope"], cwd=repo, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "no optional-dependencies group 'nope'" in bad.stderr


def test_the_cuda_image_has_the_compilers_torch_compile_needs(repo):
    """The pretrain-gpu deployment compiles its step (prefect.yaml): Triton builds its launchers with a C compiler
    and inductor's CPU kernels need a C++ one, which the slim base image lacks (training/run_checks.py)."""
    import yaml

    gpu = next(d for d in yaml.safe_load((repo / "prefect.yaml").read_text())["deployments"]
               if d["name"] == "pretrain-gpu")
    assert "pretrain.compile=true" in gpu["parameters"]["overrides"]
    runs = [i["value"] for i in _instructions(INFRA / "docker" / "Dockerfile.cuda", "RUN")]
    installs = [r for r in runs if "apt-get install" in r]
    assert installs and {"gcc", "g++"} <= set(installs[0].split()), runs
    torch_install = next(i for i, r in enumerate(runs) if "torch==" in r)
    assert runs.index(installs[0]) < torch_install  # a layer below the project's, rebuilt only with the base
