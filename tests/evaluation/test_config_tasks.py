"""`evaluate.tasks` is checked when the config is validated (with the recipe, before any stage runs): a name that is
neither a built-in task nor declared from a file (`input` + `task_type`) is refused in one line naming the built-in
tasks, the closest of them and how to declare a task from a file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bertfactory.config import apply_overrides, validate
from bertfactory.errors import ConfigError
from evaluation.config import DEFAULT_TASKS, EvaluateConfig
from evaluation.tasks.registry import BUILTIN_TASKS


def refusal(tasks) -> str:
    with pytest.raises(ValidationError) as err:
        EvaluateConfig.model_validate({"tasks": tasks})
    return str(err.value)


def test_a_misspelt_task_is_refused_naming_the_close_match_and_how_to_declare_one():
    message = refusal({"trec_corse": {"finetune": {"epochs": 1}}})
    assert "evaluate.tasks.trec_corse: 'trec_corse' is not a built-in task" in message
    assert "did you mean 'trec_coarse'?" in message
    assert all(name in message for name in BUILTIN_TASKS)
    assert "a task from a file needs `input` and `task_type`" in message


def test_a_name_far_from_every_built_in_task_gets_no_guess():
    message = refusal(["movie_sentiment", "nonesuch"])
    assert "'nonesuch' is not a built-in task" in message and "did you mean" not in message


def test_an_input_alone_does_not_declare_a_task_and_a_task_type_needs_its_input(tmp_path):
    assert "'mine' is not a built-in task" in refusal({"mine": {"input": str(tmp_path / "mine.tsv")}})
    message = refusal({"mine": {"task_type": "classification"}})
    assert "evaluate.tasks.mine: a task with task_type 'classification' needs `input`" in message


def test_a_disabled_misspelt_task_is_refused_too():
    # `--set evaluate.tasks.trec_corse.enabled=false` would otherwise add a task and switch nothing off
    assert "did you mean 'trec_coarse'?" in refusal({"trec_coarse": {}, "trec_corse": {"enabled": False}})


def test_built_in_tasks_and_tasks_from_files_pass(tmp_path):
    assert list(EvaluateConfig().tasks) == list(DEFAULT_TASKS)
    cfg = EvaluateConfig.model_validate({"tasks": {
        "trec_fine": {}, "movie_sentiment": {"input": str(tmp_path / "reviews.txt")},  # a built-in task's own copy
        "my_task": {"input": str(tmp_path / "my.tsv"), "task_type": "classification", "text_column": "sentence"},
        "places": {"input": "sample:wnut16/train", "task_type": "tagging", "enabled": False},
        "trec_coarse": {"input": str(tmp_path / "q.jsonl"), "task_type": "classification"},  # a built-in name, a file
    }})
    assert set(cfg.tasks) == {"trec_fine", "movie_sentiment", "my_task", "places", "trec_coarse"}
    assert list(EvaluateConfig.model_validate({"tasks": list(BUILTIN_TASKS)}).tasks) == list(BUILTIN_TASKS)


def test_the_refusal_is_one_line_of_the_recipe_validation():
    data = apply_overrides({}, ["evaluate.tasks.trec_corse.finetune.epochs=1"])
    from flows.recipe import Recipe

    with pytest.raises(ConfigError) as err:
        validate(Recipe, data, "local.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 2 and lines[1].startswith("  - 'evaluate.tasks': ")
    assert "evaluate.tasks.trec_corse: 'trec_corse' is not a built-in task (did you mean 'trec_coarse'?" in lines[1]


def test_every_bundled_recipe_still_validates():
    from flows.recipe import bundled_recipes, load_recipe
    from flows.recipes_cli import _kind

    for path in bundled_recipes().values():
        if _kind(path) == "recipe":
            load_recipe(path)


def test_a_built_in_task_with_a_file_layout_setting_is_refused():
    """Was: `evaluate.tasks.trec_coarse: {dev_input: dev.tsv}` (or text_column, label_names, ...) validated and was
    left out without a word: the built-in reader knows its own layout and splits."""
    from evaluation.config import EvaluateConfig

    with pytest.raises(ValueError, match=r"evaluate.tasks.movie_sentiment: text_column, label_names describe a task "
                       r"file, and the built-in task 'movie_sentiment' reads its own layout and splits"):
        EvaluateConfig.model_validate({"tasks": {"movie_sentiment": {"text_column": "a", "label_names": ["a", "b"]}}})
    EvaluateConfig.model_validate({"tasks": {"movie_sentiment": {"input": "my_copy.txt"}}})  # its own data: fine
