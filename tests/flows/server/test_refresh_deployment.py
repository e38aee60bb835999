"""The corpus-refresh-weekly deployment on a real Prefect server, triggered by hand as the schedule would: the first
run builds corpus version 1 from the watched directory, new files dropped there make the next run read only those
into version 2 (parent v1), and a run with nothing new changes nothing and says so."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.slow  # real servers and pipeline runs


def _refresh(server, run_dir, corpus, overrides) -> tuple[str, dict]:
    flow_run_id = server.trigger("corpus_refresh/corpus-refresh-weekly", run_dir=str(run_dir),
                                 sources=[str(corpus)], overrides=overrides)
    output = server.work_once()
    run = server.flow_run(flow_run_id)
    assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{output[-6000:]}"
    return flow_run_id, run


def _ledger(run_dir) -> list[dict]:
    return json.loads((run_dir / "corpora" / "versions.json").read_text())["versions"]


def _markdown(server, flow_run_id) -> str:
    artifacts = server.api("POST", "/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    return "\n".join(a["data"] for a in artifacts if a["key"] == "corpus-refresh")


def test_refresh_deployment_reads_only_the_new_files(sqlite_server, fast_overrides, sotu_corpus, tmp_path):
    corpus, spare = sotu_corpus
    run_dir = tmp_path / "run"
    overrides = fast_overrides
    first = sorted(str(p) for p in corpus.iterdir())

    _refresh(sqlite_server, run_dir, corpus, overrides)
    (v1,) = _ledger(run_dir)
    assert v1["version"] == 1 and sorted(v1["new_inputs"]) == first

    # two new addresses (a version of one document could send it all to the held-out split)
    new_files = sorted(str(corpus / f.name) for f in spare[:2])
    for f in spare[:2]:
        shutil.copy(f, corpus / f.name)
    run_id, _ = _refresh(sqlite_server, run_dir, corpus, overrides)
    v1_again, v2 = _ledger(run_dir)
    assert v1_again == v1
    assert v2["version"] == 2 and sorted(v2["new_inputs"]) == new_files
    from preprocessing.shards import read_manifest

    manifest = read_manifest(run_dir / "corpora" / "v2")
    assert manifest.corpus_version == 2 and manifest.parent is not None
    assert len(manifest.inputs_seen) == 6  # v1's four and the two new ones
    assert "corpus_refresh — new_version" in _markdown(sqlite_server, run_id)

    ledger_before = (run_dir / "corpora" / "versions.json").read_bytes()
    run_id, _ = _refresh(sqlite_server, run_dir, corpus, overrides)
    assert (run_dir / "corpora" / "versions.json").read_bytes() == ledger_before
    assert not (run_dir / "corpora" / "v3").exists()
    assert "corpus_refresh — nothing_new" in _markdown(sqlite_server, run_id)
