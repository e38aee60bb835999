"""Stage freshness: a stage is skipped only when its input key matches and its outputs are intact."""

import json

from flows import stamps


def _fake_eval_outputs(run):
    (run / "eval").mkdir(parents=True, exist_ok=True)
    (run / "eval/results.json").write_text(json.dumps({"x": 1}))
    (run / "eval/report.md").write_text("# report")


def test_fresh_only_with_same_key_and_intact_outputs(tmp_path):
    run = tmp_path
    inp = tmp_path / "input.txt"
    inp.write_text("corpus v1")
    key = stamps.stage_key("evaluate", {"lr": 1}, [inp])
    assert not stamps.is_fresh(run, "evaluate", key)
    stamps.begin(run, "evaluate", key)
    _fake_eval_outputs(run)
    stamps.finish(run, "evaluate", key, {"ok": True})
    assert stamps.is_fresh(run, "evaluate", key)
    assert stamps.recorded_summary(run, "evaluate") == {"ok": True}

    # a config change, or an input content change, gives another key
    assert stamps.stage_key("evaluate", {"lr": 2}, [inp]) != key
    inp.write_text("corpus v2")
    assert stamps.stage_key("evaluate", {"lr": 1}, [inp]) != key

    # an output edited or deleted after the stage finished makes it stale
    (run / "eval/report.md").write_text("# edited")
    assert not stamps.is_fresh(run, "evaluate", key)
    (run / "eval/report.md").unlink()
    assert not stamps.is_fresh(run, "evaluate", key)


def test_begin_keeps_same_key_outputs_and_removes_stale_ones(tmp_path):
    run = tmp_path
    stamps.begin(run, "evaluate", "k1")
    _fake_eval_outputs(run)
    # same key again (e.g. after a crash): outputs kept so the stage can resume
    stamps.begin(run, "evaluate", "k1")
    assert (run / "eval/results.json").is_file()
    # different key: the directory is stale and removed
    messages = []
    stamps.begin(run, "evaluate", "k2", log=messages.append)
    assert not (run / "eval").exists()
    assert messages and "inputs changed" in messages[0]
