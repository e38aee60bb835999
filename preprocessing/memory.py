"""Give a long-lived Beam worker's freed memory back to the operating system between stages.

A local runner's SDK worker lives for the whole job and runs every stage in turn. What one stage frees stays in
the process: Python's allocator keeps an arena while any object in it lives, and glibc keeps freed heap pages
unless told otherwise, so the worker's RSS ratchets up stage by stage and grows with the corpus even where each
stage holds a bounded amount (measured on 10x sotu: a worker at 674 MiB between stages dropped to 426 MiB after a
collection and malloc_trim). The heavy DoFns call release_freed_memory() when a bundle starts; it does its work
only once the process has grown by RELEASE_AFTER_GROWTH_MIB since the last release (or since this module was
imported): a full collection takes ~0.1 CPU-s in a process holding Beam, which a small job run in the driver
(runners.runner_for_input) paid at every bundle for nothing to give back.

    python -c "from preprocessing.memory import release_freed_memory; release_freed_memory()"
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os

_libc = None
_name = ctypes.util.find_library("c")
if _name:
    try:
        _libc = ctypes.CDLL(_name)
        _libc.malloc_trim  # glibc only (not musl or macOS)
    except (OSError, AttributeError):
        _libc = None


RELEASE_AFTER_GROWTH_MIB = 32
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int | None:
    """This process's resident set size (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return None


_rss_after_release = _rss_bytes()


def release_freed_memory() -> None:
    """Collect garbage, then return free heap pages to the OS (glibc's malloc_trim; a no-op elsewhere), if the
    process grew by RELEASE_AFTER_GROWTH_MIB since the last release (always where its size cannot be read)."""
    global _rss_after_release
    rss = _rss_bytes()
    if rss is not None and _rss_after_release is not None:
        if rss - _rss_after_release < RELEASE_AFTER_GROWTH_MIB * 2**20:
            return
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)
    _rss_after_release = _rss_bytes()
