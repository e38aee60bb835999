"""preprocessing.options_view_cache: a memoised view is Beam's view (same values, writes shared with the parent and
every other view), one per options object and class; a deep copy gets views of its own; a pipeline runs with it."""

import copy

import apache_beam as beam
from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions, StandardOptions, TypeOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from preprocessing import options_view_cache


def test_views_are_made_once_and_share_the_options(monkeypatch):
    made = []
    original = options_view_cache._original

    def counting(self, cls):
        made.append(cls)
        return original(self, cls)

    monkeypatch.setattr(options_view_cache, "_original", counting)
    monkeypatch.setattr(options_view_cache, "_views", {})
    assert options_view_cache.install()
    options = PipelineOptions(["--runner=DirectRunner", "--experiments=a"])
    first = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is first and made == [StandardOptions]
    assert first.runner == "DirectRunner"
    # a write through one view is what the parent and another view read
    options.view_as(TypeOptions).pipeline_type_check = False
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert first.view_as(TypeOptions) is options.view_as(TypeOptions)  # views share the dict, so the memo too
    assert options.view_as(DebugOptions).experiments == ["a"]
    assert made == [StandardOptions, TypeOptions, DebugOptions]
    # a deep copy (what beam.Pipeline keeps) has its own dict: its own views, its own values
    twin = copy.deepcopy(options)
    twin.view_as(TypeOptions).pipeline_type_check = True
    assert options.view_as(TypeOptions).pipeline_type_check is False
    assert twin.view_as(TypeOptions) is not options.view_as(TypeOptions)


def test_a_pipeline_runs_with_the_memo_installed():
    assert options_view_cache.install() and options_view_cache.install()  # idempotent
    # the runner the presets use, chosen explicitly: Beam's DirectRunner tries Prism first, which it downloads from
    # github.com (tests/conftest.py refuses the lookup)
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=1"])) as p:
        result = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2) | beam.CombineGlobally(sum)
        assert_that(result, equal_to([12]))
