"""Incremental corpus versions (preprocessing.lineage + run_preprocess with corpus.parent): only new inputs are
read, the parent's tokenizer is kept, new documents are deduplicated against the parent's, the version and its
lineage are recorded, a second refresh with nothing new says so, and an altered or missing parent is refused."""

import json
import random

import pytest

from bertfactory.errors import ContractError
from preprocessing.lineage import NothingNew
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import read_manifest


def _dumps(tmp_path, wiki):
    (tmp_path / "in").mkdir()
    first = wiki.write_dump(tmp_path / "in" / "dump-1.xml.bz2", wiki.standard_pages())
    rng = random.Random(99)
    old_text = wiki.article_text(random.Random(7))  # the text of "Article 0" in the standard dump
    pages = [wiki.page_xml(f"New article {i}", wiki.article_text(rng), page_id=500 + i) for i in range(8)]
    pages.append(wiki.page_xml("Copy of article 0", old_text, page_id=600))  # exact duplicate of an old document
    second = wiki.write_dump(tmp_path / "in" / "dump-2.xml.bz2", pages)
    return first, second


def _corpus(wiki, inputs, parent=None):
    corpus = wiki.corpus(inputs[0])
    return corpus.model_copy(update={"inputs": [str(p) for p in inputs], "parent": str(parent) if parent else None})


def test_version_two_reads_only_new_files_and_dedups_against_version_one(tmp_path, wiki, no_prism):
    first, second = _dumps(tmp_path, wiki)
    cfg = wiki.config(preset="in_process")
    v1 = run_preprocess(_corpus(wiki, [first]), cfg, tmp_path / "v1")
    assert v1["corpus_version"] == 1 and v1["parent"] is None and v1["dedup_index"] is not None

    v2 = run_preprocess(_corpus(wiki, [first, second], parent=tmp_path / "v1/shards"), cfg, tmp_path / "v2")
    assert v2["corpus_version"] == 2
    assert v2["parent"]["corpus_version"] == 1 and v2["parent"]["path"] == str(tmp_path / "v1/shards")
    assert [s["path"] for s in v2["sources"]] == [str(second)]
    assert set(v1["inputs_seen"]) < set(v2["inputs_seen"]) and len(v2["inputs_seen"]) == 2
    counts = v2["counts"]
    assert counts["docs_read"] == 9
    assert counts["duplicates_removed"].get("exact", 0) == 1 and counts["docs_kept"] == 8
    duplicates = [json.loads(x) for x in (tmp_path / "v2/shards/duplicates.jsonl").read_text().splitlines()]
    assert len(duplicates) == 1 and duplicates[0]["kind"] == "exact"
    # the parent's tokenizer, byte for byte: token ids mean the same in every version
    assert (tmp_path / "v2/tokenizer/tokenizer.json").read_bytes() == (tmp_path / "v1/tokenizer/tokenizer.json").read_bytes()
    assert read_manifest(tmp_path / "v2/shards").tokenizer.sha256 == v1["tokenizer"]["sha256"]

    # a refresh of version 2 with no new input does nothing and says so
    with pytest.raises(NothingNew, match="nothing new: all 2 input file"):
        run_preprocess(_corpus(wiki, [first, second], parent=tmp_path / "v2/shards"), cfg, tmp_path / "v3")
    assert not (tmp_path / "v3/shards").exists()


def test_missing_or_altered_parent_is_refused(tmp_path, wiki, no_prism):
    first, second = _dumps(tmp_path, wiki)
    cfg = wiki.config(preset="in_process")
    with pytest.raises(ContractError, match="no manifest.json there"):
        run_preprocess(_corpus(wiki, [first, second], parent=tmp_path / "nowhere"), cfg, tmp_path / "v2")
    run_preprocess(_corpus(wiki, [first]), cfg, tmp_path / "v1")
    shard = tmp_path / "v1/shards/train/part-00000.arrow"
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(ContractError, match=r"its shard .*part-00000.arrow changed since"):
        run_preprocess(_corpus(wiki, [first, second], parent=tmp_path / "v1/shards"), cfg, tmp_path / "v2")
