"""Shard schema versions: v2 shards carry lang_a/lang_b/segment_index; v1 shards (written before v2, without those
columns) still read, with the new fields 0; a v2 shard that lacks them is refused."""

import json

import pyarrow as pa
import pytest

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import V2_COLUMNS, ShardSet


def _rewrite(shard_dir, version: str, drop: tuple[str, ...]) -> None:
    manifest = json.loads((shard_dir / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for info in split["shards"]:
            path = shard_dir / info["path"]
            table = pa.ipc.open_stream(path.read_bytes()).read_all()
            table = table.drop_columns(list(drop)).replace_schema_metadata({b"bertfactory.schema_version": version.encode()})
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            info["sha256"] = sha256_file(path)
    manifest["schema_version"] = int(version)
    (shard_dir / "manifest.json").write_text(json.dumps(manifest))


def test_v1_shards_still_read_and_v2_without_its_columns_is_refused(tmp_path, wiki):
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    run_preprocess(wiki.corpus(dump), wiki.config(preset="in_process"), tmp_path / "run")
    shard_dir = tmp_path / "run/shards"
    v2 = [(list(i.input_ids), i.len_a, i.doc_id, list(i.mask_positions)) for i in ShardSet.open(shard_dir)]
    _rewrite(shard_dir, "1", V2_COLUMNS)
    v1 = ShardSet.open(shard_dir)
    assert [(list(i.input_ids), i.len_a, i.doc_id, list(i.mask_positions)) for i in v1] == v2
    assert {(i.lang_a, i.lang_b, i.segment_index) for i in v1} == {(0, 0, 0)}
    _rewrite(shard_dir, "2", ())  # v2 metadata over v1 columns
    with pytest.raises(ContractError, match="schema version 2 without column"):
        ShardSet.open(shard_dir)
