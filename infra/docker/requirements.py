"""Print the project's runtime requirements from pyproject.toml, one per line, optionally without some packages.

The images install third-party packages first (pinned by constraints.txt, a cached layer) and the project itself
with --no-deps afterwards. The TPU image leaves torch out: torch-xla 2.9.0 needs its own torch 2.9.0, while
pyproject.toml pins the torch 2.13.0 of the main environment.

    python infra/docker/requirements.py --without torch --extra s3 --extra gcs > /tmp/requirements.txt
    pip install -c constraints.txt -r /tmp/requirements.txt

--extra adds an optional-dependencies group: the images carry the object-storage clients (s3fs, gcsfs), since a
Beam worker or a training node of a run on a bucket reads and writes it (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path


def requirement_name(spec: str) -> str:
    """'sqlalchemy[asyncio]>=2.0,<2.1' -> 'sqlalchemy' (normalised as PEP 503 does)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not match:
        raise ValueError(f"not a requirement: {spec!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(pyproject: Path, without: set[str] = frozenset(), extras: list[str] = ()) -> list[str]:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    try:
        deps = list(data["project"]["dependencies"])
    except KeyError:
        raise SystemExit(f"{pyproject}: no [project] dependencies") from None
    groups = data["project"].get("optional-dependencies", {})
    for extra in extras:
        if extra not in groups:
            raise SystemExit(f"{pyproject}: no optional-dependencies group {extra!r} (there are: "
                             f"{', '.join(sorted(groups))})")
        deps += groups[extra]
    skip = {requirement_name(name) for name in without}
    return [dep for dep in deps if requirement_name(dep) not in skip]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", default="pyproject.toml", type=Path, help="default ./pyproject.toml")
    parser.add_argument("--without", action="append", default=[], metavar="NAME", help="leave this package out")
    parser.add_argument("--extra", action="append", default=[], metavar="GROUP",
                        help="add an optional-dependencies group (e.g. s3, gcs)")
    args = parser.parse_args(argv)
    if not args.pyproject.is_file():
        parser.error(f"{args.pyproject} not found (run from the repository root or pass --pyproject)")
    sys.stdout.write("".join(f"{dep}\n" for dep in requirements(args.pyproject, set(args.without), args.extra)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
