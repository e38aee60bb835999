"""Names that become file or directory names: one check for all of them.

Task names, compared-model labels, target names and the like end up as path components (RUN/cache/tasks/<task>,
RUN/eval/finetuned/<task>, RUN/eval/confusion_<task>.png). A name such as `../../x` or `/tmp/x` would write outside
the run directory, so every such name is checked here when it enters (a CLI option or a recipe key), and the
writers confine the joined path once more (`path_inside`).

    from bertfactory.names import check_name, path_inside
    name = check_name(args.task_name, "--task-name")          # ConfigError naming the option and the rule
    directory = path_inside(run_dir / "eval" / "finetuned", name, "evaluate.tasks")
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ConfigError

# Portable on every filesystem we write to (POSIX, Windows shares, object stores); no separators, no leading dot
# (hidden files, `.` and `..`), no leading dash (it would read as an option to shell tools).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NAME_LENGTH = 100  # leaves room for prefixes/suffixes (confusion_<name>.png) under the usual 255-byte limit
NAME_RULE = (f"letters, digits, '.', '_' and '-', starting with a letter or digit, at most {MAX_NAME_LENGTH} "
             "characters")


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a file name, or None when it can."""
    if not isinstance(name, str):
        return f"must be a string, found {type(name).__name__}"
    if not NAME_PATTERN.fullmatch(name):
        return f"may use only {NAME_RULE}"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long; {NAME_RULE}"
    return None


def check_name(name: object, where: str) -> str:
    """`name` unchanged when it is safe as a file name; else ConfigError naming `where` (an option or a key)."""
    problem = name_problem(name)
    if problem is not None:
        raise ConfigError(f"{where} {name!r} becomes a file name and {problem}")
    return name  # type: ignore[return-value]


def path_inside(base: Path, name: str, where: str) -> Path:
    """base / name, after check_name; also refuses a result that resolves outside `base` (a symlink named like
    the task, planted in the run directory, must not redirect the write either)."""
    path = Path(base) / check_name(name, where)
    if not path.resolve().is_relative_to(Path(base).resolve()):
        raise ConfigError(f"{where} {name!r}: {path} resolves to {path.resolve()}, outside {Path(base).resolve()}")
    return path
