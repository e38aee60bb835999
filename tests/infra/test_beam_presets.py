"""infra/beam/presets: each preset file is a valid `preprocess.runner` section (preprocessing.runners.load_preset),
becomes Beam PipelineOptions with no unknown flag, passes Beam's own option validation for its runner
(PipelineOptionsValidator: GCS paths, project id, ... for Dataflow), and works the documented way, as a YAML
override of a recipe. The validator runs offline: with Beam's `dry_run` test option it skips the one check that calls
the GCS API (the buckets' soft-delete policy), which without a network retried for ~3.5 minutes per Dataflow
validation and would reach an address outside 127.0.0.1. Submitting a job needs the service (and apache-beam[gcp] for Dataflow, which the pins
here do not allow: docs/runners.md)."""

import pytest
from apache_beam.options.pipeline_options import (FlinkRunnerOptions, GoogleCloudOptions, PortableOptions,
                                                  SparkRunnerOptions, WorkerOptions)
from apache_beam.options.pipeline_options import TestOptions as BeamTestOptions  # not a pytest class
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

from bertfactory.errors import ConfigError
from flows.recipe import load_recipe
from preprocessing.runners import RUNNER_NAMES, load_preset, make_runner, pipeline_options

from .conftest import INFRA, REPO

PRESETS = sorted((INFRA / "beam" / "presets").glob("*.yaml"))


def offline_errors(options, runner) -> list[str]:
    """Beam's validation of `options` for `runner`, every check but the GCS API call (dry_run)."""
    options.view_as(BeamTestOptions).dry_run = True
    return PipelineOptionsValidator(options, runner).validate()


def test_a_preset_per_cluster_runner():
    assert [p.stem for p in PRESETS] == ["dataflow", "flink", "spark"]


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_becomes_valid_pipeline_options(path):
    cfg = load_preset(path)
    assert cfg.preset == path.stem
    options = pipeline_options(cfg)
    known = options.get_all_options(drop_default=True)
    everything = options.get_all_options(drop_default=True, retain_unknown_options=True)
    assert set(everything) == set(known), f"flags Beam does not know: {set(everything) - set(known)}"
    runner = make_runner(cfg)
    assert type(runner).__name__ == RUNNER_NAMES[cfg.preset]
    assert offline_errors(options, runner) == []


def test_dataflow_preset():
    options = pipeline_options(load_preset(INFRA / "beam" / "presets" / "dataflow.yaml"))
    gcp, worker = options.view_as(GoogleCloudOptions), options.view_as(WorkerOptions)
    assert gcp.temp_location.startswith("gs://") and gcp.staging_location.startswith("gs://")
    assert worker.sdk_container_image.endswith("/bertfactory-beam:0.1.0")  # Dockerfile.cpu, target beam-sdk
    assert worker.max_num_workers == 32


def test_flink_and_spark_presets():
    flink = pipeline_options(load_preset(INFRA / "beam" / "presets" / "flink.yaml"))
    assert flink.view_as(FlinkRunnerOptions).flink_master == "flink-jobmanager:8081"
    assert flink.view_as(PortableOptions).environment_type == "EXTERNAL"
    spark = pipeline_options(load_preset(INFRA / "beam" / "presets" / "spark.yaml"))
    assert spark.view_as(SparkRunnerOptions).spark_master_url == "spark://spark-master:7077"
    assert spark.view_as(PortableOptions).environment_config.endswith("bertfactory-beam:0.1.0")


def test_beam_validation_is_live(tmp_path):
    """The same validator refuses what Dataflow would refuse."""
    text = (INFRA / "beam" / "presets" / "dataflow.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "dataflow.yaml"
    bad.write_text(text.replace("project: my-gcp-project", "project: My_Project"), encoding="utf-8")
    cfg = load_preset(bad)
    errors = offline_errors(pipeline_options(cfg), make_runner(cfg))
    assert any("Project ID" in e for e in errors), errors


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_as_a_recipe_override(path):
    """The documented use: --set "preprocess.runner=$(cat PRESET.yaml)", then finer overrides on top."""
    text = path.read_text(encoding="utf-8")
    recipe = load_recipe(REPO / "configs" / "local.yaml", [f"preprocess.runner={text}",
                                                           "preprocess.runner.extra_options=[]"])
    expected = load_preset(path).model_copy(update={"extra_options": []})
    assert recipe.preprocess.runner == expected


def test_bad_preset_names_the_file(tmp_path):
    bad = tmp_path / "flink.yaml"
    bad.write_text("preset: flink\nflink: {flink_master: x:8081, paralelism: 4}\n", encoding="utf-8")
    message = r"(?s)flink\.yaml.*unknown key .flink\.paralelism.*valid keys here: .*parallelism"
    with pytest.raises(ConfigError, match=message):
        load_preset(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_preset(tmp_path / "missing.yaml")
