"""Stage freshness: a stage is skipped only when its input key matches and its outputs are intact."""

import json
from pathlib import Path

from flows import stamps

REPO = Path(__file__).resolve().parents[2]


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


def _fake_distill_outputs(run):
    (run / "distill").mkdir(parents=True, exist_ok=True)
    (run / "distill/results.json").write_text(json.dumps({"x": 1}))


def test_begin_keeps_same_key_outputs_and_moves_stale_ones_aside(tmp_path):
    run = tmp_path
    stamps.begin(run, "distill", "k1")
    _fake_distill_outputs(run)
    # same key again (e.g. after a crash): outputs kept so the stage can resume
    stamps.begin(run, "distill", "k1")
    assert (run / "distill/results.json").is_file()
    # different key: the directory is stale and moved aside beside it, named with its time and old key; nothing
    # is deleted
    messages = []
    stamps.begin(run, "distill", "k2", log=messages.append)
    assert not (run / "distill").exists()
    aside = [p for p in run.iterdir() if p.name.startswith("distill.replaced-")]
    assert len(aside) == 1 and aside[0].name.endswith("-k1"), aside
    assert json.loads((aside[0] / "results.json").read_text()) == {"x": 1}
    assert len(messages) == 1 and str(aside[0]) in messages[0] and "bertfactory clean" in messages[0], messages
    # a second replacement within the same second gets its own folder
    _fake_distill_outputs(run)
    stamps.begin(run, "distill", "k3")
    assert len([p for p in run.iterdir() if p.name.startswith("distill.replaced-")]) == 2


def test_a_stage_rule_keeps_or_refuses_and_force_replaces(tmp_path):
    from bertfactory.errors import ConfigError

    run = tmp_path
    inp = tmp_path / "input.txt"
    inp.write_text("corpus")
    k1 = stamps.stage_key("distill", {"epochs": 1}, [inp], run)
    stamps.begin(run, "distill", k1)
    assert json.loads((run / ".bertfactory/distill.started.json").read_text())["config"] == {"epochs": 1}
    _fake_distill_outputs(run)
    k2 = stamps.stage_key("distill", {"epochs": 2}, [inp], run)
    seen = []

    def keep(old, new):
        seen.append((old["config"], new["config"]))
        return stamps.Plan("keep", "epochs raised")

    assert stamps.plan(run, "distill", k2, continues=keep).action == "keep"
    assert seen == [({"epochs": 1}, {"epochs": 2})]

    def refuse(old, new):
        raise ConfigError("distill.epochs changed")

    import pytest

    with pytest.raises(ConfigError):
        stamps.plan(run, "distill", k2, continues=refuse)
    assert stamps.plan(run, "distill", k2, force=True, continues=refuse).action == "replace"
    assert stamps.plan(run, "distill", k1, force=True, continues=refuse).action == "keep"  # same key: resumed


def test_a_new_evaluate_key_keeps_the_earlier_evaluations(tmp_path):
    # evaluations add up (evaluation/parts.py): each task's results carry their own key, so eval/ is never cleared
    run = tmp_path
    stamps.begin(run, "evaluate", "k1")
    _fake_eval_outputs(run)
    messages = []
    stamps.begin(run, "evaluate", "k2", log=messages.append)
    assert (run / "eval/results.json").is_file() and messages == []


def test_key_does_not_depend_on_how_the_run_directory_is_spelled(tmp_path, monkeypatch):
    # `--no-prefect` passes the run directory as given, the Prefect task passes it resolved: same key
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/a/shards").mkdir(parents=True)
    (tmp_path / "runs/a/shards/manifest.json").write_text("{}")
    rel, absolute = Path("runs/a"), tmp_path / "runs/a"
    key_rel = stamps.stage_key("pretrain", {}, [rel / "shards/manifest.json"], rel)
    assert key_rel == stamps.stage_key("pretrain", {}, [absolute / "shards/manifest.json"], absolute)
    # and a moved run directory with the same contents is still up to date
    (tmp_path / "runs/a").rename(tmp_path / "runs/b")
    assert key_rel == stamps.stage_key("pretrain", {}, [tmp_path / "runs/b/shards/manifest.json"], tmp_path / "runs/b")


def test_evaluate_key_follows_the_configured_checkpoint(tmp_path):
    from flows.recipe import load_recipe
    from flows.stages import compute_key

    elsewhere = tmp_path / "external"
    elsewhere.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (elsewhere / name).write_text("v1")
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("1\t1.0\tgood\n")
    (tmp_path / "recipe.yaml").write_text("{}")
    recipe = load_recipe(tmp_path / "recipe.yaml", [f"evaluate.checkpoint={elsewhere}", "evaluate.intrinsic.enabled=false",
                                                     f"evaluate.tasks.movie_sentiment.input={reviews}"])
    run = tmp_path / "run"  # no pretrain/final here: not needed when another checkpoint is evaluated
    run.mkdir()
    key = compute_key("evaluate", recipe, run)
    (elsewhere / "model.safetensors").write_text("v2")
    assert compute_key("evaluate", recipe, run) != key


def test_evaluate_key_names_a_builtin_sample_by_its_place_in_the_cache(tmp_path, monkeypatch):
    """Another machine's samples cache lies elsewhere: the evaluation of a built-in task is still up to date there
    (same content, same key); a changed sample file makes it stale."""
    from flows.recipe import load_recipe
    from flows.stages import compute_key

    elsewhere = tmp_path / "external"
    elsewhere.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (elsewhere / name).write_text("v1")
    (tmp_path / "recipe.yaml").write_text("{}")
    recipe = load_recipe(tmp_path / "recipe.yaml", [f"evaluate.checkpoint={elsewhere}", "evaluate.intrinsic.enabled=false",
                                                     "evaluate.tasks={uci_sentences: {}}"])
    run = tmp_path / "run"
    run.mkdir()
    keys = []
    for cache in (tmp_path / "a", tmp_path / "b" / "home"):
        (cache / "samples" / "uci_sentences").mkdir(parents=True)
        for name in ("imdb.json", "yelp.json", "amazon.json"):
            (cache / "samples" / "uci_sentences" / name).write_text(f'[{{"text": "{name}", "class": 1}}]')
        monkeypatch.setenv("BERTFACTORY_CACHE", str(cache))
        keys.append(compute_key("evaluate", recipe, run))
    assert keys[0] == keys[1]
    (tmp_path / "b/home/samples/uci_sentences/yelp.json").write_text('[{"text": "other", "class": 0}]')
    assert compute_key("evaluate", recipe, run) != keys[0]


def _corpus_in_run(tmp_path, run: Path, cache: Path):
    """A recipe naming a corpus file inside the run directory and a tokenizer inside the samples cache by their
    absolute paths, as a tapt recipe's preprocess stage sees them (flows/tapt.py with_tapt)."""
    from flows.recipe import load_recipe

    (run / "tapt").mkdir(parents=True)
    (run / "tapt/corpus.jsonl").write_text('{"id": "a", "text": "one sentence."}\n')
    (cache / "samples/minilm").mkdir(parents=True)
    (cache / "samples/minilm/tokenizer.json").write_text("{}")
    (tmp_path / "recipe.yaml").write_text("{}")
    return load_recipe(tmp_path / "recipe.yaml", [f"corpus.inputs=[{run / 'tapt/corpus.jsonl'}]",
                                                  "corpus.format=jsonl",
                                                  f"preprocess.tokenizer.path={cache / 'samples/minilm/tokenizer.json'}"])


def test_preprocess_key_has_no_machine_paths(tmp_path, monkeypatch):
    """Two machines (another working-copy root, another samples cache) compute the same preprocess key for the same
    files, and the key still follows their content."""
    from flows.stages import compute_key

    keys = []
    for node in ("a", "b/elsewhere"):
        run, cache = tmp_path / node / "work/run", tmp_path / node / "cache"
        recipe = _corpus_in_run(tmp_path, run, cache)
        monkeypatch.setenv("BERTFACTORY_CACHE", str(cache))
        keys.append(compute_key("preprocess", recipe, run))
        assert stamps.key_details(keys[-1])["config"]["corpus"]["inputs"] == ["RUN/tapt/corpus.jsonl"]
    assert keys[0] == keys[1]
    (run / "tapt/corpus.jsonl").write_text('{"id": "a", "text": "another sentence."}\n')
    assert compute_key("preprocess", recipe, run) != keys[0]


def test_a_stage_stamped_under_the_earlier_spelling_stays_up_to_date(tmp_path, monkeypatch):
    """A run stamped when keys still named absolute paths keeps its outputs: the earlier key is accepted (and
    only it: another config still reruns)."""
    from flows.stage_runner import run_cached, stage_inputs
    from flows.stages import compute_key

    run, cache = tmp_path / "run", tmp_path / "cache"
    recipe = _corpus_in_run(tmp_path, run, cache)
    monkeypatch.setenv("BERTFACTORY_CACHE", str(cache))
    config, files = stage_inputs("preprocess", recipe, run)
    earlier = stamps.stage_key("preprocess", config, files, run)  # how bertfactory spelled it before 2026-12
    key = compute_key("preprocess", recipe, run)
    assert earlier != key and stamps.accepted_keys(key) == (key, earlier)
    stamps.begin(run, "preprocess", earlier)
    for out in ("tokenizer/tokenizer.json", "shards/manifest.json"):
        (run / out).parent.mkdir(parents=True, exist_ok=True)
        (run / out).write_text("{}")
    stamps.finish(run, "preprocess", earlier, {"rows": 1})

    def rerun():
        raise AssertionError("a run stamped under the earlier spelling ran again")

    assert run_cached("preprocess", run, key, rerun)["status"] == "up-to-date"
    assert stamps.plan(run, "preprocess", key).action == "keep"
    other = compute_key("preprocess", recipe.model_copy(update={"preprocess": recipe.preprocess.model_copy(
        update={"seed": recipe.preprocess.seed + 1})}), run)
    assert not stamps.is_fresh(run, "preprocess", other)


def test_pretrain_key_follows_the_tlm_pairs_content(tmp_path):
    """XLM's TLM pairs are training data: rebuilt pairs (same path, new content) must retrain, like new shards."""
    from flows.recipe import load_recipe
    from flows.stages import compute_key

    run = tmp_path / "run"
    (run / "shards").mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / "shards" / "manifest.json").write_text("{}")
    (run / "tokenizer" / "tokenizer.json").write_text("{}")
    (run / "tlm" / "shards").mkdir(parents=True)
    (run / "tlm" / "shards" / "manifest.json").write_text('{"pairs": 1}')
    recipe = load_recipe(REPO / "configs" / "tiny-xlm.yaml", ["pretrain.objective=xlm_mlm_tlm",
                                                             "pretrain.tlm_shards=tlm/shards"])
    key = compute_key("pretrain", recipe, run)
    assert compute_key("pretrain", recipe, run) == key
    (run / "tlm" / "shards" / "manifest.json").write_text('{"pairs": 2}')
    assert compute_key("pretrain", recipe, run) != key


def test_pretraining_rule_names_the_changed_setting(tmp_path):
    import pytest

    from bertfactory.errors import ConfigError
    from flows.recipe import load_recipe
    from flows.stage_runner import pretrain_continues

    recipe = load_recipe(str(REPO / "configs/local.yaml"))
    fields = recipe.pretrain.trajectory_fields()
    old = {"config": {"model": {"hidden_size": 128}, "pretrain": fields}, "inputs": {"RUN/shards/manifest.json": "a"}}

    def new(inputs=None, model=None, **pretrain):
        return {"config": {"model": model or {"hidden_size": 128}, "pretrain": {**fields, **pretrain}},
                "inputs": inputs or {"RUN/shards/manifest.json": "a"}}

    with pytest.raises(ConfigError, match=r"^pretrain.max_steps changed \(\d+ -> 5\) .*--run-dir.*--force"):
        pretrain_continues(recipe, tmp_path, old, new(max_steps=5))  # lowered: refused, naming it
    with pytest.raises(ConfigError, match=r"^model.hidden_size changed \(128 -> 64\)"):
        pretrain_continues(recipe, tmp_path, old, new(model={"hidden_size": 64}))
    with pytest.raises(ConfigError, match=r"^pretrain.seed changed .*also changed: pretrain.max_steps"):
        pretrain_continues(recipe, tmp_path, old, new(seed=7, max_steps=fields["max_steps"] + 1))
    # other data: replaced (moved aside); no checkpoint to extend: replaced too; a stamp without settings: kept
    assert pretrain_continues(recipe, tmp_path, old, new(inputs={"RUN/shards/manifest.json": "b"})).action == "replace"
    assert pretrain_continues(recipe, tmp_path, old, new(max_steps=fields["max_steps"] + 1)).action == "replace"
    assert pretrain_continues(recipe, tmp_path, {"key": "k"}, new()).action == "keep"


def test_a_finished_stamp_records_the_machine_and_an_old_stamp_without_it_still_reads(tmp_path):
    from bertfactory.machine import machine_description

    run = tmp_path
    key = stamps.stage_key("evaluate", {"lr": 1}, [])
    stamps.begin(run, "evaluate", key)
    _fake_eval_outputs(run)
    stamps.finish(run, "evaluate", key, {"ok": True}, 1.5)
    stamp = stamps.recorded_run(run, "evaluate")
    assert stamp["machine"] == machine_description() and stamp["machine"]["cpus"] >= 1
    assert stamp["code"]["version"]
    # a stamp of an earlier bertfactory (no "machine"): still fresh, still read
    path = run / ".bertfactory/evaluate.json"
    old = json.loads(path.read_text())
    del old["machine"]
    path.write_text(json.dumps(old))
    assert stamps.is_fresh(run, "evaluate", key)
    assert "machine" not in stamps.recorded_run(run, "evaluate")
    assert stamps.recorded_summary(run, "evaluate") == {"ok": True}


def test_the_finished_stamp_records_the_code_read_when_the_stage_began(tmp_path, monkeypatch):
    # a commit checked out while a stage runs (git pull during pretraining) is not the code that ran it
    from bertfactory import provenance

    checked_out = ["a" * 40]  # what git would answer now
    revision = provenance.functools.lru_cache(maxsize=1)(  # cached per process, as provenance.code_revision is
        lambda: {"version": "0.1.0", "commit": checked_out[0], "dirty": False})
    monkeypatch.setattr(stamps, "code_revision", revision)
    key = stamps.stage_key("evaluate", {"lr": 1}, [])
    stamps.begin(tmp_path, "evaluate", key)
    checked_out[0] = "b" * 40  # pulled while the stage ran
    _fake_eval_outputs(tmp_path)
    stamps.finish(tmp_path, "evaluate", key, {"ok": True}, 1.0)
    assert stamps.recorded_run(tmp_path, "evaluate")["code"]["commit"] == "a" * 40
