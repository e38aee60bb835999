"""A run directory that lives on object storage: its local working copy, and the sync between the two.

Every stage reads and writes a run directory through ordinary paths (the contracts of docs/run-directory.md). For
a run location `s3://bucket/runs/x` (or gs://) the stages work in a local *working copy* of it
(`$BERTFACTORY_WORK_ROOT/s3/bucket/runs/x`, default `~/.cache/bertfactory/runs/...`), and the run location is the
truth that outlives the machine:

- before a stage, what it reads is pulled: the stamps, the upstream outputs it hashes, the latest complete
  checkpoint to resume from (flows/run_sync.py says which, per stage);
- shards are not pulled: each process fetches the shards it opens into a bounded, content-addressed cache
  (bertfactory.shard_cache), verified against the manifest's sha256;
- after a stage its outputs are pushed, the stage's stamp last: on storage with no rename the stamp (and a
  shard set's manifest.json, and a checkpoint's marker) is the commit marker, written only once everything it
  vouches for is there, so a crash leaves nothing that looks finished;
- each checkpoint is pushed as soon as it is written (training.checkpoint), its marker object last.

The working copy is a cache: deleting it loses nothing that was pushed, and a fresh machine (a second node, a TPU
VM) rebuilds what it needs from the run location. `.bertfactory/origin.json` in the working copy names the run
location, so code deep in a stage can find it from any path under the working copy (origin_of / remote_of) without
the URL being passed down.

    from bertfactory.run_location import resolve_run_dir
    work = resolve_run_dir("s3://bucket/runs/x")      # Path of the working copy (location checked first)
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable

from . import storage
from .io import atomic_write_json

logger = logging.getLogger("bertfactory")

ORIGIN = Path(".bertfactory") / "origin.json"
LEDGER = Path(".bertfactory") / "synced.json"
# a directory pushed to the run location is complete once this object exists (written last)
MARKER = ".complete"


def work_root() -> Path:
    """Where working copies live: $BERTFACTORY_WORK_ROOT, else $XDG_CACHE_HOME/bertfactory/runs."""
    if root := os.environ.get("BERTFACTORY_WORK_ROOT"):
        return Path(root).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "bertfactory" / "runs"


def working_copy_of(url: str) -> Path:
    url = storage.normalize(url)
    scheme, rest = url.split("://", 1)
    return work_root() / scheme / rest


def resolve_run_dir(location: str | os.PathLike, what: str = "run directory", check: bool = True) -> Path:
    """The directory the stages use for `location`: the path itself, or a URL's working copy (made, and marked
    with its origin). `check`: refuse an unusable URL first (storage.StorageError, one line)."""
    text = str(location)
    if not storage.is_url(text):
        return storage.local_path(text)
    url = storage.normalize(text)
    if check:
        storage.check_location(url, what)
    work = working_copy_of(url)
    origin = work / ORIGIN
    recorded = origin_of(work) if origin.is_file() else None
    if recorded != url:
        if recorded is not None:
            # written for another spelling of this place (s3://b//x, before URLs lost their repeated slashes): the
            # working copy is a cache, so it is re-tied to `url` and its sync record starts afresh
            logger.warning("%s: working copy %s was tied to %s; now to %s", text, work, recorded, url)
            (work / LEDGER).unlink(missing_ok=True)
        atomic_write_json(origin, {"url": url})
    return work


def _find_root(path: Path, limit: int = 12) -> Path | None:
    # resolved: a symlink inside a working copy (continued/vN/shards -> ../../corpora/vN) names its target's place
    path = Path(path).resolve()
    for candidate in [path, *path.parents][:limit]:
        if (candidate / ORIGIN).is_file():
            return candidate
    return None


def origin_of(path: str | os.PathLike) -> str | None:
    """The run location whose working copy holds `path`, or None for an ordinary local run."""
    root = _find_root(Path(path))
    if root is None:
        return None
    try:
        return json.loads((root / ORIGIN).read_text(encoding="utf-8"))["url"]
    except (OSError, ValueError, KeyError):
        return None


def remote_of(path: str | os.PathLike) -> str | None:
    """The URL of `path` (a file or directory in a working copy) in its run location, or None."""
    path = Path(path).resolve()
    root = _find_root(path)
    if root is None:
        return None
    url = origin_of(root)
    rel = path.relative_to(root).as_posix()
    return storage.join(url, rel) if rel != "." else url


class WorkingCopy:
    """The sync between a working copy (`root`) and its run location (`url`). Paths are relative to the root."""

    def __init__(self, root: Path, url: str):
        self.root = Path(root)
        self.url = url

    @classmethod
    def of(cls, path: str | os.PathLike) -> "WorkingCopy | None":
        """The working copy holding `path` (its whole run location), or None for a local path."""
        root = _find_root(Path(path))
        url = origin_of(root) if root is not None else None
        return cls(root.resolve(), url) if url else None

    def remote(self, rel: str | Path) -> str:
        return storage.join(self.url, Path(rel).as_posix())

    # -- the ledger: what was last pulled or pushed, so unchanged files are not transferred again ---------------

    def _ledger(self) -> dict[str, list]:
        try:
            return json.loads((self.root / LEDGER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _record(self, entries: dict[str, list]) -> None:
        if entries:
            ledger = self._ledger()
            ledger.update(entries)
            atomic_write_json(self.root / LEDGER, ledger)

    @staticmethod
    def _stamp(path: Path) -> list:
        st = path.stat()
        return [st.st_size, st.st_mtime_ns]

    # -- pull ----------------------------------------------------------------------------------------------------

    def pull(self, rels: Iterable[str | Path], missing_ok: bool = True) -> list[str]:
        """Download each file the run location has, unless the local copy is the one last synced with the object
        as it is now (another machine may have replaced it since: its version is compared, one HEAD request);
        returns the relative paths present locally afterwards.

        A local file changed since it was last synced, whose object the run location still has as it was then, is
        newer work that never went up (a push that failed): it is kept, and still unpublished (`unpublished`).
        Only when the object changed too (another machine pushed since) does the run location win."""
        ledger, done, present = self._ledger(), {}, []
        for rel in rels:
            rel = Path(rel).as_posix()
            local = self.root / rel
            remote = self.remote(rel)
            version = storage.object_version(remote)
            entry = ledger.get(rel)
            synced = local.is_file() and entry is not None and entry[:2] == self._stamp(local)
            changed_here = local.is_file() and entry is not None and not synced
            if version is None:
                if not missing_ok:
                    raise storage.StorageError(f"{remote}: not found in the run location")
                if synced:
                    local.unlink()  # removed from the run location since it was last synced
                if changed_here:
                    present.append(rel)
                continue
            if changed_here and entry[2:] == [version]:
                present.append(rel)  # written here since the last sync, not yet pushed: the newer copy
                continue
            if changed_here:
                logger.warning("%s: changed here and in the run location since the last sync; taking the run "
                               "location's copy", local)
            if not (synced and entry[2:] == [version]):
                try:
                    storage.download_file(remote, local)
                except FileNotFoundError:  # deleted between the HEAD and the GET
                    continue
            done[rel] = self._stamp(local) + [version]
            present.append(rel)
        self._record(done)
        return present

    def unpublished(self, rel: str | Path) -> bool:
        """Whether the local file differs from what was last synced with the run location (or never was)."""
        rel = Path(rel).as_posix()
        local = self.root / rel
        if not local.is_file():
            return False
        entry = self._ledger().get(rel)
        return entry is None or entry[:2] != self._stamp(local)

    def pull_tree(self, rel: str | Path, exclude: tuple[str, ...] = ()) -> list[str]:
        """Every file under `rel` in the run location (but those under an `exclude` prefix), pulled."""
        rel = Path(rel).as_posix() if str(rel) not in ("", ".") else ""
        names = storage.list_files(self.remote(rel) if rel else self.url)
        full = [f"{rel}/{name}" if rel else name for name in sorted(names)]
        wanted = [f for f in full if not any(f.startswith(prefix) for prefix in exclude)
                  and Path(f).name != MARKER and not f.startswith(".bertfactory/")]
        return self.pull(wanted)

    # -- push ----------------------------------------------------------------------------------------------------

    def _changed(self, rels: Iterable[str | Path], ledger: dict[str, list]) -> list[str]:
        """The existing local files among `rels` that changed since they were last synced."""
        out = []
        for rel in rels:
            rel = Path(rel).as_posix()
            local = self.root / rel
            if local.is_file() and (ledger.get(rel) or [])[:2] != self._stamp(local):
                out.append(rel)
        return out

    def push(self, rels: Iterable[str | Path]) -> int:
        """Upload each existing local file that changed since it was last synced; returns how many went up."""
        ledger, done = self._ledger(), {}
        for rel in self._changed(rels, ledger):
            storage.upload_file(self.root / rel, self.remote(rel))
            done[rel] = self._stamp(self.root / rel) + [storage.object_version(self.remote(rel))]
        self._record(done)
        return len(done)

    def unmark(self, rels: Iterable[str | Path]) -> None:
        """Delete commit objects from the run location (and forget them here, so that the next push sends them
        again) before the files they vouch for change: a reader never trusts a half-replaced set."""
        rels = [Path(rel).as_posix() for rel in rels]
        for rel in rels:
            storage.delete(self.remote(rel))
        ledger = self._ledger()
        kept = {k: v for k, v in ledger.items() if k not in rels}
        if len(kept) != len(ledger):
            atomic_write_json(self.root / LEDGER, kept)

    def push_tree(self, rel: str | Path, last: tuple[str, ...] = (), exclude: tuple[str, ...] = (),
                  mirror: bool = False, keep: Iterable[str] = ()) -> int:
        """Upload the files under `rel`; the names in `last` (relative to `rel`) after every other file, so that
        they commit the rest: when any other file goes up, the run location's copies of `last` are deleted first
        (unmark). `mirror`: afterwards delete remote files under `rel` that are gone locally, but those named in
        `keep` (paths relative to the root: outputs the run location alone holds, as a run's shards), before the
        `last` files go up, so that a reader never sees a committed set with stale files in it."""
        rel = Path(rel).as_posix()
        base = self.root / rel
        if not base.is_dir():
            return 0
        # dot files are writers' temporaries (bertfactory.io's atomic writes), never outputs; dot folders are a nested
        # working copy's own bookkeeping (e.g. pretrain/final/.bertfactory/ when that model was pulled by its URL):
        # its origin and ledger describe this machine, not the run
        found = [p.relative_to(self.root) for p in base.rglob("*") if p.is_file()]
        files = sorted(f.as_posix() for f in found
                       if not any(part.startswith(".") for part in f.relative_to(rel).parts))
        files = [f for f in files if not any(f.startswith(prefix) for prefix in exclude)]
        final = [f"{rel}/{name}" for name in last]
        changed = self._changed([f for f in files if f not in final], self._ledger())
        if changed and final:
            self.unmark(final)
        count = self.push(changed)
        if mirror:
            local = set(files) | set(keep)
            for name in storage.list_files(self.remote(rel)):
                full = f"{rel}/{name}"
                if full not in local and not any(full.startswith(prefix) for prefix in exclude):
                    storage.delete(self.remote(full))
        return count + self.push([f for f in final if f in files])

    def publish_dir(self, rel: str | Path) -> None:
        """Push a finished directory (a checkpoint), then its marker object: a reader trusts it only with the
        marker (complete_dirs)."""
        rel = Path(rel).as_posix()
        if self._changed([p.relative_to(self.root) for p in (self.root / rel).rglob("*") if p.is_file()],
                         self._ledger()):
            storage.delete(self.remote(f"{rel}/{MARKER}"))  # a directory saved again: no old marker over new files
        self.push_tree(rel)
        storage.write_bytes(self.remote(f"{rel}/{MARKER}"), b"")

    def complete_dirs(self, rel: str | Path) -> list[str]:
        """The names of the directories under `rel` in the run location that hold their marker."""
        rel = Path(rel).as_posix()
        names = storage.list_files(self.remote(rel))
        return sorted({name.split("/", 1)[0] for name in names if name.endswith(f"/{MARKER}") and name.count("/") == 1})

    def move_tree(self, rel: str | Path, tag: str) -> str:
        """Move `rel` in the run location to `<rel>.replaced-<time>-<tag>` beside it (bertfactory/replaced.py);
        returns the new URL. Its ledger entries go: the working copy's files are no longer what the location has."""
        from .replaced import replaced_name

        rel = Path(rel).as_posix()
        target = f"{rel.rsplit('/', 1)[0] + '/' if '/' in rel else ''}{replaced_name(rel.rsplit('/', 1)[-1], tag)}"
        storage.move(self.remote(rel), self.remote(target))
        self._forget(rel)
        return self.remote(target)

    def _forget(self, rel: str) -> None:
        ledger = self._ledger()
        prefix = rel + "/"
        kept = {k: v for k, v in ledger.items() if not k.startswith(prefix)}
        if len(kept) != len(ledger):
            atomic_write_json(self.root / LEDGER, kept)

    def delete_tree(self, rel: str | Path) -> None:
        storage.delete(self.remote(Path(rel).as_posix()), recursive=True)
        ledger = self._ledger()
        prefix = Path(rel).as_posix() + "/"
        kept = {k: v for k, v in ledger.items() if not k.startswith(prefix)}
        if len(kept) != len(ledger):
            atomic_write_json(self.root / LEDGER, kept)


def publish_checkpoint(directory: str | os.PathLike, pruned: Iterable[str | os.PathLike] = (),
                       also: Iterable[str | os.PathLike] = ()) -> None:
    """A checkpoint just written under a working copy goes up to the run location, its marker last; those that
    `keep_last` pruned locally are removed there too (`also`: files pushed before the marker), after the new one is complete (so one always survives), each
    unmarked before its files go (never a half-deleted "complete" checkpoint). No-op for a local run."""
    wc = WorkingCopy.of(directory)
    if wc is None:
        return
    root = wc.root.resolve()
    wc.push([Path(f).resolve().relative_to(root).as_posix() for f in also])
    wc.publish_dir(Path(directory).resolve().relative_to(root).as_posix())
    for old in pruned:
        rel = Path(old).resolve().relative_to(root).as_posix()
        storage.delete(wc.remote(f"{rel}/{MARKER}"))
        wc.delete_tree(rel)


def remote_complete_dirs(directory: str | os.PathLike) -> list[str]:
    """The names of the marked directories under `directory`'s place in its run location; [] for a local path."""
    wc = WorkingCopy.of(directory)
    if wc is None:
        return []
    return wc.complete_dirs(Path(directory).resolve().relative_to(wc.root).as_posix())


def read_remote_json(path: str | os.PathLike) -> Any:
    """The run location's copy of `path` (a file under a working copy, present here or not), parsed; None when it is
    missing there, unreadable as JSON, or `path` is local."""
    url = remote_of(path)
    if url is None:
        return None
    try:
        return json.loads(storage.read_bytes(url))
    except (FileNotFoundError, ValueError):
        return None


def publish_files(paths: Iterable[str | os.PathLike]) -> None:
    """Files just written under a working copy go up to the run location now, in the order given (the last can
    commit the others), instead of at their stage's end: they outlive this machine. No-op for a local run."""
    paths = [Path(p) for p in paths]
    wc = WorkingCopy.of(paths[0]) if paths else None
    if wc is None:
        return
    wc.push([p.resolve().relative_to(wc.root).as_posix() for p in paths])


MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "head.json")


def localize(location: str | os.PathLike, what: str = "model directory") -> Path:
    """A model directory or run directory given as a URL, as a local directory: its working copy, holding a model
    directory's files (all of them: generator/ and sharded weights included) or a run directory's trained model,
    manifest and tokenizer. A path is returned as it is."""
    text = str(location)
    if not storage.is_url(text):
        return storage.local_path(text)
    work = resolve_run_dir(text, what)
    wc = WorkingCopy(work, storage.normalize(text))
    if storage.exists(wc.remote("config.json")):
        wc.pull_tree("")
    elif storage.exists(wc.remote("pretrain/final/config.json")):
        wc.pull_tree("pretrain/final")
        wc.pull(["shards/manifest.json", "tokenizer/tokenizer.json"])
    else:
        raise storage.StorageError(f"{text}: neither a model directory (config.json) nor a run directory "
                                   "(pretrain/final/config.json)")
    return work


def publish_local_dir(local: str | os.PathLike, url: str, replace: bool = False) -> None:
    """Upload a finished local directory (an export, an import) to `url`: config.json after every other file (a
    reader that finds it, as `localize` does, finds the whole directory), the marker object last. `replace`: what
    `url` held goes, its config.json and marker first (so it is never taken for a directory while mixed), then the
    files the new directory lacks."""
    local = Path(local)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    commit = [name for name in files if name == "config.json"]
    if replace:
        for name in (MARKER, "config.json"):
            storage.delete(storage.join(url, name))
    for name in files:
        if name not in commit:
            storage.upload_file(local / name, storage.join(url, name))
    if replace:
        for name in sorted(set(storage.list_files(url)) - set(files) - {MARKER}):
            storage.delete(storage.join(url, name))
    for name in commit:
        storage.upload_file(local / name, storage.join(url, name))
    storage.write_bytes(storage.join(url, MARKER), b"")
