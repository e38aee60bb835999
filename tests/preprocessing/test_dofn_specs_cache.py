"""preprocessing.dofn_specs_cache: Beam's DoFn state/timer specs, memoised per class, are the specs Beam finds
itself, for stateless and stateful DoFns, for a bound method wrapped by beam.Map (never memoised), and for a DoFn
Beam refuses; a pipeline with a stateful DoFn still runs with it installed."""

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.core import CallableWrapperDoFn
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec

from preprocessing import dofn_specs_cache

COUNT = ReadModifyWriteStateSpec("count", VarIntCoder())
TIMER = TimerSpec("flush", userstate.TimeDomain.WATERMARK)


class Plain(beam.DoFn):
    def process(self, element):
        yield element


class Counting(beam.DoFn):
    def process(self, element, count=beam.DoFn.StateParam(COUNT), flush=beam.DoFn.TimerParam(TIMER)):
        key, value = element
        count.write((count.read() or 0) + value)
        yield key, count.read()

    @userstate.on_timer(TIMER)
    def on_flush(self):
        return []


class Holder:
    def method(self, element, count=beam.DoFn.StateParam(COUNT)):
        return element


class Twice(beam.DoFn):
    def process(self, element, a=beam.DoFn.StateParam(COUNT), b=beam.DoFn.StateParam(COUNT)):
        yield element


def test_memoised_specs_are_beams_own(monkeypatch):
    calls = []

    def counting_original(dofn):
        calls.append(type(dofn).__name__)
        return original(dofn)

    original = dofn_specs_cache._original
    monkeypatch.setattr(dofn_specs_cache, "_original", counting_original)
    monkeypatch.setattr(dofn_specs_cache, "_specs_by_class", type(dofn_specs_cache._specs_by_class)())
    for dofn in (Plain(), Plain(), Counting(), Counting()):
        assert dofn_specs_cache.get_dofn_specs(dofn) == original(dofn)
    assert dofn_specs_cache.get_dofn_specs(Counting()) == ({COUNT}, {TIMER})
    assert calls == ["Plain", "Counting"]  # once per class
    # handed-out sets are copies: changing one does not change the next answer
    dofn_specs_cache.get_dofn_specs(Counting())[0].clear()
    assert dofn_specs_cache.get_dofn_specs(Counting())[0] == {COUNT}

    # beam.Map of a bound method: the wrapper's process is the instance's own; asked afresh, never memoised
    bound, plain_fn = CallableWrapperDoFn(Holder().method), CallableWrapperDoFn(lambda x: x)
    calls.clear()
    assert dofn_specs_cache.get_dofn_specs(bound) == original(bound) == ({COUNT}, set())
    assert dofn_specs_cache.get_dofn_specs(plain_fn) == original(plain_fn) == (set(), set())
    assert dofn_specs_cache.get_dofn_specs(CallableWrapperDoFn(Holder().method)) == ({COUNT}, set())
    assert calls == ["CallableWrapperDoFn", "CallableWrapperDoFn", "CallableWrapperDoFn"]
    with pytest.raises(ValueError, match="duplicate"):  # Beam's refusal, every time
        dofn_specs_cache.get_dofn_specs(Twice())
    with pytest.raises(ValueError, match="duplicate"):
        dofn_specs_cache.get_dofn_specs(Twice())


def test_installed_beam_still_runs_a_stateful_dofn(monkeypatch):
    monkeypatch.setattr(userstate, "get_dofn_specs", userstate.get_dofn_specs)  # restored after the test
    assert dofn_specs_cache.install() is True and dofn_specs_cache.install() is True
    assert userstate.get_dofn_specs is dofn_specs_cache.get_dofn_specs
    assert userstate.is_stateful_dofn(Counting()) and not userstate.is_stateful_dofn(Plain())
    from apache_beam.testing.util import assert_that, equal_to

    with beam.Pipeline(runner="apache_beam.runners.portability.fn_api_runner.FnApiRunner") as p:
        out = p | beam.Create([("a", 1), ("a", 2), ("b", 5)]) | beam.ParDo(Counting()) | beam.ParDo(Plain())
        assert_that(out | beam.combiners.Count.Globally(), equal_to([3]))
