"""infra/tpu: the TPU VM scripts pass shellcheck, and a dry run prints the gcloud commands (create with the
accelerator and runtime, copy + install on every host, a worker on host 0) without running anything; missing
settings are named. Creating a TPU VM needs a Google Cloud project, which this machine cannot reach."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import INFRA, REPO

SCRIPTS = sorted((INFRA / "tpu").glob("*.sh"))
SETUP = INFRA / "tpu" / "setup-tpu-vm.sh"


def _shellcheck() -> str:
    return shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")


@pytest.mark.parametrize("path", SCRIPTS + [INFRA / "docker" / "entrypoint.sh"], ids=lambda p: p.name)
def test_shellcheck_clean(path):
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)
    result = subprocess.run([_shellcheck(), "--severity=style", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_is_live(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    assert subprocess.run([_shellcheck(), str(bad)], capture_output=True, timeout=60).returncode != 0


def _dry_run(step, **env):
    base = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TMPDIR": "/tmp"}
    return subprocess.run(["bash", str(SETUP), "--dry-run", step], env={**base, **env}, capture_output=True,
                          text=True, timeout=30)


def test_dry_run_all():
    result = _dry_run("all", GCP_PROJECT="my-project", TPU_ZONE="us-west4-a", TPU_SPOT="1",
                      PREFECT_API_URL="http://prefect.example:4200/api")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5
    create, archive, scp, install, worker = lines
    assert create.startswith("gcloud compute tpus tpu-vm create bertfactory-tpu --project=my-project "
                             "--zone=us-west4-a --accelerator-type=v5litepod-8 --version=v2-alpha-tpuv5-lite")
    assert create.rstrip().endswith("--spot")
    assert archive.startswith(f"git -C {REPO} archive")
    assert "remote-install.sh bertfactory-tpu:" in scp and "--worker=all" in scp
    assert "--worker=all" in install and "remote-install.sh\\ install" in install
    assert "--worker=0" in worker and "worker\\ bertfactory-tpu-vm\\ http://prefect.example:4200/api" in worker


def test_missing_settings_are_named():
    result = _dry_run("create", TPU_ZONE="us-west4-a")
    assert result.returncode == 2 and "GCP_PROJECT" in result.stderr
    result = _dry_run("worker", GCP_PROJECT="p", TPU_ZONE="z")
    assert result.returncode == 2 and "PREFECT_API_URL" in result.stderr
    assert _dry_run("frobnicate").returncode == 2


def test_remote_install_uses_the_xla_pins():
    """The TPU VM gets the torch / torch-xla of scripts/xla_env.sh (and of Dockerfile.tpu)."""
    remote = (INFRA / "tpu" / "remote-install.sh").read_text(encoding="utf-8")
    xla_env = (REPO / "scripts" / "xla_env.sh").read_text(encoding="utf-8")
    torch = re.search(r"^TORCH_VERSION=(\S+)$", remote, re.MULTILINE).group(1)
    xla = re.search(r"^TORCH_XLA_VERSION=(\S+)$", remote, re.MULTILINE).group(1)
    assert f'"torch=={torch}"' in xla_env and f'"torch-xla=={xla}"' in xla_env
    assert "-c \"$SRC/constraints.txt\"" in remote and "--no-deps" in remote
