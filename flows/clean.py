"""`bertfactory clean RUN [--yes]`: the one command that deletes anything in a run directory, and only what the
stages moved aside (bertfactory/replaced.py: `<dir>.replaced-<time>-<key>/`). Without --yes it lists them.

    bertfactory clean runs/mine            # what would be deleted, with sizes
    bertfactory clean runs/mine --yes      # delete them (on an s3:// / gs:// run directory: in the bucket too)

With --yes it lists and deletes under the run directory's lock, as `bertfactory run` writes (flows/lock.py; on object
storage also the run location's lease, taken through this machine's working copy): while a run, evaluate or another
clean of that run directory holds it, here or on another machine, it is refused in the one line naming the holder
and deletes nothing. A stage moves outputs aside and reads them under that lock, so none is deleted meanwhile.
Without --yes it only lists, unlocked.

A local directory that is not a run directory (none of the stamps or stage outputs of docs/run-directory.md, no
replaced folder), or one that does not exist, is refused in one `error:` line before anything is written there.
"""

from __future__ import annotations

from pathlib import Path

from bertfactory import storage
from bertfactory.errors import InputError
from bertfactory.replaced import delete_replaced, is_replaced, replaced_outputs

from .stamps import RUN_ENTRIES, is_run_directory


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
    url = None
    if storage.is_url(location):
        storage.check_location(location)
        url = storage.normalize(location)
        from bertfactory.run_location import resolve_run_dir, working_copy_of

        # to delete: the working copy made and marked with its origin, so that its lock is the run location's lease
        local_root = resolve_run_dir(url, check=False) if args.yes else working_copy_of(url)
    else:
        local_root = Path(location)
        if not local_root.is_dir():
            raise InputError(f"{location}: no such run directory")
        if not is_run_directory(local_root):  # refused before the lock: it would leave .bertfactory/lock there
            raise InputError(f"{location}: not a run directory (it holds none of {', '.join(RUN_ENTRIES)} nor a "
                             f"replaced output folder; docs/run-directory.md): nothing of it is cleaned")
    if not args.yes:
        return _clean(location, url, local_root, delete=False)
    from .lock import run_dir_lock

    # listed and deleted under the lock: what is deleted is what was listed, and no stage moves or reads one meanwhile
    with run_dir_lock(local_root, "clean"):
        return _clean(location, url, local_root, delete=True)


def _clean(location: str, url: str | None, local_root: Path, delete: bool) -> int:
    lines: list[tuple[str, int]] = []
    remote = _remote_replaced(url) if url is not None else {}
    lines += [(storage.join(url, rel), size) for rel, size in sorted(remote.items())]
    local = replaced_outputs(local_root) if local_root.is_dir() else []
    lines += [(str(p), _size(p)) for p in local]
    if not lines:
        print(f"{location}: no replaced outputs")
        return 0
    for where, size in lines:
        print(f"{'deleting' if delete else 'would delete'} {where} ({size / 1e6:.1f} MB)")
    if not delete:
        print("pass --yes to delete them")
        return 0
    for rel in remote:
        storage.delete(storage.join(url, rel), recursive=True)
    delete_replaced(local_root)
    print(f"deleted {len(lines)} replaced output folder(s)")
    return 0
