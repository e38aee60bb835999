"""The portable runner path for real: the whole preprocessing run on PortableRunner against Beam's Python local
job service with SDK workers from two external worker pools (preprocessing.portable_local), byte-identical to the
local preset. Also: the dataflow/flink/spark presets become valid PipelineOptions, and no preset goes near Prism."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import (GoogleCloudOptions, PortableOptions, SetupOptions,
                                                  WorkerOptions)
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.prism_runner import PrismRunner

from preprocessing.config import RunnerConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.portable_local import local_portable_cluster
from preprocessing.runners import describe, make_runner, pipeline_options

# Runs run_preprocess in a separate process so that a hung portable job (a dead SDK worker makes the job service
# wait forever) is bounded by subprocess's timeout. Prism is refused there as the no_prism fixture does here.
DRIVER = """
import json, sys
from pathlib import Path
from apache_beam.runners.portability import prism_runner
def refuse(*args, **kwargs):
    raise AssertionError("Beam tried to download or start Prism")
prism_runner.PrismJobServer.__init__ = refuse
prism_runner.PrismRunner.default_job_server = refuse
from preprocessing.config import CorpusConfig, PreprocessConfig
from preprocessing.pipeline import run_preprocess
spec = json.loads(Path(sys.argv[1]).read_text())
run_preprocess(CorpusConfig.model_validate(spec["corpus"]), PreprocessConfig.model_validate(spec["preprocess"]),
               Path(spec["run_dir"]))
"""


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _without_run_specifics(name: str, data: bytes):
    """manifest.json records the runner, stats.json the runner and timings/rates: compare everything else
    exactly (of stats.json, the counts and which entries there are)."""
    if name.endswith("manifest.json"):
        manifest = json.loads(data)
        assert manifest.pop("runner")["preset"] in ("local", "portable")
        return manifest
    if name.endswith("stats.json"):
        stats = json.loads(data)
        return sorted(stats), stats["counts"]
    return data


def test_preprocess_on_portable_runner_with_two_worker_pools_matches_local(tmp_path, tiny_dump, wiki, no_prism):
    corpus, cfg = wiki.corpus(tiny_dump), wiki.config()
    run_preprocess(corpus, cfg, tmp_path / "local")

    with local_portable_cluster(pools=2, log_dir=tmp_path / "beam-logs") as cluster:
        portable_cfg = cfg.model_copy(update={"runner": cluster.runner_config(num_workers=2)})
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"corpus": corpus.model_dump(mode="json"),
                                    "preprocess": portable_cfg.model_dump(mode="json"),
                                    "run_dir": str(tmp_path / "portable")}))
        done = subprocess.run([sys.executable, "-c", DRIVER, str(spec)], capture_output=True, text=True, timeout=540)
        assert done.returncode == 0, done.stderr[-6000:]
        # two pools standing in for two machines: both started SDK workers for the job
        started = cluster.workers_started()
        assert len(started) == 2 and min(started) >= 1, started

    local, portable = _files(tmp_path / "local"), _files(tmp_path / "portable")
    assert sorted(local) == sorted(portable)
    assert any(name.endswith(".arrow") for name in local) and "shards/manifest.json" in local
    for name in local:
        assert _without_run_specifics(name, local[name]) == _without_run_specifics(name, portable[name]), name
    manifest = json.loads(portable["shards/manifest.json"])
    assert manifest["runner"]["runner"] == "PortableRunner"
    assert f"--job_endpoint={cluster.job_endpoint}" in manifest["runner"]["options"]
    # the runner section is outside the config hash, so both runs claim the same configuration
    assert manifest["config_hash"] == json.loads(local["shards/manifest.json"])["config_hash"]


DATAFLOW = {"project": "my-project", "region": "europe-west1", "temp_location": "gs://bucket/tmp",
            "machine_type": "n2-standard-8", "max_num_workers": 16, "sdk_container_image": "eu.gcr.io/p/bf:1"}


def test_dataflow_preset_becomes_pipeline_options():
    cfg = RunnerConfig.model_validate({"preset": "dataflow", "dataflow": DATAFLOW})
    opts = pipeline_options(cfg)
    gcp = opts.view_as(GoogleCloudOptions)
    assert (gcp.project, gcp.region, gcp.temp_location) == ("my-project", "europe-west1", "gs://bucket/tmp")
    workers = opts.view_as(WorkerOptions)
    assert workers.machine_type == "n2-standard-8" and workers.max_num_workers == 16
    assert workers.sdk_container_image == "eu.gcr.io/p/bf:1"
    assert opts.view_as(SetupOptions).setup_file == "./pyproject.toml"
    assert type(make_runner(cfg)).__name__ == "DataflowRunner"
    assert describe(cfg)["runner"] == "DataflowRunner"


def test_dataflow_preset_requires_project_region_and_gcs_temp():
    with pytest.raises(ValueError, match="project, region, temp_location"):
        RunnerConfig(preset="dataflow")
    with pytest.raises(ValueError, match="gs://"):
        RunnerConfig.model_validate({"preset": "dataflow", "dataflow": {**DATAFLOW, "temp_location": "/tmp/x"}})


@pytest.mark.parametrize("preset, section, runner", [
    ("flink", {"flink_master": "flink-jm:8081", "parallelism": 8,
               "environment": {"type": "EXTERNAL", "config": "localhost:50000"}}, "FlinkRunner"),
    ("spark", {"spark_master_url": "spark://master:7077",
               "environment": {"type": "PROCESS", "config": '{"command": "/opt/apache/beam/boot"}'}}, "SparkRunner"),
])
def test_flink_and_spark_presets_become_pipeline_options(preset, section, runner):
    cfg = RunnerConfig.model_validate({"preset": preset, preset: section})
    opts = pipeline_options(cfg).get_all_options()
    if preset == "flink":
        assert opts["flink_master"] == "flink-jm:8081" and opts["parallelism"] == 8
    else:
        assert opts["spark_master_url"] == "spark://master:7077"
    portable = pipeline_options(cfg).view_as(PortableOptions)
    assert portable.environment_type == section["environment"]["type"]
    assert portable.environment_config == section["environment"]["config"]
    assert type(make_runner(cfg)).__name__ == runner


def test_external_environment_needs_a_pool_address():
    with pytest.raises(ValueError, match="worker pool"):
        RunnerConfig.model_validate({"preset": "portable", "portable": {"environment": {"type": "EXTERNAL"}}})


@pytest.mark.parametrize("preset", ["local", "in_process", "portable", "flink", "spark"])
def test_no_preset_chooses_prism(no_prism, preset):
    runner = make_runner(RunnerConfig(preset=preset))
    assert not isinstance(runner, PrismRunner)
    assert isinstance(runner, FnApiRunner) == (preset in ("local", "in_process"))
