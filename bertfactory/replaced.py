"""Replaced outputs: what a stage moves aside instead of deleting, and the one command that deletes them.

A stage whose outputs must be replaced (`--force`, a changed input corpus, a changed setting of a stage that
cannot continue its outputs) renames each of its directories to `<name>.replaced-<UTC time>-<key[:12]>/` beside it
(`pretrain.replaced-20261129T081100Z-3f2a9c0d1e2b/`); an extended pretraining run moves its shorter final model to
`pretrain/final.replaced-<time>-step<N>/`, and the old run's checkpoints after the step it continues from to
`pretrain/checkpoints/step-N.replaced-<time>-before<step>/`. Nothing is deleted until `bertfactory clean RUN` is run.

    target = move_aside(run_dir / "pretrain", old_key)     # the new path
    found = replaced_outputs(run_dir)                       # every replaced folder under the run directory
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

MARK = ".replaced-"
_PATTERN = re.compile(r"\.replaced-\d{8}T\d{6}Z-[A-Za-z0-9]+(-\d+)?$")


def replaced_name(name: str, tag: str) -> str:
    """`<name>.replaced-<UTC time>-<tag>`."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}{MARK}{stamp}-{re.sub(r'[^A-Za-z0-9]', '', tag) or 'old'}"


def move_aside(path: Path, tag: str) -> Path:
    """Rename `path` to a replaced folder beside it (a numbered suffix when that name is taken); returns it."""
    path = Path(path)
    base = path.with_name(replaced_name(path.name, tag))
    target, n = base, 1
    while target.exists():
        target, n = base.with_name(f"{base.name}-{n}"), n + 1
    path.rename(target)
    return target


def is_replaced(name: str) -> bool:
    return bool(_PATTERN.search(name))


def replaced_outputs(run_dir: Path) -> list[Path]:
    """The replaced folders anywhere in the run directory (not those inside replaced ones, nor under dot-folders
    such as .bertfactory/)."""
    run_dir = Path(run_dir)
    found: list[Path] = []
    if not run_dir.is_dir():
        return found
    stack = [run_dir]
    while stack:
        for path in sorted(stack.pop().iterdir(), reverse=True):
            if is_replaced(path.name):
                found.append(path)
            elif path.is_dir() and not path.is_symlink() and not path.name.startswith("."):
                stack.append(path)
    return sorted(found)


def delete_replaced(run_dir: Path) -> list[Path]:
    """Delete every replaced folder of the run directory; returns what was deleted."""
    found = replaced_outputs(run_dir)
    for path in found:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return found
