"""Line-oriented inputs (text, JSONL, TSV, Moses files): open a local path or an fsspec URL as one decompressed byte
stream and read it line by line with a bound on how much of one line is ever held in memory.

    with open_input("gs://bucket/corpus.jsonl.zst", "corpus.jsonl.zst") as stream:
        for line in LineReader(stream, "corpus.jsonl.zst", max_line_bytes=4 << 20):
            line.number, line.offset, line.data   # data None = the line was longer than max_line_bytes

Paths: local files and fsspec URLs (`file://`, `memory://`, `https://`, `gs://`, `s3://` — remote filesystems need
their fsspec backend installed). Compression follows the extension: `.gz`, `.bz2`, `.xz`, `.zst`. File-level
problems raise `InputError` naming the file: missing, 0 bytes, empty after decompression, compressed data under a
name that says otherwise, corrupt or truncated compression (with how many lines were read: a `CorruptInput`, which
the pipeline quarantines, sources.corrupt), a UTF-16/UTF-32
byte-order mark (these readers split lines on the byte 0x0A, which UTF-16 text does not have on its own), and an
archive of files (tar, also inside gzip & co., zip, 7z: its headers would be read as text), and lines ending
with CR alone (no LF in the first 512 bytes, two CRs or more: the file would be one line).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bertfactory.errors import InputError

from . import remote
from .corrupt import CorruptInput

_COMPRESSION_BY_SUFFIX = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd",
                          ".zstd": "zstd"}
_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00", "zstd": b"\x28\xb5\x2f\xfd"}
# UTF-32 first: its little-endian BOM starts with UTF-16's
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32-LE"), (b"\x00\x00\xfe\xff", "UTF-32-BE"), (b"\xff\xfe", "UTF-16-LE"),
              (b"\xfe\xff", "UTF-16-BE"))
_SKIP_CHUNK = 1 << 20
_HEAD_BYTES = 512  # of the decompressed file: its BOM, an archive's header


def _decompression_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, lzma.LZMAError)
    try:
        import zstandard

        errors += (zstandard.ZstdError,)
    except ImportError:  # .zst inputs are refused in open_input with the fix
        pass
    return errors


DECOMPRESSION_ERRORS = _decompression_errors()


def compression_of(path: str | Path) -> str | None:
    """'gzip' / 'bz2' / 'xz' / 'zstd' from the file name's last suffix, None for an uncompressed name."""
    name = str(path).rsplit("/", 1)[-1].lower()
    dot = name.rfind(".")
    return _COMPRESSION_BY_SUFFIX.get(name[dot:]) if dot >= 0 else None


def compression_by_signature(head: bytes) -> str | None:
    """'gzip' / 'bz2' / 'xz' / 'zstd' when `head`, a file's first bytes, starts with that compression's signature."""
    return next((kind for kind, signature in _MAGIC.items() if head.startswith(signature)), None)


def strip_compression_suffix(path: str | Path) -> str:
    """The file name without a compression suffix: 'a.en-fr.tsv.gz' -> 'a.en-fr.tsv'."""
    name = str(path).rsplit("/", 1)[-1]
    return name[: name.rfind(".")] if compression_of(name) else name


def _filesystem(path: str | Path):
    import fsspec

    try:
        return fsspec.core.url_to_fs(str(path))
    except (ImportError, ValueError) as e:  # unknown protocol, or its backend (gcsfs, s3fs, ...) not installed
        raise InputError(f"{path}: cannot open this URL with fsspec ({type(e).__name__}: {e})") from None


def _decompressed(raw: BinaryIO, compression: str | None, name: str) -> BinaryIO:
    if compression is None:
        return raw
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "bz2":
        return bz2.BZ2File(raw, "rb")
    if compression == "xz":
        return lzma.LZMAFile(raw, "rb")
    try:
        import zstandard
    except ImportError:
        raise InputError(f"{name}: .zst input needs the `zstandard` package (pip install zstandard)") from None
    # BufferedReader adds readline() and its bounded readline(limit)
    return io.BufferedReader(_ZstdFrames(raw, zstandard.ZstdDecompressor()))


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a stream of zstd frames, one after another, and an EOFError when the stream ends
    inside a frame, as gzip, bz2 and lzma raise on a truncated file: zstandard's stream_reader ends there without a
    word, so a cut .zst was read as a whole file shorter than it is. The compressed bytes go in _FEED at a time,
    which bounds what one call gives out (a zstd block gives at most 128 KiB and takes at least 4 bytes: 16 MiB)."""

    _FEED = 512

    def __init__(self, raw: BinaryIO, decompressor):
        self.raw, self.decompressor = raw, decompressor
        self.frame = None  # the decompressobj of the frame being read; None between frames
        self.unused = b""  # compressed bytes read past the end of the last frame: the next frame's
        self.out, self.at = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self.at == len(self.out):
            data = self.unused or self.raw.read(self._FEED)
            self.unused = b""
            if not data:
                if self.frame is not None:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached "
                                   "(the file ends inside a zstd frame)")
                return 0
            self.frame = self.frame or self.decompressor.decompressobj()
            self.out, self.at = self.frame.decompress(data), 0
            if self.frame.eof:
                self.unused, self.frame = self.frame.unused_data, None
        n = min(len(buffer), len(self.out) - self.at)
        buffer[:n] = self.out[self.at:self.at + n]
        self.at += n
        return n


@contextmanager
def open_input(path: str | Path, name: str | None = None) -> Iterator[BinaryIO]:
    """The decompressed bytes of `path` (local path or fsspec URL), after the file-level checks above."""
    name = name or str(path)
    fs, fs_path = _filesystem(path)
    if not fs.isfile(fs_path):
        raise InputError(f"{name}: no such file")
    if fs.size(fs_path) == 0:
        raise InputError(f"{name}: empty file (0 bytes)")
    compression = compression_of(fs_path)
    with fs.open(fs_path, "rb") as opened:
        # a URL's store failing mid-read (a connection reset) is one line naming it, as for the other readers, not
        # an OSError taken for corrupt compression; buffered: an object store's file has no bounded readline(limit)
        raw = io.BufferedReader(remote.guarded(opened, name)) if remote.is_url(str(path)) else opened
        head = raw.read(_HEAD_BYTES)
        raw.seek(0)
        magic = head[:6]
        if compression is None:
            if (kind := compression_by_signature(magic)) is not None:
                raise InputError(f"{name}: the file is {kind}-compressed but its name has no compression "
                                 f"suffix; rename it (e.g. to {name}.{'gz' if kind == 'gzip' else kind})")
        elif not magic.startswith(_MAGIC[compression]):
            raise InputError(f"{name}: the name says {compression} but the file does not start with a {compression} "
                             f"signature (it starts with {magic!r}); corrupt, or misnamed")
        stream = _decompressed(raw, compression, name)
        if compression is not None:
            try:
                # gzip/bz2/xz/Buffered readers all peek: one buffer of the decompressed start, not the file
                head = stream.peek(_HEAD_BYTES)
            except DECOMPRESSION_ERRORS as e:
                raise InputError(f"{name}: corrupt {compression} data at the start of the file "
                                 f"({type(e).__name__}: {e})") from None
            if not head:
                raise InputError(f"{name}: empty after {compression} decompression (0 bytes of text)")
        for bom, encoding in _WIDE_BOMS:
            if head.startswith(bom):
                raise InputError(f"{name}: the file is {encoding} encoded (byte-order mark {bom.hex(' ').upper()}); "
                                 f"convert it to UTF-8 first, e.g. iconv -f {encoding} -t UTF-8")
        if b"\n" not in head and head.count(b"\r") >= 2:
            raise InputError(f"{name}: its lines end with CR alone (old Mac line ends), and lines are split at LF: "
                             f"the file would be one line; convert it first, e.g. tr '\\r' '\\n' < IN > OUT")
        if (archive := _archive_kind(head)) is not None:
            raise InputError(f"{name}: the file is a {archive} archive (files packed into one), not a text file; "
                             f"extract it and give the extracted files, or their folder, as the input")
        yield stream


def _archive_kind(head: bytes) -> str | None:
    """'tar' / 'zip' / '7z' when `head` starts an archive of files (tar: "ustar" at byte 257 of its first header)."""
    if head[257:262] == b"ustar":
        return "tar"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    return "7z" if head.startswith(b"7z\xbc\xaf\x27\x1c") else None


@dataclass(frozen=True)
class Line:
    number: int  # 1-based line number in the (decompressed) file
    offset: int  # byte offset of the line's first byte in the decompressed file
    data: bytes | None  # without the line break; None = longer than max_line_bytes (skipped unread)
    length: int  # bytes in the line without its break (counted even when skipped)


class LineReader:
    """Iterates over the `Line`s of a byte stream, holding at most `max_line_bytes` + 1 bytes of one line.

    A longer line is consumed in 1 MiB chunks and given as `data=None`, so a 10 MB line costs 1 MiB of memory.
    `\\r\\n` endings are accepted; a UTF-8 byte-order mark on the first line is removed."""

    def __init__(self, stream: BinaryIO, name: str, max_line_bytes: int, what: str = "lines"):
        self.stream, self.name, self.max_line_bytes, self.what = stream, name, max_line_bytes, what
        self.lines_read = 0

    def _readline(self, limit: int) -> bytes:
        try:
            return self.stream.readline(limit)
        except DECOMPRESSION_ERRORS as e:
            raise CorruptInput(f"{self.name}: corrupt or truncated compressed data after {self.lines_read} "
                               f"{self.what} ({type(e).__name__}: {e})",
                               reason="corrupt_compression", file=self.name, records_read=self.lines_read,
                               offset=None) from None

    def __iter__(self) -> Iterator[Line]:
        offset = 0
        while True:
            raw = self._readline(self.max_line_bytes + 2)  # +2: room for "\r\n" after a line of exactly the limit
            if not raw:
                return
            self.lines_read += 1
            start, consumed = offset, len(raw)
            if not raw.endswith(b"\n") and len(raw) == self.max_line_bytes + 2:
                while True:  # too long: skip the rest of the line without keeping it
                    rest = self._readline(_SKIP_CHUNK)
                    consumed += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                offset += consumed
                yield Line(self.lines_read, start, None, consumed - _break_length(rest if rest else raw))
                continue
            offset += consumed
            body = raw[: len(raw) - _break_length(raw)]
            if self.lines_read == 1 and body.startswith(b"\xef\xbb\xbf"):
                body = body[3:]
            if len(body) > self.max_line_bytes:
                yield Line(self.lines_read, start, None, len(body))
            else:
                yield Line(self.lines_read, start, body, len(body))


def _break_length(raw: bytes) -> int:
    if raw.endswith(b"\r\n"):
        return 2
    return 1 if raw.endswith(b"\n") else 0


__all__ = ["open_input", "LineReader", "Line", "compression_of", "compression_by_signature", "strip_compression_suffix",
           "DECOMPRESSION_ERRORS"]
