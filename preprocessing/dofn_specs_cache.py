"""Beam's DoFn state/timer introspection, computed once per DoFn class in this process.

Beam asks `apache_beam.transforms.userstate.get_dofn_specs(dofn)` which user state and timers a DoFn declares when
each ParDo is built, at the pipeline's proto round trip and whenever a bundle processor is set up: ~580 calls in a
1x sotu job run in process, ~700 in a 3-document one. Each call runs inspect.signature over every method of the
DoFn (~30, DoFn's own included): 0.27 ms a call, ~0.2 CPU-s a job, a fifth of what a 3-document job spends in Beam
after its imports (benchmarks/fixed_cost.py). The answer is read from the default arguments of the methods
(`DoFn.StateParam`, `DoFn.TimerParam`), which belong to the class, so `install()` wraps the function with a memo
per class. A DoFn whose instance carries bound methods of its own (beam.Map of a bound method sets the wrapper's
`process` on the instance) is asked afresh every time, as is one whose specs Beam refuses (the ValueError comes
out each call). The sets handed out are copies. apache-beam is pinned (pyproject.toml); without the function
install() leaves Beam as it is. runners.run_pipeline installs it before a pipeline is built.

    python -c "from preprocessing import dofn_specs_cache; print(dofn_specs_cache.install())"
"""

from __future__ import annotations

import types
import weakref

from apache_beam.transforms import userstate

_original = getattr(userstate, "get_dofn_specs", None)
_specs_by_class: "weakref.WeakKeyDictionary[type, tuple[frozenset, frozenset]]" = weakref.WeakKeyDictionary()


def _class_decides(dofn) -> bool:
    """Whether `dofn`'s specs follow from its class alone: no bound method stored on the instance itself."""
    try:
        attributes = vars(dofn)
    except TypeError:  # no __dict__: nothing to go by
        return False
    return not any(isinstance(value, types.MethodType) for value in attributes.values())


def get_dofn_specs(dofn):
    """userstate.get_dofn_specs, memoised per DoFn class where the class decides (see the module docstring)."""
    if not _class_decides(dofn):
        return _original(dofn)
    cls = type(dofn)
    specs = _specs_by_class.get(cls)
    if specs is None:
        state, timers = _original(dofn)
        specs = _specs_by_class[cls] = (frozenset(state), frozenset(timers))
    return set(specs[0]), set(specs[1])


def install() -> bool:
    """Route Beam's calls (userstate.is_stateful_dofn, validate_stateful_dofn, the ParDo and the SDK worker's
    operations all look the function up on the module) through the memo. Idempotent; False where this Beam has
    no such function."""
    if _original is None:
        return False
    userstate.get_dofn_specs = get_dofn_specs
    return True
