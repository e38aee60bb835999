"""The installed `bertfactory` from a directory outside the repository, as a new user runs it: the ad-hoc
`preprocess` of their own text files (default recipe from the package), a short `pretrain` by recipe name and
`evaluate --task-file`; no import-time warning noise on `--help` or a real command; `bertfactory doctor`."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.samples import sample_path

CLI = str(Path(sys.executable).parent / "bertfactory")  # the installed console script
REPO = Path(__file__).resolve().parents[2]
# what noise looks like: Beam's missing-apitools line, any root-logger warning, Python warnings, a Beam worker's
# "no staged session" warning (relayed by the runner)
NOISE = re.compile(r"apitools|WARNING root:|\w+Warning: |semi_persistent_directory")


def bertfactory(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    run = subprocess.run([CLI, *args], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"bertfactory {' '.join(args)} exited {run.returncode}:\n{run.stderr[-4000:]}"
    return run


def own_text_files(directory: Path, count: int) -> list[str]:
    """The user's corpus: State of the Union addresses (one file each, real English text)."""
    names = []
    for source in sorted(Path(sample_path("sotu")).rglob("*.txt"))[:count]:
        shutil.copy(source, directory / source.name)
        names.append(source.name)
    return names


def test_help_and_a_command_print_no_warning_noise(tmp_path):
    assert tmp_path.resolve().parts[:len(REPO.parts)] != REPO.parts  # really outside the repository
    help_run = bertfactory("--help", cwd=tmp_path)
    assert help_run.stderr == "" and "recipes" in help_run.stdout and "doctor" in help_run.stdout
    run = bertfactory("describe", "local", cwd=tmp_path)
    assert run.stderr == "" and "1,478,978" in run.stdout


@pytest.mark.slow
def test_adhoc_preprocess_pretrain_and_evaluate_a_task_file_from_outside_the_repository(tmp_path):
    files = own_text_files(tmp_path, 10)
    # the default recipe (local) comes from the installed package: no configs/ here
    pre = bertfactory("preprocess", "--input", *files, "--format", "text", "--out", "run",
                      "--set", "preprocess.heldout_fraction=0.3", cwd=tmp_path)
    assert "Beginning flow run" in pre.stderr  # through Prefect, which logs to stderr
    # no import warning (main process or the local preset's Beam workers), no line printed by a worker itself
    assert NOISE.search(pre.stderr) is None and not re.search(r"^(INFO|WARNING):", pre.stderr, re.M), pre.stderr
    manifest = json.loads((tmp_path / "run" / "shards" / "manifest.json").read_text())
    assert manifest["counts"]["instances"]["train"] > 0 and manifest["counts"]["instances"]["heldout"] > 0
    bertfactory("pretrain", "local", "--run-dir", "run", "--no-prefect", "--set", "pretrain.max_steps=4",
                "--set", "pretrain.warmup_steps=1", "--set", "pretrain.save_every=4", cwd=tmp_path)
    assert (tmp_path / "run" / "pretrain" / "final" / "model.safetensors").is_file()

    lines = ["text\tlabel"] + [f"{'a fine film, well acted' if i % 2 else 'a dull film, badly acted'} ({i})\t"
                               f"{'pos' if i % 2 else 'neg'}" for i in range(160)]
    (tmp_path / "reviews.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    small = ["--set", "evaluate.finetune.epochs=1", "--set", "evaluate.finetune.num_seeds=1",
             "--set", "evaluate.finetune.max_seq_len=32", "--set", "evaluate.finetune.batch_size=16",
             "--set", "evaluate.finetune.max_train_examples=80", "--set", "evaluate.finetune.max_eval_examples=40",
             "--set", "evaluate.num_threads=1"]
    ev = bertfactory("evaluate", "run", "--task-file", "reviews.tsv", "--task-type", "classification", *small,
                     cwd=tmp_path)
    results = json.loads((tmp_path / "run" / "eval" / "results.json").read_text())
    assert "reviews" in results["tasks"] and "reviews accuracy · pretrained" in ev.stdout
    assert results["tasks"]["reviews"]["data"]["label_names"] == ["neg", "pos"]


def test_doctor_reports_versions_paths_and_what_each_optional_path_misses(tmp_path):
    import torch

    run = bertfactory("doctor", cwd=tmp_path, BERTFACTORY_CACHE=str(tmp_path / "cache"))
    out = run.stdout
    for section in ("versions", "XLA", "samples", "Prefect", "devices", "optional paths"):
        assert f"\n{section}\n" in f"\n{out}", out
    for dist in ("torch", "apache-beam", "prefect", "transformers"):
        assert re.search(rf"^  {dist} +{re.escape(importlib.metadata.version(dist))}$", out, re.M), out
    assert f"cache    {tmp_path / 'cache'} ($BERTFACTORY_CACHE)" in out and "fetched  0 of " in out
    assert "(`bertfactory samples fetch`)" in out
    assert re.search(rf"CPU cores +{len(os.sched_getaffinity(0))} usable of {os.cpu_count()}", out)
    if torch.backends.mkl.is_available():  # the branch MKL runs, read from MKL itself
        assert re.search(r"CPU kernels +.*; MKL runs CNR:[A-Z0-9]+", out), out
    gpu = re.search(r"^  GPU +(.*)$", out, re.M).group(1)
    assert gpu.startswith("ready") == (torch.version.cuda is not None and torch.cuda.is_available()), gpu
    for path in ("XLA", "PostgreSQL", "Dataflow"):
        assert re.search(rf"^  {path} +(ready \(.+\)|missing: .+)$", out, re.M), out
    assert ("API           none set" in out) == ("PREFECT_API_URL" not in os.environ)


def test_doctor_names_the_xla_environment_it_misses(tmp_path, monkeypatch, capsys):
    from flows import doctor

    monkeypatch.setattr(doctor, "xla_env_dir", lambda: tmp_path / "no-venv-xla")
    assert doctor.cmd_doctor(None) == 0
    out = capsys.readouterr().out
    assert f"torch-xla env  none at {tmp_path / 'no-venv-xla'}" in out
    assert re.search(r"^  XLA +missing: the XLA environment \(`make setup-xla`", out, re.M)
