"""Fixtures for the flows tests: a tiny recipe over a few real text files (in-process Beam, a 300-token tokenizer,
one shard per split), so corpus refreshes, continued pretraining and distillation run in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


def write_tiny_recipe(path: Path, inputs: list[str], fmt: str = "text", **sections) -> Path:
    """Write a recipe reading `inputs` (format `fmt`) with tiny preprocessing; `sections` add or replace whole
    recipe sections (model, pretrain, refresh, ...)."""
    recipe = {
        "name": "flows-test",
        "corpus": {"inputs": [str(i) for i in inputs], "format": fmt, "lang": "en", "min_doc_chars": 100},
        "preprocess": {
            "seed": 3, "heldout_fraction": 0.0, "runner": {"preset": "in_process"},
            "tokenizer": {"vocab_size": 300, "min_frequency": 2, "limit_alphabet": 60},
            "instances": {"max_seq_len": 32, "dupe_factor": 1}, "masking": {"variants": 1},
            "shards": {"train_shards": 1, "heldout_shards": 1},
        },
        **sections,
    }
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


@pytest.fixture
def tiny_recipe():
    """`write_tiny_recipe` (conftest modules cannot be imported by name under importlib mode)."""
    return write_tiny_recipe


@pytest.fixture(scope="session")
def shared_prefect_api(tmp_path_factory):
    """One real Prefect server (`prefect server start` on 127.0.0.1) per test process, for the tests whose CLI
    commands each started Prefect's temporary server (~10 s a command) only to run one flow."""
    from .server.conftest import prefect_server

    with prefect_server(tmp_path_factory.mktemp("shared-prefect")) as server:
        yield server.api_url


@pytest.fixture
def cli_on_shared_prefect(shared_prefect_api, monkeypatch):
    """The `bertfactory` commands this test starts run their flows on `shared_prefect_api`."""
    monkeypatch.setenv("PREFECT_API_URL", shared_prefect_api)
