"""Locations: a local path or an object-storage URL (s3://, gs://, file://), through one small layer over fsspec.

Why fsspec (and not pyarrow.fs or Beam's FileSystems): every stage already reads fsspec URLs for its inputs
(preprocessing.inputs), s3fs and gcsfs follow each cloud's standard configuration (the AWS variables and profiles,
AWS_ENDPOINT_URL for S3-compatible stores; Application Default Credentials and STORAGE_EMULATOR_HOST for GCS),
and the training side needs no Beam. What this layer adds is what a user needs before any work starts: one line
naming the URL and what to install or set when a scheme is unknown, its package missing, its credentials absent or
its bucket unreachable (check_location), and the few operations the run directory needs, each atomic where object
storage can be: an object appears whole or not at all, so a download lands in a temporary file renamed once
verified, and a directory is "published" by writing its marker object last.

    from bertfactory import storage
    storage.check_location("s3://bucket/run")          # StorageError (one line) or None
    storage.write_bytes("s3://bucket/run/x.json", b"{}")
    storage.download_file("s3://bucket/run/x.json", Path("x.json"), sha256=None)
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import InputError
from .io import default_file_mode

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://(.*)$")

# scheme -> (the fsspec protocol, the package that implements it, what to install)
SCHEMES: dict[str, tuple[str, str, str]] = {
    "s3": ("s3", "s3fs", "pip install 'bertfactory[s3]' (s3fs)"),
    "gs": ("gs", "gcsfs", "pip install 'bertfactory[gcs]' (gcsfs)"),
    "gcs": ("gs", "gcsfs", "pip install 'bertfactory[gcs]' (gcsfs)"),
}


class StorageError(InputError):
    """A location that cannot be used: unknown scheme, missing package or credentials, unreachable bucket, or a
    transfer that failed. The message names the URL and what to do; the CLI prints it as one line, exit 2."""


def scheme_of(location: str | os.PathLike) -> str | None:
    """The URL scheme of `location` (lower case), or None for a plain path."""
    m = _URL.match(str(location))
    return m.group(1).lower() if m else None


def is_url(location: str | os.PathLike) -> bool:
    """True for a remote URL (s3://, gs://, any scheme but file://); plain paths and file:// URLs are local."""
    scheme = scheme_of(location)
    return scheme is not None and scheme != "file"


def local_path(location: str | os.PathLike) -> Path:
    """A plain path or file:// URL as a Path. A remote URL is refused: it must never become a local folder (a
    Path("s3://b/run") is the relative folder s3:/b/run)."""
    text = str(location)
    scheme = scheme_of(text)
    if scheme is None:
        return Path(text)
    if scheme == "file":
        return Path(_URL.match(text).group(2) or "/")
    raise StorageError(f"{text}: a URL, not a local path; this needs a local path here")


def normalize(url: str) -> str:
    """`url` with a lower-case scheme, gcs:// spelled gs://, no repeated or trailing slash (s3://b//runs/x would
    otherwise be another prefix, the key "/runs/x", behind the same working copy as s3://b/runs/x)."""
    m = _URL.match(url)
    if not m:
        return url
    scheme = m.group(1).lower()
    scheme = SCHEMES.get(scheme, (scheme,))[0] if scheme in SCHEMES else scheme
    rest = m.group(2) if scheme == "file" else re.sub("/{2,}", "/", m.group(2))
    return f"{scheme}://{rest.rstrip('/')}"


def join(location: str, *parts: str) -> str:
    """`location`/`parts` for a URL (forward slashes), os.path.join for a path."""
    if not is_url(location):
        return str(Path(location, *parts))
    return "/".join([location.rstrip("/")] + [p.strip("/") for p in parts if p])


def bucket_of(url: str) -> str:
    m = _URL.match(url)
    return (m.group(2) if m else "").split("/", 1)[0]


def _check_scheme(url: str) -> tuple[str, str, str]:
    scheme = scheme_of(url)
    if scheme not in SCHEMES:
        known = ", ".join(f"{s}://" for s in ("s3", "gs")) + " and file://"
        raise StorageError(f"{url}: unsupported URL scheme {scheme}:// (bertfactory reads and writes {known})")
    protocol, package, install = SCHEMES[scheme]
    if importlib.util.find_spec(package) is None:
        raise StorageError(f"{url}: {scheme}:// needs the package {package}, which is not installed; {install}")
    if not bucket_of(url):
        raise StorageError(f"{url}: no bucket named (expected {scheme}://BUCKET/PATH)")
    return scheme, protocol, package


def _check_credentials(url: str, protocol: str) -> None:
    if protocol == "s3":
        import botocore.session

        if botocore.session.Session().get_credentials() is None:
            raise StorageError(
                f"{url}: no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, "
                "or run on an instance role), and AWS_ENDPOINT_URL for an S3-compatible store (MinIO, R2)")
    elif protocol == "gs" and not os.environ.get("STORAGE_EMULATOR_HOST"):
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            google.auth.default()
        except DefaultCredentialsError:
            raise StorageError(
                f"{url}: no Google Cloud credentials found; run `gcloud auth application-default login`, set "
                "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run on a VM with a service "
                "account (STORAGE_EMULATOR_HOST for an emulator)") from None


def _quiet_connection_errors(loop, context: dict) -> None:
    """fsspec's I/O loop: aiohttp leaves the body-writer task of a request whose connection died unretrieved, and
    asyncio would print its traceback once per request; the request's own failure is what the user sees (one
    StorageError line), so those go to the debug log. Anything else keeps asyncio's default report."""
    exc = context.get("exception")
    if isinstance(exc, (ConnectionError, OSError)) or type(exc).__module__.startswith("aiohttp"):
        logging.getLogger(__name__).debug("storage: %s: %r", context.get("message"), exc)
        return
    loop.default_exception_handler(context)


@lru_cache(maxsize=None)
def _filesystem(protocol: str, emulator: str | None, endpoint: str | None) -> Any:
    import fsspec
    from fsspec.asyn import get_loop

    get_loop().set_exception_handler(_quiet_connection_errors)

    if protocol == "gs" and emulator:
        # the plain JSON-API client: gcsfs's default (extended) one first asks the gRPC storage-control API for the
        # bucket type, which emulators do not serve, and retries that for minutes
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(token="anon", project=os.environ.get("GOOGLE_CLOUD_PROJECT", "emulator"),
                             skip_instance_cache=True, use_listings_cache=False)
    # fsspec's own instance cache would hand back a client of an earlier endpoint: this cache is keyed by it; no
    # listings cache: another machine writes the same run location, and a stale listing would hide its objects
    return fsspec.filesystem(protocol, skip_instance_cache=True, use_listings_cache=False)


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec filesystem of `url`, the path inside it: BUCKET/KEY). One instance per scheme and endpoint
    (the variables are part of the key, so a test that moves the endpoint gets a fresh client)."""
    _, protocol, _ = _check_scheme(url)
    fs = _filesystem(protocol, os.environ.get("STORAGE_EMULATOR_HOST"), os.environ.get("AWS_ENDPOINT_URL"))
    return fs, _URL.match(url).group(2).rstrip("/")


def check_location(location: str | os.PathLike, what: str = "run directory") -> None:
    """Refuse, before any work starts, a location that cannot be used: StorageError naming the URL and what to
    install or set. Local paths pass (their own errors come from the stage that writes them)."""
    text = str(location)
    if not is_url(text):
        return
    _, protocol, _ = _check_scheme(text)
    _check_credentials(text, protocol)
    fs, path = filesystem(text)
    bucket = path.split("/", 1)[0]
    try:
        # a listing, not exists(): s3fs's exists() answers False for an endpoint it cannot reach
        fs.ls(bucket, refresh=True)
    except FileNotFoundError:
        make = f"aws s3 mb s3://{bucket}" if protocol == "s3" else f"gcloud storage buckets create gs://{bucket}"
        raise StorageError(f"{text}: the bucket {bucket} does not exist (or these credentials cannot see it); "
                           f"create it first (`{make}`) for the {what}") from None
    except Exception as err:  # noqa: BLE001 - any client failure is the same user-facing problem
        endpoint = os.environ.get("AWS_ENDPOINT_URL" if protocol == "s3" else "STORAGE_EMULATOR_HOST")
        raise StorageError(f"{text}: cannot reach the bucket {bucket}{f' at {endpoint}' if endpoint else ''} "
                           f"({_reason(err)}); check the endpoint and credentials") from None


def _reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:200]


def _transfer_error(url: str, action: str, err: BaseException) -> StorageError:
    return StorageError(f"{url}: {action} failed ({_reason(err)})")


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    try:
        return fs.exists(path)
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "checking", err) from None


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "reading", err) from None


def write_bytes(url: str, data: bytes) -> None:
    """One PUT: on object storage an object appears whole or not at all."""
    fs, path = filesystem(url)
    try:
        fs.pipe_file(path, data)
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "writing", err) from None


class PreconditionFailed(StorageError):
    """A conditional write or delete found the object other than the caller saw it: created, changed or deleted
    since (another machine's write landed in between)."""


def conditional_writes(url: str) -> bool:
    """Whether `url`'s store takes the conditional writes below: S3 (`If-None-Match: *` on create, `If-Match:
    <ETag>` on overwrite and delete; AWS since 2024, moto, MinIO). Not gs:// here: GCS's generation preconditions
    would do the same, but the emulator the tests run against does not enforce them, so that path is unused
    rather than untested."""
    return is_url(url) and _check_scheme(url)[1] == "s3"


def _is_precondition_failure(err: BaseException) -> bool:
    seen = err
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
            return True
        seen = seen.__cause__ or seen.__context__
    return "pre-conditions you specified did not hold" in str(err)


def read_versioned(url: str) -> tuple[bytes | None, str | None]:
    """(the object's bytes, its ETag) for a later conditional write (write_bytes_if, delete_if); (None, None) when
    there is none. The ETag is read first: if the object changes between the two reads, a write conditioned on it
    fails rather than overwrite what was not seen."""
    fs, path = filesystem(url)
    try:
        version = fs.info(path).get("ETag")
    except FileNotFoundError:
        return None, None
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "checking", err) from None
    try:
        return read_bytes(url), version
    except FileNotFoundError:
        return None, None


def write_bytes_if(url: str, data: bytes, version: str | None) -> str:
    """One PUT that lands only if the object is still `version` (an ETag from read_versioned or an earlier write),
    or with `version` None only if there is no object yet; PreconditionFailed otherwise. -> the new ETag.
    Only where conditional_writes(url)."""
    fs, path = filesystem(url)
    condition = {"mode": "create"} if version is None else {"IfMatch": version}
    try:
        return fs.pipe_file(path, data, **condition)["ETag"]
    except Exception as err:  # noqa: BLE001
        if _is_precondition_failure(err):
            raise PreconditionFailed(f"{url}: changed since it was read (another writer)") from None
        raise _transfer_error(url, "writing", err) from None


def delete_if(url: str, version: str) -> None:
    """Delete the object only if it is still `version` (PreconditionFailed otherwise). Only where
    conditional_writes(url)."""
    fs, path = filesystem(url)
    bucket, key = path.split("/", 1)
    try:
        fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=version)
    except FileNotFoundError:
        pass
    except Exception as err:  # noqa: BLE001
        if _is_precondition_failure(err):
            raise PreconditionFailed(f"{url}: changed since it was read (another writer)") from None
        raise _transfer_error(url, "deleting", err) from None
    fs.invalidate_cache(path)


# an upload's memory: s3fs reads a file below 2 chunks whole and sends larger ones in chunks, max_concurrency at a
# time (its defaults, 50 MiB x 10, held a 600 MB shard's upload at ~1 GB of RSS); gcsfs sends one chunk at a time
UPLOAD_CHUNK = 16 * 2**20
UPLOAD_CONCURRENCY = 4


def upload_file(local: str | os.PathLike, url: str) -> None:
    fs, path = filesystem(url)
    options = {"chunksize": UPLOAD_CHUNK}
    if "s3" in fs.protocol:  # ("s3", "s3a"); gcsfs has no such option
        options["max_concurrency"] = UPLOAD_CONCURRENCY
    try:
        fs.put_file(str(local), path, **options)
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, f"uploading {local}", err) from None


def download_file(url: str, local: str | os.PathLike, sha256: str | None = None) -> Path:
    """Download `url` to `local` through a temporary file in the same directory, renamed only when complete
    (and, with `sha256`, verified): a partial download is never seen under the final name."""
    local = Path(local)
    local.parent.mkdir(parents=True, exist_ok=True)
    fs, path = filesystem(url)
    fd, tmp = tempfile.mkstemp(prefix=f".{local.name}.", suffix=".part", dir=local.parent)
    os.fchmod(fd, default_file_mode())  # mkstemp's 0600 would keep a shared cache from the node's other users
    os.close(fd)
    try:
        try:
            fs.get_file(path, tmp)
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001
            raise _transfer_error(url, "downloading", err) from None
        if sha256 is not None:
            got = _sha256(tmp)
            if got != sha256:
                raise StorageError(f"{url}: downloaded bytes have sha256 {got}, expected {sha256} (the object "
                                   "changed or the transfer was corrupted)")
        os.replace(tmp, local)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return local


def object_version(url: str) -> str | None:
    """An identity of the object's current bytes (its ETag, generation or, failing those, size and modification
    time), or None when there is no object: what a working copy compares to know whether its copy is stale."""
    fs, path = filesystem(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "checking", err) from None
    if info.get("type") == "directory":
        return None
    for key in ("ETag", "etag", "generation", "md5Hash"):
        if info.get(key):
            return f"{key}:{str(info[key]).strip(chr(34))}"
    return f"size:{info.get('size')}:{info.get('LastModified') or info.get('updated') or info.get('mtime')}"


def list_files(url: str) -> dict[str, int]:
    """Every object under `url` (recursively): relative path -> size in bytes. Empty when there is none."""
    fs, path = filesystem(url)
    try:
        found = fs.find(path, detail=True)
    except FileNotFoundError:
        return {}
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "listing", err) from None
    prefix = path.rstrip("/") + "/"
    return {name[len(prefix):]: int(info.get("size") or 0) for name, info in found.items()
            if name.startswith(prefix) and info.get("type", "file") != "directory"}


def delete(url: str, recursive: bool = False) -> None:
    fs, path = filesystem(url)
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(url, "deleting", err) from None


def move(src: str, dst: str) -> None:
    """Move every object under `src` to the same relative path under `dst` (copy, then delete the source)."""
    fs, path = filesystem(src)
    _, target = filesystem(dst)
    try:
        for name in sorted(list_files(src)):
            fs.copy(f"{path.rstrip('/')}/{name}", f"{target.rstrip('/')}/{name}")
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
    except Exception as err:  # noqa: BLE001
        raise _transfer_error(src, "moving", err) from None
    invalidate(src)
    invalidate(dst)


def invalidate(url: str) -> None:
    """Forget cached listings under `url` (fsspec caches directory listings per instance)."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)


def _sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
