"""A run on object storage whose upload died half-way (an outage, a preempted machine): what the next run, here or on
a fresh machine, makes of it. Against an S3 API server on 127.0.0.1. The rule throughout: the run location is the
truth only for what it committed (a stage's stamp, final/config.json, a directory's marker); work finished here and
never pushed is published, not redone; nothing committed is deleted."""

from __future__ import annotations

import json
import shutil

import pytest

from bertfactory import storage
from bertfactory.io import sha256_file
from bertfactory.run_location import MARKER, WorkingCopy, resolve_run_dir
from flows import run_sync, stamps
from flows.stage_runner import run_cached
from tests.storage_servers import s3_bucket


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("interrupted") as url:
        yield url


@pytest.fixture
def work_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFACTORY_WORK_ROOT", str(tmp_path / "work"))
    return tmp_path / "work"


def _failing_upload(monkeypatch, matches):
    real = storage.upload_file

    def upload(local, url):
        if matches(url):
            raise storage.StorageError(f"{url}: uploading failed (simulated outage)")
        return real(local, url)

    monkeypatch.setattr(storage, "upload_file", upload)
    return real


def _preprocess(run_dir):
    def action():
        (run_dir / "tokenizer").mkdir(parents=True, exist_ok=True)
        (run_dir / "tokenizer/tokenizer.json").write_text("{}")
        (run_dir / "shards/train").mkdir(parents=True, exist_ok=True)
        shard = run_dir / "shards/train/part-00000.arrow"
        shard.write_bytes(b"A" * 1000)
        (run_dir / "shards/manifest.json").write_text(json.dumps({"splits": {"train": {"shards": [
            {"path": "train/part-00000.arrow", "sha256": sha256_file(shard), "rows": 1}]}}}))
        return {"rows": 1}
    return action


def test_shards_the_run_location_alone_holds_survive_the_publication_of_an_unpublished_stamp(bucket, work_root,
                                                                                             monkeypatch):
    # the shards and manifest went up, the stamp did not; then the user freed the working copy's shards (a cache)
    url = storage.join(bucket, "shards-kept")
    run_dir = resolve_run_dir(url)
    real = _failing_upload(monkeypatch, lambda u: u.endswith(".bertfactory/preprocess.json"))
    with pytest.raises(storage.StorageError, match="simulated outage"):
        run_cached("preprocess", run_dir, "k" * 64, _preprocess(run_dir))
    monkeypatch.setattr(storage, "upload_file", real)
    shutil.rmtree(run_dir / "shards/train")

    def must_not_run():
        raise AssertionError("the finished stage ran again")

    assert run_cached("preprocess", run_dir, "k" * 64, must_not_run)["status"] == "up-to-date"
    assert set(storage.list_files(storage.join(url, "shards"))) == {"manifest.json", "train/part-00000.arrow"}
    assert json.loads(storage.read_bytes(storage.join(url, ".bertfactory/preprocess.json")))["key"] == "k" * 64


def test_a_mirrored_push_still_deletes_what_no_stamp_vouches_for(bucket, tmp_path):
    url = storage.join(bucket, "mirror")
    storage.write_bytes(storage.join(url, "shards/train/old-00000.arrow"), b"stale")
    (tmp_path / "shards/train").mkdir(parents=True)
    (tmp_path / "shards/train/new-00000.arrow").write_bytes(b"new")
    (tmp_path / "shards/manifest.json").write_text("{}")
    WorkingCopy(tmp_path, url).push_tree("shards", last=("manifest.json",), mirror=True,
                                         keep={"shards/train/kept-00000.arrow"})
    assert set(storage.list_files(storage.join(url, "shards"))) == {"manifest.json", "train/new-00000.arrow"}


def _evaluate(run_dir, version, calls):
    def action():
        calls.append(version)
        (run_dir / "eval").mkdir(parents=True, exist_ok=True)
        (run_dir / "eval/results.json").write_text(json.dumps({"v": version}))
        (run_dir / "eval/report.md").write_text(f"report {version}\n")
        return {"v": version}
    return action


def test_work_finished_here_and_never_pushed_is_published_not_replaced_by_the_older_copy(bucket, work_root,
                                                                                         monkeypatch):
    url = storage.join(bucket, "newer-here")
    run_dir = resolve_run_dir(url)
    calls = []
    assert run_cached("evaluate", run_dir, "1" * 64, _evaluate(run_dir, 1, calls))["status"] == "ran"
    real = _failing_upload(monkeypatch, lambda u: "/eval/" in u)
    with pytest.raises(storage.StorageError, match="simulated outage"):
        run_cached("evaluate", run_dir, "2" * 64, _evaluate(run_dir, 2, calls))
    monkeypatch.setattr(storage, "upload_file", real)
    # the bucket still holds the first run's stamp, not its results.json (taken down before the changed files
    # went up); the second run's outputs and stamp are newer work, here alone
    assert json.loads(storage.read_bytes(storage.join(url, ".bertfactory/evaluate.json")))["key"] == "1" * 64
    assert not storage.exists(storage.join(url, "eval/results.json"))

    assert run_cached("evaluate", run_dir, "2" * 64, _evaluate(run_dir, 3, calls))["status"] == "up-to-date"
    assert calls == [1, 2]
    assert json.loads(storage.read_bytes(storage.join(url, "eval/results.json"))) == {"v": 2}
    assert json.loads(storage.read_bytes(storage.join(url, ".bertfactory/evaluate.json")))["key"] == "2" * 64


def test_a_file_changed_here_and_in_the_run_location_takes_the_run_location_s_copy(bucket, tmp_path, caplog):
    url = storage.join(bucket, "both-changed")
    wc = WorkingCopy(tmp_path, url)
    (tmp_path / "notes.txt").write_text("first")
    wc.push(["notes.txt"])
    (tmp_path / "notes.txt").write_text("changed here")
    storage.write_bytes(storage.join(url, "notes.txt"), b"changed by another machine")
    assert wc.unpublished("notes.txt")
    assert wc.pull(["notes.txt"]) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "changed by another machine"
    assert not wc.unpublished("notes.txt")
    assert "changed here and in the run location" in caplog.text


def test_a_file_deleted_in_the_run_location_goes_here_only_if_unchanged_since_the_sync(bucket, tmp_path):
    url = storage.join(bucket, "deleted-there")
    wc = WorkingCopy(tmp_path, url)
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("synced")
    wc.push(["a.txt", "b.txt"])
    storage.delete(storage.join(url, "a.txt"))
    storage.delete(storage.join(url, "b.txt"))
    (tmp_path / "b.txt").write_text("written here since")
    assert wc.pull(["a.txt", "b.txt"]) == ["b.txt"]
    assert not (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").read_text() == "written here since"


def _pretrain_outputs(run_dir, weights: bytes):
    final = run_dir / "pretrain/final"
    final.mkdir(parents=True, exist_ok=True)
    (final / "model.safetensors").write_bytes(weights)
    (final / "tokenizer.json").write_text("{}")
    (final / "config.json").write_text(json.dumps({"weights": weights.decode()}))
    (run_dir / "pretrain/summary.json").write_text("{}")


def test_a_final_model_half_pushed_is_never_pulled_as_a_result(bucket, work_root, monkeypatch):
    # pretrain's push died after final/model.safetensors went up, before final/config.json (its commit object)
    url = storage.join(bucket, "half-final")
    run_dir = resolve_run_dir(url)
    stamps.begin(run_dir, "pretrain", "p" * 64)
    run_sync.after_begin("pretrain", run_dir)
    _pretrain_outputs(run_dir, b"new")
    stamps.finish(run_dir, "pretrain", "p" * 64, {})
    real = _failing_upload(monkeypatch, lambda u: u.endswith("final/config.json"))
    with pytest.raises(storage.StorageError):
        run_sync.push_outputs("pretrain", run_dir)
    monkeypatch.setattr(storage, "upload_file", real)
    assert "final/model.safetensors" in storage.list_files(storage.join(url, "pretrain"))

    shutil.rmtree(work_root)  # a fresh machine
    run_dir = resolve_run_dir(url)
    assert run_sync.pull_state("pretrain", run_dir) is False
    assert stamps.plan(run_dir, "pretrain", "p" * 64, remote_outputs=True).action == "keep"
    run_sync.after_begin("pretrain", run_dir)
    assert not (run_dir / "pretrain/final").exists()  # so training.resume finds no result and resumes
    assert (run_dir / "pretrain/summary.json").is_file()


def test_a_final_model_pushed_again_loses_its_commit_object_before_its_files_change(bucket, work_root, monkeypatch):
    url = storage.join(bucket, "final-again")
    run_dir = resolve_run_dir(url)
    _pretrain_outputs(run_dir, b"old")
    stamps.finish(run_dir, "pretrain", "p" * 64, {})
    run_sync.push_outputs("pretrain", run_dir)
    assert storage.exists(storage.join(url, "pretrain/final/config.json"))

    _pretrain_outputs(run_dir, b"extended")  # a longer run's result
    stamps.finish(run_dir, "pretrain", "q" * 64, {})
    real = _failing_upload(monkeypatch, lambda u: u.endswith("final/tokenizer.json"))
    with pytest.raises(storage.StorageError):
        run_sync.push_outputs("pretrain", run_dir)
    # the old config.json over the new weights would pass for a result: it went before them
    assert not storage.exists(storage.join(url, "pretrain/final/config.json"))
    monkeypatch.setattr(storage, "upload_file", real)
    run_sync.push_outputs("pretrain", run_dir)
    assert json.loads(storage.read_bytes(storage.join(url, "pretrain/final/config.json"))) == {"weights": "extended"}
    assert storage.read_bytes(storage.join(url, "pretrain/final/model.safetensors")) == b"extended"


def test_a_checkpoint_saved_again_is_unmarked_while_its_files_change(bucket, tmp_path, monkeypatch):
    url = storage.join(bucket, "checkpoint-again")
    wc = WorkingCopy(tmp_path, url)
    step = tmp_path / "checkpoints/step-10"
    step.mkdir(parents=True)
    (step / "config.json").write_text("{}")
    (step / "model.safetensors").write_bytes(b"first")
    wc.publish_dir("checkpoints/step-10")
    assert wc.complete_dirs("checkpoints") == ["step-10"]
    (step / "model.safetensors").write_bytes(b"second save")
    _failing_upload(monkeypatch, lambda u: u.endswith("model.safetensors"))
    with pytest.raises(storage.StorageError):
        wc.publish_dir("checkpoints/step-10")
    assert wc.complete_dirs("checkpoints") == []
    assert not storage.exists(storage.join(url, f"checkpoints/step-10/{MARKER}"))


def test_urls_that_differ_by_repeated_slashes_are_one_run_location(bucket, work_root):
    url = storage.join(bucket, "slashes")
    doubled = url.replace("slashes", "/runs//slashes/")
    assert storage.normalize(doubled) == storage.join(bucket, "runs/slashes")
    run_dir = resolve_run_dir(doubled)
    assert run_dir == resolve_run_dir(storage.join(bucket, "runs/slashes"))
    (run_dir / "a.txt").write_text("x")
    WorkingCopy.of(run_dir).push(["a.txt"])
    assert storage.exists(storage.join(bucket, "runs/slashes/a.txt"))


def test_a_working_copy_tied_to_another_spelling_is_re_tied(bucket, work_root, caplog):
    url = storage.join(bucket, "retied")
    run_dir = resolve_run_dir(url)
    (run_dir / ".bertfactory/origin.json").write_text(json.dumps({"url": url.replace("retied", "/retied")}))
    (run_dir / ".bertfactory/synced.json").write_text("{}")
    assert resolve_run_dir(url) == run_dir
    assert json.loads((run_dir / ".bertfactory/origin.json").read_text()) == {"url": url}
    assert not (run_dir / ".bertfactory/synced.json").exists()
    assert "was tied to" in caplog.text


def test_export_over_an_output_url_that_fails_leaves_the_previous_output_and_no_scratch(bucket, work_root, tmp_path,
                                                                                        monkeypatch, capsys):
    import tempfile

    from flows.cli import main

    url = storage.join(bucket, "exports/m")
    for name in ("config.json", "model.safetensors", MARKER):
        storage.write_bytes(storage.join(url, name), b"the previous export")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    (tmp_path / "not-a-model").mkdir()
    assert main(["export", str(tmp_path / "not-a-model"), "--to", "hf", url, "--overwrite"]) != 0
    assert "not-a-model" in capsys.readouterr().err
    assert sorted(storage.list_files(url)) == sorted([".complete", "config.json", "model.safetensors"])
    assert list((tmp_path / "scratch").iterdir()) == []


def test_a_replaced_output_url_is_never_a_mixed_model_directory(bucket, tmp_path, monkeypatch):
    from bertfactory.run_location import publish_local_dir

    url = storage.join(bucket, "exports/replaced")
    for name in ("config.json", "model.safetensors", "old-only.bin", MARKER):
        storage.write_bytes(storage.join(url, name), b"old")
    new = tmp_path / "new"
    new.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (new / name).write_text("new")
    seen = []
    real = storage.upload_file

    def upload(local, target):
        # while the new files go up, the URL holds no config.json: `localize` refuses it instead of mixing
        seen.append((target.rsplit("/", 1)[1], storage.exists(storage.join(url, "config.json"))))
        return real(local, target)

    monkeypatch.setattr(storage, "upload_file", upload)
    publish_local_dir(new, url, replace=True)
    assert seen == [("model.safetensors", False), ("tokenizer.json", False), ("config.json", False)]
    assert sorted(storage.list_files(url)) == [".complete", "config.json", "model.safetensors", "tokenizer.json"]
    assert storage.read_bytes(storage.join(url, "model.safetensors")) == b"new"
