"""preprocessing.exchange (the files a job's workers hand each other, on a shared disk or through a bucket) and
the refusals of a bucket exchange that workers could not honour (preprocessing.pipeline.bucket_exchange). The
whole job through a bucket, on workers that share no disk, is tests/preprocessing/test_cluster_simulation.py."""

from __future__ import annotations

import pytest

from bertfactory.errors import ConfigError
from preprocessing import exchange
from preprocessing.config import RunnerConfig
from preprocessing.pipeline import bucket_exchange
from preprocessing.text_spill import SpillReader, SpillWriter
from tests.storage_servers import s3_bucket


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("exchange") as url:
        yield url


def test_a_local_location_is_written_and_read_in_place(tmp_path):
    loc = exchange.join(tmp_path, "a", "b.bin")
    exchange.writable(loc).write_bytes(b"x")
    exchange.put(loc)  # nothing to upload
    assert exchange.get(loc) == tmp_path / "a" / "b.bin" and exchange.local(loc).read_bytes() == b"x"
    assert exchange.matching(tmp_path / "a", "b") == [str(tmp_path / "a" / "b.bin")]


def test_a_url_goes_through_the_writers_scratch_and_the_readers_own(tmp_path, monkeypatch, bucket):
    writer_scratch, reader_scratch = tmp_path / "writer", tmp_path / "reader"
    monkeypatch.setenv(exchange.SCRATCH_ENV, str(writer_scratch))
    loc = exchange.join(bucket, "area", "work", "part-00001.arrow")
    path = exchange.writable(loc)
    assert path.is_relative_to(writer_scratch)
    path.write_bytes(b"payload")
    exchange.put(loc, keep=False)
    assert not path.exists()  # uploaded, and the scratch copy dropped
    monkeypatch.setenv(exchange.SCRATCH_ENV, str(reader_scratch))  # another machine
    got = exchange.get(loc)
    assert got.is_relative_to(reader_scratch) and got.read_bytes() == b"payload"
    assert exchange.matching(exchange.join(bucket, "area", "work"), "part", ".arrow") == [loc]
    exchange.pull(exchange.join(bucket, "area"), tmp_path / "driver")
    assert (tmp_path / "driver" / "work" / "part-00001.arrow").read_bytes() == b"payload"
    exchange.remove(exchange.join(bucket, "area"))
    assert exchange.listing(exchange.join(bucket, "area")) == []


def test_spilled_records_written_on_one_machine_are_read_on_another(tmp_path, monkeypatch, bucket):
    monkeypatch.setenv(exchange.SCRATCH_ENV, str(tmp_path / "one"))
    writer = SpillWriter(exchange.join(bucket, "spills"), "docs")
    refs = [writer.write(f"record {i}".encode()) for i in range(3)]
    writer.close()  # the bundle's end: uploaded before the references leave it
    monkeypatch.setenv(exchange.SCRATCH_ENV, str(tmp_path / "two"))
    reader = SpillReader()
    assert [reader.read(ref) for ref in reversed(refs)] == [b"record 2", b"record 1", b"record 0"]
    reader.close()
    assert refs[0][0].startswith(bucket)


def test_a_bucket_exchange_refuses_what_its_workers_could_not_read(tmp_path):
    bucket_runner = RunnerConfig(exchange="bucket")
    with pytest.raises(ConfigError, match="needs a run directory on object storage"):
        bucket_exchange(bucket_runner, tmp_path / "run", ["s3://b/in.txt"], None)
    working_copy = tmp_path / "wc"
    (working_copy / ".bertfactory").mkdir(parents=True)
    (working_copy / ".bertfactory" / "origin.json").write_text('{"url": "s3://b/run"}')
    with pytest.raises(ConfigError, match=r"local.txt: a local input file, but the job's workers share no disk"):
        bucket_exchange(bucket_runner, working_copy, ["s3://b/in.txt", str(tmp_path / "local.txt")], None)
    assert bucket_exchange(bucket_runner, working_copy, ["s3://b/in.txt"], None) == ("s3://b/run", ["s3://b/in.txt"])
    # auto: a cluster preset on a URL run directory goes through the bucket; the local presets never do
    assert bucket_exchange(RunnerConfig(preset="portable"), working_copy, ["s3://b/in.txt"], None)[0] == "s3://b/run"
    local = [str(tmp_path / "local.txt")]
    assert bucket_exchange(RunnerConfig(), working_copy, local, None) == (None, local)
    assert bucket_exchange(RunnerConfig(preset="portable", exchange="disk"), working_copy, ["x"], None) == (None, ["x"])


def test_an_input_in_the_working_copy_is_read_from_the_run_location(tmp_path, bucket):
    """A tapt recipe's task corpus lies in RUN's working copy and, pushed by the tapt stage, in the run location:
    the workers read it there. Not pushed (or not the same file), it is refused like any local input."""
    from bertfactory import storage

    run_url = storage.join(bucket, "wc-run")
    working_copy = tmp_path / "wc"
    (working_copy / ".bertfactory").mkdir(parents=True)
    (working_copy / ".bertfactory" / "origin.json").write_text(f'{{"url": "{run_url}"}}')
    corpus = working_copy / "tapt" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text('{"id": "a", "text": "x"}\n')
    runner = RunnerConfig(exchange="bucket")
    with pytest.raises(ConfigError, match="corpus.jsonl: a local input file"):
        bucket_exchange(runner, working_copy, [str(corpus)], None)
    storage.upload_file(corpus, storage.join(run_url, "tapt/corpus.jsonl"))
    assert bucket_exchange(runner, working_copy, [str(corpus)], None) == (run_url, [f"{run_url}/tapt/corpus.jsonl"])
    corpus.write_text('{"id": "a", "text": "changed since"}\n')
    with pytest.raises(ConfigError, match="corpus.jsonl: a local input file"):
        bucket_exchange(runner, working_copy, [str(corpus)], None)
