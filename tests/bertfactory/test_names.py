"""bertfactory.names: which names may become file names, and the message that names the option and the rule."""

from __future__ import annotations

import pytest

from bertfactory.errors import ConfigError
from bertfactory.names import MAX_NAME_LENGTH, check_name, name_problem, path_inside


@pytest.mark.parametrize("name", ["movie_sentiment", "trec-coarse", "task.v2", "A1", "x" * MAX_NAME_LENGTH])
def test_ordinary_names_pass(name):
    assert name_problem(name) is None and check_name(name, "--task-name") == name


@pytest.mark.parametrize("name", ["../x", "a/b", "/tmp/x", "..", ".", ".hidden", "-rf", "a b", "a\\b", "", "é",
                                  "x" * (MAX_NAME_LENGTH + 1), "a\0b", 3])
def test_names_that_could_leave_a_directory_are_refused_naming_the_option(name):
    with pytest.raises(ConfigError, match=r"^--task-name .* becomes a file name and ") as err:
        check_name(name, "--task-name")
    assert "\n" not in str(err.value)


def test_path_inside_refuses_a_planted_symlink(tmp_path):
    base = tmp_path / "finetuned"
    base.mkdir()
    assert path_inside(base, "ok", "evaluate.tasks") == base / "ok"
    (base / "trap").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="'trap': .* outside"):
        path_inside(base, "trap", "evaluate.tasks")
