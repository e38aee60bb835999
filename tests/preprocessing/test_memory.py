"""preprocessing.memory.release_freed_memory: heap pages freed by Python objects go back to the OS."""

import sys

import pytest

from preprocessing.memory import _libc, release_freed_memory


def _rss_mib() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


@pytest.mark.skipif(_libc is None or not sys.platform.startswith("linux"), reason="glibc's malloc_trim only")
def test_freed_heap_goes_back_to_the_os():
    blobs = [bytes(2000) for _ in range(200_000)]  # ~400 MB of malloc'd objects (over pymalloc's 512-byte limit)
    last = blobs[-1]  # one live object at the top of the heap: without a trim the pages below it stay mapped
    grown = _rss_mib()
    del blobs
    release_freed_memory()
    assert _rss_mib() < grown - 300
    assert len(last) == 2000
