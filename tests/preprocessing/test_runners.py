"""preprocessing.runners: the runner is chosen explicitly (FnApiRunner), never Beam's Prism download path."""

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from bertfactory.errors import InputError
from preprocessing.config import RunnerConfig
from preprocessing.runners import describe, make_runner, pipeline_options, run_pipeline
from preprocessing.worker_errors import worker_input_error


def test_local_preset_is_fn_api_runner_with_worker_processes():
    cfg = RunnerConfig()
    assert isinstance(make_runner(cfg), FnApiRunner)
    opts = pipeline_options(cfg).get_all_options()
    assert opts["direct_num_workers"] == 2 and opts["direct_running_mode"] == "multi_processing"
    assert describe(cfg)["runner"] == "FnApiRunner"


def _square_sum(out):
    def build(p):
        (p | beam.Create(range(100)) | beam.Map(lambda x: x * x) | beam.combiners.ToList()
         | beam.Map(lambda xs: out.write_text(str(sum(xs)))))
    return build


@pytest.mark.parametrize("preset", ["local", "in_process"])
def test_pipeline_runs_without_prism(no_prism, tmp_path, preset):
    out = tmp_path / "sum.txt"
    run_pipeline(_square_sum(out), RunnerConfig(preset=preset), "test")
    assert out.read_text() == str(sum(x * x for x in range(100)))


def _fail(_):
    raise worker_input_error("bad.xml: page 3 is broken")


def test_worker_input_error_comes_out_clean(no_prism):
    def build(p):
        p | beam.Create([1, 2]) | beam.Map(_fail)

    with pytest.raises(InputError) as err:
        run_pipeline(build, RunnerConfig(preset="local"), "test")
    assert str(err.value) == "bad.xml: page 3 is broken"
