"""Source watchers for `corpus_refresh`: a watched location -> the input files it offers now.

    local directory or glob       every file under it / matching it (preprocessing.inputs, the one expansion core)
    fsspec URL (s3://, gs://, ...) the same through fsspec, listing retried with backoff, then an error naming it
    Wikipedia dumps directory     a dump directory holding `dumpstatus.json` (as on dumps.wikimedia.org/<wiki>/<date>/),
                                  or a wiki's directory of dated dumps (<wiki>/YYYYMMDD/dumpstatus.json): only the
                                  files of jobs whose status is `done` count, checked against the recorded size
    CC-News month listing         a `warc.paths` or `warc.paths.gz` file (crawl-data/CC-NEWS/YYYY/MM/warc.paths.gz):
                                  every WARC it lists, resolved against the crawl root (the part before crawl-data/)

`python -m flows.watch configs/local.yaml SOURCE...` prints what each source offers.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import sys
import time
from typing import Callable, TypeVar

from bertfactory.errors import BertfactoryError, ConfigError, InputError
from preprocessing.inputs import InputFile, ListingError, companion_file, expand_inputs, is_url

from .recipe import RefreshConfig

logger = logging.getLogger("flows")

T = TypeVar("T")

DUMPSTATUS = "dumpstatus.json"
_DATED_DUMP = re.compile(r"^\d{8}$")
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError)


def _transient(err: BaseException) -> bool:
    """Whether another try may succeed: network and service failures yes; a missing or malformed location no."""
    if isinstance(err, ListingError):
        return err.__cause__ is None or _transient(err.__cause__)
    return not isinstance(err, (*_PERMANENT, BertfactoryError, ImportError))


def with_retries(action: Callable[[], T], location: str, what: str, cfg: RefreshConfig) -> T:
    """`action()`, retried on transient failures with exponential backoff; then an InputError naming `location`."""
    delay = cfg.list_backoff_s
    for attempt in range(1, cfg.list_attempts + 1):
        try:
            return action()
        except Exception as err:  # fsspec backends raise their own types; _transient sorts them
            if not _transient(err):
                raise
            if attempt == cfg.list_attempts:
                raise InputError(f"{location}: cannot {what} after {attempt} attempt(s): "
                                 f"{type(err).__name__}: {err}") from err
            logger.warning("%s: %s failed (%s: %s); attempt %d of %d in %.1f s", location, what,
                           type(err).__name__, err, attempt + 1, cfg.list_attempts, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def _fs(location: str):
    import fsspec

    return fsspec.core.url_to_fs(location)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name.lstrip("/")


def _read_bytes(location: str, cfg: RefreshConfig) -> bytes:
    def read() -> bytes:
        fs, path = _fs(location)
        with fs.open(path, "rb") as f:
            return f.read()

    return with_retries(read, location, "read", cfg)


# ---------------------------------------------------------------------------------------- Wikipedia dumps


def _is_dir(location: str, cfg: RefreshConfig) -> bool:
    def check() -> bool:
        fs, path = _fs(location)
        return fs.isdir(path)

    return with_retries(check, location, "list", cfg)


def _exists(location: str, cfg: RefreshConfig) -> bool:
    def check() -> bool:
        fs, path = _fs(location)
        return fs.exists(path)

    return with_retries(check, location, "list", cfg)


def wikipedia_dump_dirs(location: str, cfg: RefreshConfig) -> list[str] | None:
    """The dump directories at `location` (itself, or its dated subdirectories), None when it is no dumps layout."""
    if any(ch in location for ch in "*?[") or not _is_dir(location, cfg):
        return None
    if _exists(_join(location, DUMPSTATUS), cfg):
        return [location]

    def children() -> list[str]:
        fs, path = _fs(location)
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)]

    dated = sorted(n for n in with_retries(children, location, "list", cfg) if _DATED_DUMP.match(n))
    found = [_join(location, n) for n in dated if _exists(_join(_join(location, n), DUMPSTATUS), cfg)]
    return found or None


def wikipedia_dump_files(dump_dir: str, cfg: RefreshConfig) -> list[InputFile]:
    """The files of the finished jobs (status `done`) among `cfg.wikipedia_jobs` of one dump directory."""
    status_path = _join(dump_dir, DUMPSTATUS)
    try:
        status = json.loads(_read_bytes(status_path, cfg))
        jobs = status["jobs"]
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(f"{status_path}: not a Wikipedia dumpstatus.json ({type(err).__name__}: {err}); expected "
                         '{"jobs": {"articlesdump": {"status": "done", "files": {...}}}}') from None
    files: list[InputFile] = []
    for job in cfg.wikipedia_jobs:
        info = jobs.get(job)
        if info is None:
            logger.info("%s: no job %r in this dump", status_path, job)
            continue
        if info.get("status") != "done":
            logger.info("%s: job %r is %s, its files are not read yet", status_path, job, info.get("status"))
            continue
        for name, meta in sorted((info.get("files") or {}).items()):
            if companion_file("wikipedia", name):  # a multistream index: read through its dump, not as one
                continue
            location = _join(dump_dir, name)
            if not _exists(location, cfg):
                raise InputError(f"{location}: listed by the finished job {job!r} in {status_path} but not there "
                                 "(an incomplete mirror?)")
            expected = (meta or {}).get("size")
            if expected is not None:
                fs, path = _fs(location)
                size = with_retries(lambda: int(fs.size(path)), location, "stat", cfg)
                if size != int(expected):
                    raise InputError(f"{location}: {size} bytes, but {status_path} records {expected} for job "
                                     f"{job!r} (a partial download?)")
            files.append(InputFile(location, location))
    return files


# ----------------------------------------------------------------------------------------------- CC-News


def is_warc_listing(location: str) -> bool:
    return location.rstrip("/").endswith(("warc.paths", "warc.paths.gz"))


def warc_listing_files(listing: str, cfg: RefreshConfig) -> list[InputFile]:
    """The WARC files a CC-News month listing names, resolved against the crawl root."""
    data = _read_bytes(listing, cfg)
    if listing.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise InputError(f"{listing}: not a gzip file ({err})") from None
    try:
        lines = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as err:
        raise InputError(f"{listing}: not a UTF-8 list of WARC paths ({err})") from None
    marker = "crawl-data/"
    root = listing[: listing.index(marker)] if marker in listing else listing.rsplit("/", 1)[0] + "/"
    files = []
    for number, line in enumerate(lines, 1):
        location = line if (is_url(line) or line.startswith("/")) else _join(root, line)
        if not location.endswith((".warc", ".warc.gz")):
            raise InputError(f"{listing}, line {number}: {line!r} is not a WARC path (.warc or .warc.gz)")
        if not _exists(location, cfg):
            raise InputError(f"{location}: listed in {listing} (line {number}) but not there")
        files.append(InputFile(location, location))
    if not files:
        raise InputError(f"{listing}: lists no WARC file")
    return files


# ------------------------------------------------------------------------------------------------ dispatch


def discover(source: str, corpus, cfg: RefreshConfig, where: str = "corpus.inputs") -> list[InputFile]:
    """The input files `source` offers now, for a corpus of `corpus.format` (a CorpusConfig). `where`: what the
    messages call the list `source` is in (corpus.inputs, or the sources a refresh was given)."""
    if is_warc_listing(source):
        if corpus.format != "warc":
            raise ConfigError(f"source {source}: a CC-News WARC listing needs corpus.format warc, not {corpus.format!r}")
        return warc_listing_files(source, cfg)
    dumps = None if source.startswith("sample:") else wikipedia_dump_dirs(source, cfg)
    if dumps:
        if corpus.format != "wikipedia":
            raise ConfigError(f"source {source}: a Wikipedia dumps directory needs corpus.format wikipedia, "
                              f"not {corpus.format!r}")
        files = [f for d in dumps for f in wikipedia_dump_files(d, cfg)]
        if not files:
            logger.info("%s: no finished dump job among %s yet", source, list(cfg.wikipedia_jobs))
        return files
    one = corpus.model_copy(update={"inputs": [source]})
    return with_retries(lambda: expand_inputs(one, where), source, "list", cfg)


def discover_all(sources: list[str], corpus, cfg: RefreshConfig, where: str = "corpus.inputs") -> list[InputFile]:
    """Every source's files, in source order, each location once."""
    seen: set[str] = set()
    out: list[InputFile] = []
    for source in sources:
        for f in discover(source, corpus, cfg, where):
            if f.location not in seen:
                seen.add(f.location)
                out.append(f)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m flows.watch RECIPE [SOURCE ...]`: the input files the sources offer now, one per line (default
    sources: the recipe's corpus.inputs). A source that cannot be read is one `error:` line, exit status 2."""
    import argparse

    from .recipe import load_recipe, resolve_recipe

    parser = argparse.ArgumentParser(prog="python -m flows.watch", description="print the input files that watched "
                                     "sources offer now, as a corpus refresh would see them (docs/orchestration.md)")
    parser.add_argument("config", help="recipe YAML or bundled recipe name, e.g. local")
    parser.add_argument("sources", nargs="*", metavar="SOURCE",
                        help="a location to watch (default: the recipe's corpus.inputs)")
    args = parser.parse_args(argv)
    try:
        recipe = load_recipe(str(resolve_recipe(args.config)))
        found = discover_all(args.sources or list(recipe.corpus.inputs), recipe.corpus, recipe.refresh,
                             "watched sources" if args.sources else "corpus.inputs")
    except Exception as err:
        from .user_errors import is_user_error, user_error_line

        if not is_user_error(err):
            raise
        print(f"error: {user_error_line(err)}", file=sys.stderr)  # one line, as the bertfactory command prints it
        return 2
    for item in found:
        print(item.location)
    return 0


if __name__ == "__main__":
    sys.exit(main())
