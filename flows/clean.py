"""`bertfactory clean RUN [--yes]`: the one command that deletes anything in a run directory, and only what the
stages moved aside (bertfactory/replaced.py: `<dir>.replaced-<time>-<key>/`). Without --yes it lists them.

    bertfactory clean runs/mine            # what would be deleted, with sizes
    bertfactory clean runs/mine --yes      # delete them (on an s3:// / gs:// run directory: in the bucket too)
"""

from __future__ import annotations

from pathlib import Path

from bertfactory import storage
from bertfactory.errors import InputError
from bertfactory.replaced import delete_replaced, is_replaced, replaced_outputs


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def _remote_replaced(url: str) -> dict[str, int]:
    """The run location's replaced folders (at any depth, the outermost of nested ones) -> bytes."""
    found: dict[str, int] = {}
    for name, size in storage.list_files(url).items():
        parts = name.split("/")
        depth = next((i for i, part in enumerate(parts[:-1]) if is_replaced(part)), None)
        if depth is not None and not any(p.startswith(".") for p in parts[:depth]):
            key = "/".join(parts[:depth + 1])
            found[key] = found.get(key, 0) + size
    return found


def cmd_clean(args) -> int:
    location = args.run_dir
    lines: list[tuple[str, int]] = []
    if storage.is_url(location):
        storage.check_location(location)
        url = storage.normalize(location)
        remote = _remote_replaced(url)
        lines += [(storage.join(url, rel), size) for rel, size in sorted(remote.items())]
        from bertfactory.run_location import working_copy_of

        local_root = working_copy_of(url)
    else:
        local_root = Path(location)
        if not local_root.is_dir():
            raise InputError(f"{location}: no such run directory")
        remote = {}
    local = replaced_outputs(local_root) if local_root.is_dir() else []
    lines += [(str(p), _size(p)) for p in local]
    if not lines:
        print(f"{location}: no replaced outputs")
        return 0
    for where, size in lines:
        print(f"{'deleting' if args.yes else 'would delete'} {where} ({size / 1e6:.1f} MB)")
    if not args.yes:
        print("pass --yes to delete them")
        return 0
    for rel in remote:
        storage.delete(storage.join(url, rel), recursive=True)
    delete_replaced(local_root)
    print(f"deleted {len(lines)} replaced output folder(s)")
    return 0
