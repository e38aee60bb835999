"""A preprocessing job killed mid-way (SIGKILL, in the instances stage) leaves nothing published, and the rerun
gives byte-identical tokenizer, shards and manifest to a job that was never interrupted."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _recipe(tmp_path, wiki) -> Path:
    dump = wiki.write_dump(tmp_path / "crash-pages-articles.xml.bz2", wiki.standard_pages())
    recipe = {"corpus": wiki.corpus(dump).model_dump(mode="json"), "preprocess": wiki.config().model_dump(mode="json")}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _run(recipe: Path, run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "preprocessing.pipeline", str(recipe), str(run_dir)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "stats.json"}  # stats.json holds timings, outside the contract


@pytest.mark.slow
def test_sigkill_in_the_instances_stage_then_rerun_is_byte_identical(tmp_path, wiki):
    recipe = _recipe(tmp_path, wiki)
    reference = tmp_path / "reference"
    done = _run(recipe, reference)
    assert done.wait(timeout=600) == 0, done.stderr.read().decode()[-3000:]

    crashed = tmp_path / "crashed"
    job = _run(recipe, crashed)
    marker = crashed / ".preprocess-staging" / "tokenizer" / "tokenizer.json"  # written when the tokenizer is done
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert job.poll() is None, "the job finished before it could be killed: " + job.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the job never reached the instances stage"
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)  # the driver and its Beam workers
    job.wait(timeout=60)
    assert not (crashed / "shards").exists() and not (crashed / "tokenizer").exists(), "a killed job published outputs"

    rerun = _run(recipe, crashed)
    assert rerun.wait(timeout=600) == 0, rerun.stderr.read().decode()[-3000:]
    assert not (crashed / ".preprocess-staging").exists()
    for part in ("shards", "tokenizer"):
        want, got = _files(reference / part), _files(crashed / part)
        assert want.keys() == got.keys()
        assert [name for name in want if want[name] != got[name]] == []
