"""Beam's PipelineOptions views, made once per options object and class in this process.

Beam asks `options.view_as(SomeOptions)` each time a transform is applied, its output type inferred or a runner
step set up: ~500 calls while a 1x sotu job is built and run in process. Each call builds a fresh argparse parser
with every argument of that class and parses the flags again (0.97 s of a 5.6 s cProfile of that job; measured
unprofiled, ~0.2-0.3 CPU-s a job, a tenth of the raw-documents path's wall at 1x: benchmarks/RESULTS.md, issue
19). A view holds nothing of its own: Beam hands every view of one options object the same `_all_options` dict,
which is where reads and writes go, and the flags it parses never change after the object is made. So the view
made first for a class serves every later call on an object sharing that dict, and a deep copy of the options
(beam.Pipeline copies the ones it is given) has a dict of its own and so views of its own. apache-beam is pinned
(pyproject.toml); `install()` leaves a Beam without `PipelineOptions.view_as` as it is.

    python -c "from preprocessing import options_view_cache; print(options_view_cache.install())"
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

_original = PipelineOptions.__dict__.get("view_as")
# id of an options object's shared dict -> (the dict, kept alive so the id is not reused; {class: view})
_views: dict[int, tuple[dict, dict[type, PipelineOptions]]] = {}
# options objects seen at most (each job makes a few); past this the memo starts afresh
MAX_OPTION_SETS = 64


def view_as(self: PipelineOptions, cls: type) -> PipelineOptions:
    """PipelineOptions.view_as, the view made once per shared option dict and class."""
    shared = self.__dict__.get("_all_options")
    if not isinstance(shared, dict):  # not made the way Beam makes options: nothing to share
        return _original(self, cls)
    entry = _views.get(id(shared))
    if entry is None or entry[0] is not shared:
        if len(_views) >= MAX_OPTION_SETS:
            _views.clear()
        entry = _views[id(shared)] = (shared, {})
    view = entry[1].get(cls)
    if view is None:
        view = entry[1][cls] = _original(self, cls)
    return view


def install() -> bool:
    """Route every PipelineOptions' view_as through the memo. Idempotent; False where Beam has no view_as."""
    if _original is None:
        return False
    PipelineOptions.view_as = view_as
    return True
