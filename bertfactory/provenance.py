"""Which code produced an output: the bertfactory version and, when it runs from a git checkout, the commit (with
`-dirty` when tracked files differ from it). Stage stamps record it, so that a figure quoted from a run directory
(scripts/readme_demo.py) names the commit that made it.

    from bertfactory.provenance import code_revision
    code_revision()   # {"version": "0.1.0", "commit": "e1d1857...", "dirty": False, "changed": []}; commit None
                      # outside git; "changed": the tracked files that differ from the commit
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from bertfactory import __version__

_SOURCE = Path(__file__).resolve().parents[1]
CHANGED_LISTED = 20


@functools.lru_cache(maxsize=1)
def code_revision() -> dict:
    """{"version", "commit", "dirty"} of the installed code; commit and dirty are None when it is not a git checkout
    (an installed wheel) or git is missing. Cached: the code does not change under a running process."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD") if (_SOURCE / ".git").exists() else None
    dirty = changed = None
    if commit:
        status = git("status", "--porcelain", "--untracked-files=no")
        if status is not None:
            dirty = bool(status)
            # which tracked files differed (the first CHANGED_LISTED): a reader can tell an edited test or README
            # from edited training code without the machine the run was on
            paths = sorted(parts[1] for line in status.splitlines() if len(parts := line.split(None, 1)) == 2)
            changed = paths[:CHANGED_LISTED] + ([f"... and {len(paths) - CHANGED_LISTED} more"]
                                                if len(paths) > CHANGED_LISTED else [])
    return {"version": __version__, "commit": commit, "dirty": dirty, "changed": changed}


def result_provenance() -> dict:
    """{"commit" (short), "dirty", "changed", "date" (UTC, ISO)} for a benchmark's result file, taken when the run
    starts: what scripts/readme_quality.py needs to quote a figure (it refuses a result without a clean commit, naming
    the files that differed)."""
    from datetime import datetime, timezone

    revision = code_revision()
    return {"commit": revision["commit"][:7] if revision["commit"] else None, "dirty": revision["dirty"],
            "changed": revision["changed"],
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
