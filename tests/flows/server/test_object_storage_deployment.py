"""The pipeline-local deployment on a real Prefect server with an s3:// run directory (a real S3 API server on
127.0.0.1, moto): the run_dir parameter stays the URL string the user typed, the worker works in its own working
copy, and every stage's outputs and stamps end up in the bucket (docs/cluster.md)."""

from __future__ import annotations

import json

import pytest

from tests.storage_servers import start_s3

from tests.flows.server.conftest import FAST, sotu_dir

pytestmark = pytest.mark.slow  # real servers and a pipeline run


def test_pipeline_deployment_on_an_s3_run_directory(sqlite_server, sotu_files, tmp_path):
    s3 = start_s3()
    saved = dict(sqlite_server.env)
    try:
        bucket = s3.make_bucket("deployed")
        url = f"{bucket}/runs/pipeline"
        sqlite_server.env.update(s3.env, BERTFACTORY_WORK_ROOT=str(tmp_path / "worker-copies"),
                                 BERTFACTORY_SHARD_CACHE=str(tmp_path / "worker-shards"))
        corpus = sotu_dir(tmp_path / "corpus", sotu_files)
        overrides = [*FAST, f"corpus.inputs={json.dumps([str(corpus)])}"]
        run_id = sqlite_server.trigger("pipeline/pipeline-local", run_dir=url, overrides=overrides)
        output = sqlite_server.work_once()
        run = sqlite_server.flow_run(run_id)
        assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{output[-6000:]}"
        assert run["parameters"]["run_dir"] == url  # a string parameter, as typed
        assert run["name"] == "pipeline:local@pipeline"

        s3.apply()
        from bertfactory import storage

        names = set(storage.list_files(url))
        for rel in ("shards/manifest.json", "tokenizer/tokenizer.json", "pretrain/final/model.safetensors",
                    "eval/results.json", "eval/report.md", ".bertfactory/preprocess.json",
                    ".bertfactory/pretrain.json", ".bertfactory/evaluate.json"):
            assert rel in names, (rel, sorted(names))
        assert ".bertfactory/lease.json" not in names  # released when the flow ended
        results = json.loads(storage.read_bytes(f"{url}/eval/results.json"))
        assert "movie_sentiment" in results["tasks"]
    finally:
        sqlite_server.env.clear()
        sqlite_server.env.update(saved)
        s3.restore()
        s3.stop()
