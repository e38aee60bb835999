"""bertfactory/storage.py's conditional writes against a real S3 API (moto on 127.0.0.1): a create lands only where
there is no object, an overwrite or delete only on the version the caller read; what the lease (flows/lock.py)
relies on to never overwrite another machine's lease."""

import importlib.util

import pytest

from bertfactory import storage
from tests.storage_servers import s3_bucket

pytestmark = pytest.mark.skipif(importlib.util.find_spec("moto") is None or importlib.util.find_spec("s3fs") is None,
                                reason="needs moto[server] and s3fs (test dependencies)")


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("conditional") as url:
        yield url


def test_writes_and_deletes_land_only_on_the_version_read(bucket):
    url = f"{bucket}/lease.json"
    assert storage.read_versioned(url) == (None, None)
    first = storage.write_bytes_if(url, b"a", None)
    with pytest.raises(storage.PreconditionFailed, match="lease.json: changed since it was read"):
        storage.write_bytes_if(url, b"b", None)  # created meanwhile by someone else
    assert storage.read_versioned(url) == (b"a", first)
    second = storage.write_bytes_if(url, b"c", first)
    with pytest.raises(storage.PreconditionFailed):
        storage.write_bytes_if(url, b"d", first)  # overwritten meanwhile
    with pytest.raises(storage.PreconditionFailed):
        storage.delete_if(url, first)
    assert storage.read_bytes(url) == b"c"
    storage.delete_if(url, second)
    assert storage.read_versioned(url) == (None, None)


def test_only_s3_takes_them_here():
    assert storage.conditional_writes("s3://b/x") and not storage.conditional_writes("gs://b/x")
    assert not storage.conditional_writes("/tmp/x")
