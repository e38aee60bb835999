"""WorkingCopy.push_tree against an S3 API server on 127.0.0.1: what a stage's push sends of a directory."""

from __future__ import annotations

import pytest

from bertfactory import storage
from bertfactory.run_location import WorkingCopy
from tests.storage_servers import s3_bucket


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("pushes") as url:
        yield url


def test_push_tree_leaves_out_temporaries_and_a_nested_working_copy_s_bookkeeping(bucket, tmp_path):
    # pretrain/final pulled by its own URL earlier (bertfactory export / --compare-checkpoint) is a nested working
    # copy: its .bertfactory/origin.json and synced.json describe this machine and must not reach the run location
    url = storage.join(bucket, "runs", "x")
    final = tmp_path / "pretrain" / "final"
    (final / ".bertfactory").mkdir(parents=True)
    (final / ".bertfactory" / "origin.json").write_text('{"url": "elsewhere"}')
    (final / ".bertfactory" / "synced.json").write_text("{}")
    (final / "config.json").write_text("{}")
    (final / ".config.json.tmp123").write_text("half")  # an atomic write in progress
    (final / "sub").mkdir()
    (final / "sub" / "weights.bin").write_bytes(b"w")
    wc = WorkingCopy(tmp_path, url)
    assert wc.push_tree("pretrain") == 2
    assert sorted(storage.list_files(storage.join(url, "pretrain"))) == ["final/config.json", "final/sub/weights.bin"]
