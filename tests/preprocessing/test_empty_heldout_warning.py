"""A corpus too small to hold out any document at the asked preprocess.heldout_fraction: preprocess still succeeds
(pretraining needs only the train split) but warns once, naming the documents and the setting, since the evaluation
will have no held-out scores. No warning when nothing was asked to be held out or something was."""

from __future__ import annotations

import logging

from preprocessing.pipeline import _warn_empty_heldout, run_preprocess

WARNING = "the held-out split is empty"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "preprocessing.pipeline" and WARNING in r.getMessage()]


def test_a_corpus_that_holds_out_no_document_is_warned_about_naming_the_setting(tmp_path, wiki, caplog):
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    cfg = wiki.config(preset="in_process").model_copy(update={"heldout_fraction": 0.01})
    with caplog.at_level(logging.INFO, logger="preprocessing.pipeline"):
        manifest = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    counts = manifest["counts"]
    assert counts["docs"] == {"train": 30, "heldout": 0} and counts["instances"]["heldout"] == 0
    assert manifest["splits"]["heldout"]["rows"] == 0 and manifest["splits"]["train"]["rows"] > 0
    assert _warnings(caplog) == [
        "the held-out split is empty: 0 of 30 documents held out at preprocess.heldout_fraction=0.01, no held-out "
        "instances; evaluate will skip the held-out scores. Preprocess more documents or set a larger fraction "
        "(e.g. --set preprocess.heldout_fraction=0.1)"]


def test_no_warning_when_nothing_was_asked_for_or_something_was_held_out(caplog, wiki):
    cfg = wiki.config(preset="in_process")
    empty = {"docs": {"train": 10, "heldout": 0}, "instances": {"train": 900, "heldout": 0}}
    with caplog.at_level(logging.INFO, logger="preprocessing.pipeline"):
        _warn_empty_heldout(cfg.model_copy(update={"heldout_fraction": 0.0}), empty)  # none asked for
        _warn_empty_heldout(cfg, {"docs": {"train": 8, "heldout": 2}, "instances": {"train": 700, "heldout": 90}})
        assert _warnings(caplog) == []
        # documents held out, but none of them made an instance: the split is still empty
        _warn_empty_heldout(cfg, {"docs": {"train": 9, "heldout": 1}, "instances": {"train": 800, "heldout": 0}})
        _warn_empty_heldout(cfg.model_copy(update={"heldout_fraction": 0.05}), empty)
    assert _warnings(caplog) == [
        "the held-out split is empty: 1 of 10 documents held out at preprocess.heldout_fraction=0.2, no held-out "
        "instances; evaluate will skip the held-out scores. Preprocess more documents or set a larger fraction "
        "(e.g. --set preprocess.heldout_fraction=0.4)",
        "the held-out split is empty: 0 of 10 documents held out at preprocess.heldout_fraction=0.05, no held-out "
        "instances; evaluate will skip the held-out scores. Preprocess more documents or set a larger fraction "
        "(e.g. --set preprocess.heldout_fraction=0.3)"]
