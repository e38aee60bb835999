"""Machine-independent spellings of the absolute paths a run writes into its keys and manifests.

A stage key (flows/stamps.py) and a shard manifest (preprocessing/manifest.py) must not depend on where one machine
keeps the run's working copy or the samples cache: a run on object storage is continued by nodes whose
`BERTFACTORY_WORK_ROOT` or HOME differ, and a local run directory may be moved. So an absolute path inside the run
directory is named `RUN/<path inside it>`, one inside the samples cache `SAMPLES/<path inside it>` (the same files
on every machine, fetched by checksum: bertfactory/samples.py); anything else is left as written.

    portable_name("/home/a/runs/x/tapt/corpus.jsonl", Path("/home/a/runs/x"))  ->  "RUN/tapt/corpus.jsonl"
    portable_values({"inputs": [...], "tokenizer": {"path": ...}}, run_dir)       # every string inside, the same way
"""

from __future__ import annotations

from pathlib import Path

from .samples import cache_dir


def portable_roots(run_dir: Path | None) -> dict[str, Path]:
    """The named places, most specific first: RUN (when given), then SAMPLES."""
    roots = {"RUN": Path(run_dir).resolve()} if run_dir is not None else {}
    return {**roots, "SAMPLES": (cache_dir() / "samples").resolve()}


def portable_name(value: str, run_dir: Path | None, roots: dict[str, Path] | None = None) -> str:
    """`value` as NAME/<path inside the root> when it is an absolute path inside one of `roots` (default
    portable_roots(run_dir)); otherwise unchanged (relative paths, URLs, `sample:` specs, non-path strings)."""
    if not value.startswith(("/", "~")):
        return value
    path = Path(value).expanduser()
    if not path.is_absolute():
        return value
    path = path.resolve()
    for name, root in (roots if roots is not None else portable_roots(run_dir)).items():
        try:
            inside = path.relative_to(root)
        except ValueError:
            continue
        return f"{name}/{inside.as_posix()}" if inside.parts else name
    return value


def portable_values(value, run_dir: Path | None, roots: dict[str, Path] | None = None):
    """Every string inside `value` (dicts, lists, tuples: the JSON shapes of a config dump) through portable_name."""
    roots = roots if roots is not None else portable_roots(run_dir)
    if isinstance(value, str):
        return portable_name(value, run_dir, roots)
    if isinstance(value, dict):
        return {k: portable_values(v, run_dir, roots) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable_values(v, run_dir, roots) for v in value]
    return value
