"""Issue 34 item 2: every bundled recipe through `describe`, `recipes show` and a dry validation, from a directory
without any run's outputs (a recipe whose tokenizer or init_from is another run's output, e.g. phase 2 of
ModernBERT, is described from the recipe: its vocabulary size is in it). Nothing may print a traceback, and
nothing is written."""

from __future__ import annotations

import pytest
import yaml

# Prefect sets up its console log handler when imported: here, not under one test's capsys (closed by the next)
import flows.distill_flow  # noqa: F401
from flows.cli import main
from flows.recipe import bundled_recipes, load_recipe
from flows.recipes_cli import _kind

RECIPES = bundled_recipes()


@pytest.fixture
def empty_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_bundled_recipe_is_described_shown_and_validated_without_its_runs(name, empty_cwd, capsys):
    path = RECIPES[name]
    # recipes show: the YAML as shipped
    assert main(["recipes", "show", name]) == 0
    shown = capsys.readouterr()
    assert yaml.safe_load(shown.out) == yaml.safe_load(path.read_text(encoding="utf-8")) and not shown.err

    code = main(["describe", name])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if _kind(path) == "distill":
        # a distillation config is no pipeline recipe: one line saying so and what reads it
        assert code == 2 and err.count("error:") == 1 and "bertfactory distill" in err, err
        from distillation.stage import load_distill_config

        load_distill_config(str(path), [])  # the dry validation of its kind
    else:
        assert code == 0, err
        recipe = load_recipe(name)  # the dry validation every command starts with
        assert f"{name}: objective {recipe.pretrain.objective}" in out and "parameters" in out
        if recipe.preprocess.tokenizer.path:  # another run's tokenizer, not there: the recipe's vocabulary size
            assert f"vocabulary {recipe.preprocess.tokenizer.vocab_size:,} (preprocess.tokenizer.vocab_size; " in out
    assert list(empty_cwd.iterdir()) == []  # nothing written


def test_phase_two_of_modernbert_is_described_without_phase_ones_tokenizer(empty_cwd, capsys):
    assert main(["describe", "modernbert-base-long"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 50,368 (preprocess.tokenizer.vocab_size; runs/modernbert-base/tokenizer/tokenizer.json is " \
           "not there yet)" in out and "sequences of 8192" in out


def test_an_adopted_tokenizer_that_is_no_tokenizer_is_one_line_naming_it(empty_cwd, capsys):
    bad = empty_cwd / "tok.json"
    bad.write_text("{not json")
    assert main(["describe", "local", "--set", f"preprocess.tokenizer.path={bad}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: preprocess.tokenizer.path {bad}: not a tokenizer file") and "Traceback" not in err


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_stage_of_a_bundled_recipe_without_its_inputs_is_one_line_naming_the_file(name, empty_cwd, capsys):
    """The stage commands on a fresh run directory (no shards, no checkpoint, no other run's outputs): one line
    naming the file the stage needs and what writes it, exit 2, nothing written outside the run directory."""
    path = RECIPES[name]
    if _kind(path) == "distill":
        commands = [["distill", name, "--run-dir", "r"]]
    else:
        commands = [["pretrain", name, "--run-dir", "r", "--no-prefect"], ["evaluate", name, "--run-dir", "r",
                                                                             "--no-prefect"]]
        if load_recipe(name).preprocess.tokenizer.path:  # another run's tokenizer: refused before the job
            commands.append(["preprocess", name, "--run-dir", "r", "--no-prefect"])
    for command in commands:
        assert main(command) == 2, command
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert "No such file or directory" not in lines[0] and (" needs " in lines[0] or "does not exist" in lines[0])
        assert {p.name for p in empty_cwd.iterdir()} <= {"r"}, command  # nothing outside the run directory
