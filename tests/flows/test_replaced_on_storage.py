"""On a run directory on object storage, replaced outputs are moved aside in the bucket too (copied beside, then the
originals removed: object storage has no rename), never deleted; `bertfactory clean URL --yes` deletes them there."""

from __future__ import annotations

import argparse
import json

import pytest

from bertfactory import storage
from bertfactory.run_location import resolve_run_dir
from flows.clean import cmd_clean
from flows.stage_runner import run_cached
from tests.storage_servers import s3_bucket


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("runs") as url:
        yield url


def _distill(run_dir, value):
    def action():
        (run_dir / "distill").mkdir(parents=True, exist_ok=True)
        (run_dir / "distill/results.json").write_text(json.dumps({"v": value}))
        (run_dir / "distill/report.md").write_text(f"# {value}")
        return {"v": value}
    return action


def test_a_new_key_moves_the_bucket_outputs_aside_and_clean_deletes_them(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    url = storage.join(bucket, "r1")
    run_dir = resolve_run_dir(url)
    run_dir.mkdir(parents=True, exist_ok=True)
    assert run_cached("distill", run_dir, "a" * 64, _distill(run_dir, 1))["status"] == "ran"
    assert json.loads(storage.read_bytes(storage.join(url, "distill/results.json"))) == {"v": 1}

    assert run_cached("distill", run_dir, "b" * 64, _distill(run_dir, 2))["status"] == "ran"
    files = storage.list_files(url)
    aside = sorted({name.split("/", 1)[0] for name in files if name.startswith("distill.replaced-")})
    assert len(aside) == 1 and aside[0].endswith("-" + "a" * 12), files
    assert json.loads(storage.read_bytes(storage.join(url, aside[0], "results.json"))) == {"v": 1}
    assert json.loads(storage.read_bytes(storage.join(url, "distill/results.json"))) == {"v": 2}

    capsys.readouterr()
    assert cmd_clean(argparse.Namespace(run_dir=url, yes=False)) == 0
    assert storage.join(url, aside[0]) in capsys.readouterr().out
    assert cmd_clean(argparse.Namespace(run_dir=url, yes=True)) == 0
    files = storage.list_files(url)
    assert not any(".replaced-" in name for name in files) and "distill/results.json" in files, files
    assert not any(".replaced-" in p.name for p in run_dir.iterdir())


def test_an_extension_on_a_bucket_pulls_its_checkpoint_and_sets_the_later_ones_aside(bucket, tmp_path, monkeypatch):
    from bertfactory.run_location import MARKER
    from flows import run_sync

    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    url = storage.join(bucket, "r2")
    run_dir = resolve_run_dir(url)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".bertfactory").mkdir(exist_ok=True)
    (run_dir / ".bertfactory/pretrain.started.json").write_text(json.dumps({"key": "k"}))
    for step in (5, 10):
        storage.write_bytes(storage.join(url, f"pretrain/checkpoints/step-{step}/model.safetensors"), b"w%d" % step)
        storage.write_bytes(storage.join(url, f"pretrain/checkpoints/step-{step}/{MARKER}"), b"")
    assert run_sync.checkpoint_steps(run_dir) == [5, 10]
    run_sync.after_begin("pretrain", run_dir, 5)
    assert (run_dir / "pretrain/checkpoints/step-5/model.safetensors").read_bytes() == b"w5"
    assert not (run_dir / "pretrain/checkpoints/step-10").exists()
    files = storage.list_files(storage.join(url, "pretrain/checkpoints"))
    moved = [name for name in files if name.startswith("step-10.replaced-") and name.endswith("/model.safetensors")]
    assert len(moved) == 1 and "step-10/model.safetensors" not in files, files
    assert run_sync.checkpoint_steps(run_dir) == [5]  # a later resume never picks the decayed one
