"""`bertfactory doctor`: what this installation has and what each optional path still needs, in one screen.

    bertfactory doctor

Prints the versions of the packages the stages run on (from their metadata: nothing heavy is imported for them),
the XLA environment (.venv-xla, made by scripts/xla_env.sh), the samples cache, the Prefect API the commands use,
the devices torch sees, and for each optional path (GPU, the compilers pretrain.compile needs, XLA, PostgreSQL for a
Prefect server, Dataflow) either
"ready" or what is missing and the command that adds it. It only reads; it always exits 0.
"""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import importlib.util
import os
import platform
import shutil
import sys
from pathlib import Path

PACKAGES = ("torch", "apache-beam", "prefect", "transformers", "pyarrow", "tokenizers", "pydantic", "tensorboard",
            "mlflow")
# Beam's `gcp` extra, what the dataflow preset needs where the job is submitted (docs/runners.md)
DATAFLOW_MODULES = {"apitools": "google-apitools", "google.cloud.storage": "google-cloud-storage",
                    "google.auth": "google-auth"}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a missing parent package
        return False


def xla_env_dir() -> Path:
    """Where scripts/xla_env.sh puts the XLA environment (the checkout's .venv-xla links to it)."""
    checkout = Path(__file__).resolve().parents[1] / ".venv-xla"
    if checkout.exists():
        return checkout
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("BERTFACTORY_XLA_VENV") or cache / "bertfactory" / "venv-xla")


def _dist_versions(venv: Path, names: tuple[str, ...]) -> dict[str, str]:
    """Versions of `names` installed in another environment, read from its *.dist-info directory names."""
    found = {}
    for info in venv.glob("lib/python*/site-packages/*.dist-info"):
        dist, _, version = info.name[: -len(".dist-info")].partition("-")
        if dist.lower().replace("-", "_") in names:
            found[dist.lower().replace("-", "_")] = version
    return found


def _section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [title] + [f"  {k:<{width}}  {v}" for k, v in rows] + [""]


def _versions() -> list[tuple[str, str]]:
    from bertfactory import __version__

    rows = [("bertfactory", f"{__version__} ({Path(__file__).resolve().parents[1]})"),
            ("python", f"{platform.python_version()} ({sys.executable})")]
    rows += [(name, _version(name) or "not installed") for name in PACKAGES]
    return rows


def _xla() -> tuple[list[tuple[str, str]], str]:
    venv = xla_env_dir()
    if not (venv / "bin" / "python").exists():
        return [("torch-xla env", f"none at {venv}")], f"missing: the XLA environment (`make setup-xla`, " \
            "scripts/xla_env.sh: torch 2.9.0 + torch-xla 2.9.0 in its own venv, ~4 GB)"
    found = _dist_versions(venv, ("torch", "torch_xla"))
    rows = [("torch-xla env", str(venv.resolve())), ("  torch", found.get("torch", "not installed")),
            ("  torch-xla", found.get("torch_xla", "not installed"))]
    if "torch_xla" not in found:
        return rows, f"missing: torch-xla in {venv} (rerun `make setup-xla`)"
    return rows, "ready (`make test-xla`)"


def _samples() -> list[tuple[str, str]]:
    from bertfactory import samples

    fetched = [name for name in samples.SAMPLES if samples.is_fetched(name)]
    missing = [name for name in samples.SAMPLES if name not in fetched]
    rows = [("cache", str(samples.cache_dir()) + (" ($BERTFACTORY_CACHE)" if "BERTFACTORY_CACHE" in os.environ else "")),
            ("fetched", f"{len(fetched)} of {len(samples.SAMPLES)}")]
    if missing:
        rows.append(("missing", f"{', '.join(missing)} (`bertfactory samples fetch`)"))
    return rows


def _prefect() -> list[tuple[str, str]]:
    from prefect.settings import get_current_settings

    from .prefect_api import configured_api_url

    settings = get_current_settings()
    url = configured_api_url()
    database = settings.server.database.connection_url
    if url:
        from .prefect_api import url_problem

        problem = url_problem(url, timeout=5.0)
        if problem is None:
            shown = f"{url} (answers)"
        elif problem[0] == "misplaced":
            shown = f"{url} (not the API but a Prefect server's address: set PREFECT_API_URL={problem[1]})"
        else:
            shown = f"{url} (does not answer: {problem[1]}; start it, or unset PREFECT_API_URL)"
    else:
        shown = "none set: each command starts a temporary local server (ephemeral API, a SQLite database in " \
                "PREFECT_HOME)"
    rows = [("API", shown), ("PREFECT_HOME", str(settings.home))]
    if not url:
        rows.append(("database", "PostgreSQL" if database and "postgresql" in database.get_secret_value()
                     else "SQLite"))
    return rows


def _devices() -> tuple[list[tuple[str, str]], str]:
    import torch

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = [("CPU cores", f"{usable} usable of {os.cpu_count()}"),
            ("torch build", f"{torch.__version__} (CUDA {torch.version.cuda})" if torch.version.cuda
             else f"{torch.__version__} (CPU only)")]
    from bertfactory.cpu_kernels import describe

    rows.append(("CPU kernels", describe().removeprefix("CPU kernels: ")))
    if not torch.version.cuda:
        return rows, "missing: a CUDA build of torch (this is the CPU build; docs/parallelism.md installs the CUDA " \
            "build of the same version) and a GPU"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    names = [torch.cuda.get_device_name(i) for i in range(count)]
    rows.append(("CUDA devices", ", ".join(names) if names else "none visible"))
    return rows, f"ready ({count} device(s); `make test-gpu`)" if count else "missing: a visible CUDA device"


def _postgres() -> str:
    servers = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres")) or ([shutil.which("postgres")]
                                                                          if shutil.which("postgres") else [])
    missing = [] if servers else ["the PostgreSQL server (`apt-get install postgresql`)"]
    if not _has_module("asyncpg"):
        missing.append("asyncpg (the Prefect server's PostgreSQL driver: `pip install asyncpg`)")
    if missing:
        return "missing: " + "; ".join(missing)
    return f"ready ({servers[0]}; point PREFECT_API_DATABASE_CONNECTION_URL at postgresql+asyncpg://..., " \
        "docs/orchestration.md)"


def _dataflow() -> str:
    missing = [dist for module, dist in DATAFLOW_MODULES.items() if not _has_module(module)]
    if missing:
        beam = _version("apache-beam") or "<beam version>"
        return f"missing: {', '.join(missing)} (`pip install 'apache-beam[gcp]=={beam}'`; docs/runners.md)"
    return "ready (the dataflow preset still needs credentials and preprocess.runner.dataflow.*; docs/runners.md)"


def _compile_path(cuda_build: str | None) -> str:
    """pretrain.compile: whether inductor's compilers are here, for the CPU and, on a CUDA build, for Triton."""
    from training.run_checks import compiler_problem, triton_c_compiler

    cpu = compiler_problem("cpu")
    if not cuda_build:
        return f"missing: {cpu}" if cpu else "ready (CPU: inductor's C++ kernels)"
    cuda = compiler_problem("cuda")
    parts = [f"CPU: missing: {cpu}" if cpu else "CPU: inductor's C++ kernels",
             f"CUDA: missing: {cuda}" if cuda else f"CUDA: Triton, C compiler {triton_c_compiler()}"]
    return ("missing: " if cpu or cuda else "ready (") + "; ".join(parts) + ("" if cpu or cuda else ")")


def report() -> str:
    lines = _section("versions", _versions())
    xla_rows, xla_path = _xla()
    lines += _section("XLA", xla_rows)
    lines += _section("samples", _samples())
    lines += _section("Prefect", _prefect())
    device_rows, gpu_path = _devices()
    lines += _section("devices", device_rows)
    import torch

    lines += _section("optional paths", [("GPU", gpu_path), ("pretrain.compile", _compile_path(torch.version.cuda)),
                                         ("XLA", xla_path), ("PostgreSQL", _postgres()), ("Dataflow", _dataflow())])
    return "\n".join(lines).rstrip() + "\n"


def add_doctor_parser(sub) -> None:
    text = "versions, samples cache, Prefect API, devices, and what each optional path (GPU, XLA, PostgreSQL, " \
        "Dataflow) is missing"
    sub.add_parser("doctor", help=text, description=text + ". Reads only; exits 0.")


def cmd_doctor(args) -> int:
    print(report(), end="")
    return 0
