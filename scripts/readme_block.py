"""A generated block of README.md: the text between a begin and an end marker, rewritten by a script from result
files, or compared with them (`--check`). Used by scripts/readme_demo.py (the demo excerpt) and
scripts/readme_quality.py (the "How good are the models?" paragraph), which say what goes in their block."""

from __future__ import annotations

import sys
from pathlib import Path


def replace_block(readme: str, begin: str, end: str, text: str, error: type[Exception], what: str) -> str:
    """README text with the block from `begin` to `end` (markers included) replaced by `text`; `error` (naming
    `what`) when the README has no such block."""
    start, stop = readme.find(begin), readme.find(end)
    if start < 0 or stop < start:
        raise error(f"README.md has no {what} block (the lines {begin!r} ... {end!r})")
    return readme[:start] + text + readme[stop + len(end):]


def write_or_check(path: Path, readme: str, updated: str, check: bool, tool: str, stale: str, checked: str,
                   written: str) -> int:
    """--check: exit status 1 (printing `stale` to stderr) when the README differs from `updated`, else 0 (printing
    `checked`). Otherwise write `updated` atomically when it differs and print `written`."""
    if check:
        if updated != readme:
            print(f"{tool}: {stale}", file=sys.stderr)
            return 1
        print(f"{tool}: {checked}")
        return 0
    if updated != readme:
        tmp = path.with_suffix(".md.tmp")
        tmp.write_text(updated, encoding="utf-8")
        tmp.replace(path)
    print(f"{tool}: {written}")
    return 0
