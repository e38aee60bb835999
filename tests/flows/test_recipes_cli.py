"""Bundled recipes by name from any directory: `bertfactory recipes list|show`, the resolution rules (a file first,
then a bundled name, `configs/NAME.yaml` from anywhere) and the one-line error for a recipe that is neither."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import main
from flows.recipe import bundled_recipes, load_recipe, resolve_recipe

REPO = Path(__file__).resolve().parents[2]


def test_recipes_list_names_every_bundled_recipe_with_its_kind_and_summary(capsys):
    assert main(["recipes", "list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line and not line.startswith(" ")
            and len(line.split()) > 2 and line.split()[1] in ("recipe", "distill")}
    assert set(rows) == {p.stem for p in (REPO / "configs").glob("*.yaml")}
    assert rows["local"] == "recipe" and rows["distill-local"] == "distill"
    local_line = next(line for line in out.splitlines() if line.startswith("local "))
    assert local_line.endswith("The embedded default: the whole pipeline on a 2-core CPU in well under 15 minutes.")
    bert = next(line for line in out.splitlines() if line.startswith("bert-base "))
    assert "(Devlin et al. 2019): 12 layers" in bert  # "et al." does not end the summary


def test_recipes_show_prints_the_file_as_shipped(capsys):
    assert main(["recipes", "show", "bert-base"]) == 0
    assert capsys.readouterr().out == (REPO / "configs" / "bert-base.yaml").read_text(encoding="utf-8")
    assert main(["recipes", "show", "no-such-recipe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config file not found: no-such-recipe") and "bertfactory recipes list" in err
    assert len(err.strip().splitlines()) == 1


def test_names_resolve_from_any_directory_and_a_local_file_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = (REPO / "configs" / "local.yaml").resolve()
    for spec in ("local", "local.yaml", "configs/local.yaml"):
        assert resolve_recipe(spec).resolve() == local, spec
    assert load_recipe("tiny-albert").name == "tiny-albert"
    assert set(bundled_recipes()) == {p.stem for p in (REPO / "configs").glob("*.yaml")}
    mine = tmp_path / "local.yaml"  # a user's own file of the same name shadows the bundled one
    mine.write_text("name: mine\n", encoding="utf-8")
    assert resolve_recipe("local.yaml") == Path("local.yaml") and load_recipe("local.yaml").name == "mine"
    (tmp_path / "sub").mkdir()
    for spec in ("elsewhere/local.yaml", "notes.txt", "sub"):  # a real path that is not there is never a name
        with pytest.raises(Exception) as err:
            resolve_recipe(spec)
        assert spec in str(err.value) and type(err.value).__name__ == "ConfigError"


def test_describe_takes_a_recipe_name_from_another_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["describe", "local"]) == 0
    assert "1,478,978" in capsys.readouterr().out  # the demo model (tests/flows/test_cli.py reads it by path)


def test_evaluate_takes_a_recipe_name_as_its_target(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "local", "--run-dir", "run", "--no-prefect"]) == 2
    assert "bertfactory pretrain" in capsys.readouterr().err  # the recipe's evaluate stage, not a checkpoint
    (tmp_path / "local").mkdir()  # a directory of that name here is a checkpoint target, not the recipe
    assert main(["evaluate", "local", "--run-dir", "run", "--no-prefect"]) == 2
    assert "local is neither a recipe YAML, a model directory" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_listing_quietly(tmp_path):
    import subprocess
    import sys

    cli = str(Path(sys.executable).parent / "bertfactory")
    proc = subprocess.Popen([cli, "recipes", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    proc.stdout.close()  # gone before the command (still importing) writes, as `| head` once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_recipe_with_a_section_twice_is_refused_in_one_line(tmp_path, capsys):
    recipe = tmp_path / "twice.yaml"
    recipe.write_text("name: twice\npretrain:\n  max_steps: 5\npretrain:\n  learning_rate: 0.1\n")
    assert main(["describe", str(recipe)]) == 2  # was described with max_steps left at the default
    err = capsys.readouterr().err
    assert err == (f"error: {recipe}: key 'pretrain' appears twice (line 2, again at line 4); YAML would keep the "
                   "second and silently drop the first one's settings: merge them into one\n")


def test_a_misspelt_recipe_name_key_or_objective_is_offered_the_closest(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["recipes", "show", "bert-bse"]) == 2
    assert capsys.readouterr().err.startswith("error: config file not found: bert-bse; did you mean 'bert-base'? (")
    assert main(["describe", "local", "--set", "pretrain.max_stepz=3"]) == 2
    assert "unknown key 'pretrain.max_stepz' (did you mean 'max_steps'?); valid keys here:" in capsys.readouterr().err
    assert main(["describe", "local", "--set", "pretrain.hidden_size=64"]) == 2  # a key of another section
    assert "unknown key 'pretrain.hidden_size' (did you mean 'model.hidden_size'?)" in capsys.readouterr().err
    assert main(["describe", "local", "--set", "pretrain.objective=electr"]) == 2
    # named by its key (it was 'pretrain': ... (got {...}), the whole section)
    assert "'pretrain.objective': Value error, unknown objective 'electr' (did you mean 'electra'?); valid choices: " \
        in capsys.readouterr().err


@pytest.mark.parametrize("command", [["run"], ["pretrain"], ["evaluate"], ["refresh", "--run-dir", "RUN"],
                                     ["describe"]])
def test_a_distillation_config_given_to_a_pipeline_command_is_one_line(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    args = [a if a != "RUN" else str(tmp_path / "run") for a in command]
    assert main([args[0], "distill-local", *args[1:]]) == 2  # was one 'unknown key' per distillation setting
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key" not in err and "is a distillation config (it has a teacher " \
        "section), not a pipeline recipe: run a distillation config with `bertfactory distill " in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "run").exists()


def test_a_pipeline_recipe_given_to_distill_is_one_line(tmp_path, capsys):
    assert main(["distill", "local", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key" not in err
    assert "local.yaml holds no distillation setting (its keys name, corpus, " in err and "`bertfactory run`" in err


def test_a_recipe_that_is_not_utf8_is_one_line(tmp_path, capsys):
    recipe = tmp_path / "latin.yaml"
    recipe.write_bytes("name: café\nmodel:\n  num_layers: 2\n".encode("latin-1"))  # as an editor may save it
    for command in (["describe", str(recipe)], ["recipes", "show", str(recipe)]):
        assert main(command) == 2  # was a UnicodeDecodeError traceback
        assert capsys.readouterr().err == f"error: {recipe} is not UTF-8 text (byte 0xe9 at line 1): save it as UTF-8\n"


def test_distill_help_names_its_config_kind_and_its_docs(capsys):
    with pytest.raises(SystemExit):
        main(["distill", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    # it ended "See distillation/." (a source folder) and did not say which kind of config it reads
    assert "See docs/distill.md" in out and "kind `distill` in `bertfactory recipes list`" in out


def test_samples_help_says_what_samples_are_and_where_their_names_are(capsys):
    with pytest.raises(SystemExit):
        main(["samples", "--help"])  # it had no description
    out = " ".join(capsys.readouterr().out.split())
    assert "read by recipes as `sample:NAME`" in out and "`bertfactory samples list`" in out
    with pytest.raises(SystemExit):
        main(["samples", "fetch", "--help"])
    assert "as `bertfactory samples list` names them" in " ".join(capsys.readouterr().out.split())
