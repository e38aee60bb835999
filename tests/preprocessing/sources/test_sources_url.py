"""Every corpus.format reads URLs: the real samples uploaded to a bucket of a real S3 API server on 127.0.0.1 (moto)
give the records of the same local files (wikipedia plain and bz2, multistream chunks, warc plain and gzip,
parallel TSV / Moses / .po / UDHR), a multistream chunk of a URL dump is one ranged GET of its own bytes (planning
reads no more than the index, 3 bytes per sampled offset and the last page stream), bad input on a URL is the
local file's one line naming the URL, and `bertfactory preprocess` of a dump in the bucket into the bucket, the
workers exchanging through it, writes the shards of the local run byte for byte."""

from __future__ import annotations

import bz2
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from bertfactory import storage
from bertfactory.errors import InputError
from bertfactory.samples import sample_path
from preprocessing.config import CorpusConfig
from preprocessing.sources import read_records, validate_file, work_items
from preprocessing.sources.parallel import iter_records as parallel_records
from preprocessing.sources.warc import iter_records as warc_records
from preprocessing.sources.warc import validate_file as validate_warc
from preprocessing.sources.wikipedia import Page, iter_pages, validate_dump
from preprocessing.sources.wikipedia_multistream import (Chunk, index_path_for, iter_chunk_pages, plan_chunks,
                                                         stream_offsets)
from tests.preprocessing.sources.test_wikipedia_multistream import write_multistream
from tests.storage_servers import s3_bucket

_names = iter(range(10**6))


@pytest.fixture(scope="module")
def bucket():
    with s3_bucket("corpora") as url:
        yield url


def upload(bucket: str, path: Path, folder: str | None = None) -> str:
    """`path` put in the bucket under a folder of its own (or `folder`), keeping its name: its URL."""
    url = storage.join(bucket, folder or f"in-{next(_names)}", path.name)
    storage.upload_file(path, url)
    return url


@pytest.fixture(scope="module")
def enwiki_xml() -> str:
    return bz2.decompress(sample_path("enwiki").read_bytes()).decode("utf-8")


def _error(call) -> str:
    with pytest.raises(InputError) as info:
        call()
    return str(info.value)


def _same_line(local_call, url_call, local: Path | str, url: str) -> str:
    """The URL's error is the local file's line with the URL for the path; returns it."""
    local_line, url_line = _error(local_call), _error(url_call)
    assert "\n" not in url_line and url in url_line, url_line
    assert url_line == local_line.replace(str(local), url)
    return url_line


# ------------------------------------------------------------------------------------------------------ wikipedia


@pytest.mark.parametrize("compressed", [True, False], ids=["bz2", "plain"])
def test_a_dump_in_a_bucket_gives_the_local_records(bucket, tmp_path, enwiki_xml, compressed):
    if compressed:
        local = Path(shutil.copy(sample_path("enwiki"), tmp_path / "enwiki-pages-articles.xml.bz2"))
    else:
        local = tmp_path / "enwiki-pages-articles.xml"
        local.write_text(enwiki_xml, encoding="utf-8")
    url = upload(bucket, local)
    validate_dump(url)
    from_url = list(iter_pages(url, source=2, display_name=local.name))
    assert len(from_url) == 206 and all(isinstance(r, Page) for r in from_url)
    assert from_url == list(iter_pages(local, source=2, display_name=local.name))
    corpus = CorpusConfig(inputs=[url], format="wikipedia")
    validate_file(corpus, url)  # no longer refused
    assert work_items(corpus, url, 2) == [(2, url, None)]
    assert [r.ordinal for r in read_records(corpus, url, 2)] == list(range(206))


class _Spy:
    """What the bucket's filesystem is asked for: ranged reads (path, start, end, bytes returned), opened streams,
    whole-object downloads."""

    def __init__(self, fs, monkeypatch):
        self.ranges: list[tuple[str, int | None, int | None, int]] = []
        self.opened: list[str] = []
        self.downloads: list[str] = []
        cat_file, fs_open = fs.cat_file, fs.open

        def spy_cat_file(path, start=None, end=None, **kw):
            data = cat_file(path, start=start, end=end, **kw)
            self.ranges.append((path, start, end, len(data)))
            return data

        def spy_open(path, *args, **kw):
            self.opened.append(path)
            return fs_open(path, *args, **kw)

        monkeypatch.setattr(fs, "cat_file", spy_cat_file)
        monkeypatch.setattr(fs, "open", spy_open)
        for name in ("get_file", "get", "cat", "download"):
            monkeypatch.setattr(fs, name, lambda path, *a, _n=name, **k: self.downloads.append(path))

    def clear(self) -> None:
        for seen in (self.ranges, self.opened, self.downloads):
            seen.clear()

    def fetched(self, path: str) -> int:
        return sum(n for p, _s, _e, n in self.ranges if p == path)


def test_multistream_chunks_of_a_dump_in_a_bucket_are_ranged_reads(bucket, tmp_path, enwiki_xml, monkeypatch):
    dump, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=7)
    folder = f"ms-{next(_names)}"
    url, index_url = upload(bucket, dump, folder), upload(bucket, index, folder)
    assert index_path_for(url) == index_url
    assert index_path_for(storage.join(bucket, "nowhere", dump.name)) is None
    assert stream_offsets(index_url) == stream_offsets(index)

    fs, dump_key = storage.filesystem(url)
    spy = _Spy(fs, monkeypatch)
    planned = plan_chunks(url, index_url, streams_per_chunk=4)
    assert planned == plan_chunks(dump, index, streams_per_chunk=4)
    assert len(planned) == -(-206 // 28) and sum(c.pages for c in planned) == 206
    # planning never streamed or downloaded the dump: small range reads only (3 bytes per sampled offset, then the
    # last page stream, from its offset to the end of the file at most)
    size = dump.stat().st_size
    assert dump_key not in spy.opened and not spy.downloads
    assert spy.fetched(dump_key) <= 3 * len(stream_offsets(index)) + (size - planned[-1].start)
    assert spy.fetched(dump_key) < size / 10

    corpus = CorpusConfig(inputs=[url], format="wikipedia", multistream_chunk_streams=4)
    assert work_items(corpus, url, 1) == [(1, url, c.to_json()) for c in planned]
    sequential = list(iter_pages(dump, source=1, display_name=dump.name))
    chunked = []
    for chunk in planned:
        spy.clear()
        chunked += list(iter_chunk_pages(url, chunk, source=1, display_name=dump.name))
        # the chunk's bytes, in one ranged GET: nothing before it, nothing after it
        assert spy.ranges == [(dump_key, chunk.start, chunk.end, chunk.end - chunk.start)]
        assert not spy.opened and not spy.downloads
    assert chunked == sequential
    via_items = [r for _s, _p, c in work_items(corpus, url, 1) for r in read_records(corpus, url, 1, c, dump.name)]
    assert [r.ordinal for r in via_items] == list(range(206)) and via_items == sequential


def test_bad_wikipedia_input_on_a_url_is_the_local_files_line(bucket, tmp_path, enwiki_xml):
    missing_local = tmp_path / "nothing.xml.bz2"
    _same_line(lambda: validate_dump(missing_local), lambda: validate_dump(f"{bucket}/absent/nothing.xml.bz2"),
               missing_local, f"{bucket}/absent/nothing.xml.bz2")

    empty = tmp_path / "empty.xml.bz2"
    empty.write_bytes(b"")
    url = upload(bucket, empty)
    assert "the file is empty" in _same_line(lambda: validate_dump(empty), lambda: validate_dump(url), empty, url)

    garbage = tmp_path / "garbage.xml.bz2"
    garbage.write_bytes(b"BZh9" + bytes(range(256)) * 8)
    url = upload(bucket, garbage)
    assert "not a readable bz2 file" in _same_line(lambda: validate_dump(garbage), lambda: validate_dump(url),
                                                   garbage, url)

    data = sample_path("enwiki").read_bytes()
    truncated = tmp_path / "truncated.xml.bz2"
    truncated.write_bytes(data[: len(data) // 2])
    url = upload(bucket, truncated)
    line = _same_line(lambda: list(iter_pages(truncated)), lambda: list(iter_pages(url)), truncated, url)
    assert "truncated bz2 data" in line

    damaged = tmp_path / "damaged.xml.bz2"
    broken = bytearray(data)
    broken[len(data) // 3: len(data) // 3 + 64] = b"\x00" * 64
    damaged.write_bytes(bytes(broken))
    url = upload(bucket, damaged)
    line = _same_line(lambda: list(iter_pages(damaged)), lambda: list(iter_pages(url)), damaged, url)
    assert "corrupt bz2 data after" in line

    # a multistream index of another dump, a broken index line, a damaged stream inside a chunk
    dump, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=50)
    lines = bz2.decompress(index.read_bytes()).decode().splitlines(keepends=True)
    index.write_bytes(bz2.compress("".join(f"{int(ln.split(':', 1)[0]) + 5}:{ln.split(':', 1)[1]}"
                                           for ln in lines).encode()))
    folder = f"ms-{next(_names)}"
    url, index_url = upload(bucket, dump, folder), upload(bucket, index, folder)
    line = _error(lambda: plan_chunks(url, index_url))
    assert line == _error(lambda: plan_chunks(dump, index)).replace(str(dump), url).replace(str(index), index_url)
    assert line.startswith(f"{url}: no bz2 stream starts at offset") and index_url in line
    index.write_bytes(bz2.compress(b"not an index line\n"))
    index_url = upload(bucket, index, folder)
    assert _error(lambda: plan_chunks(url, index_url)) == f"{index_url}: line 1 is not `offset:page_id:title` " \
                                                          "('not an index line\\n')"

    (tmp_path / "damaged").mkdir()
    dump, index = write_multistream(tmp_path / "damaged", enwiki_xml, pages_per_stream=50)
    chunk = plan_chunks(dump, index, streams_per_chunk=1)[2]
    data = bytearray(dump.read_bytes())
    data[chunk.start + 200: chunk.start + 260] = b"\x00" * 60
    dump.write_bytes(bytes(data))
    url = upload(bucket, dump)
    line = _same_line(lambda: list(iter_chunk_pages(dump, chunk)), lambda: list(iter_chunk_pages(url, chunk)),
                      dump, url)
    assert line.startswith(f"{url}: corrupt bz2 stream at byte {chunk.start:,}")
    assert _error(lambda: list(iter_chunk_pages(f"{bucket}/absent/{dump.name}", Chunk(0, 10, 0, 1)))) == \
        f"{bucket}/absent/{dump.name}: input file not found"


# ----------------------------------------------------------------------------------------------------------- warc


@pytest.mark.parametrize("compressed", [False, True], ids=["warc", "warc.gz"])
def test_a_warc_in_a_bucket_gives_the_local_records(bucket, tmp_path, compressed):
    sample = sample_path("cc_warc")
    if compressed:
        local = tmp_path / f"{sample.name}.gz"
        local.write_bytes(gzip.compress(sample.read_bytes()))
    else:
        local = Path(shutil.copy(sample, tmp_path / sample.name))
    url = upload(bucket, local)
    validate_warc(url)
    from_url = list(warc_records(url, 5, display_name=local.name, min_chars=0))
    assert from_url == list(warc_records(local, 5, display_name=local.name, min_chars=0))
    assert [r.ordinal for r in from_url if type(r).__name__ == "Document"] == [5, 8, 11] and len(from_url) == 13
    corpus = CorpusConfig(inputs=[url], format="warc")
    validate_file(corpus, url)
    assert [r.ordinal for r in read_records(corpus, url, 5)] == list(range(13))


def test_bad_warc_input_on_a_url_is_the_local_files_line(bucket, tmp_path):
    missing = tmp_path / "none.warc.gz"
    _same_line(lambda: validate_warc(missing), lambda: validate_warc(f"{bucket}/absent/none.warc.gz"), missing,
               f"{bucket}/absent/none.warc.gz")
    empty = tmp_path / "empty.warc"
    empty.write_bytes(b"")
    url = upload(bucket, empty)
    assert "empty file, not a WARC" in _same_line(lambda: validate_warc(empty), lambda: validate_warc(url), empty, url)
    html = tmp_path / "page.warc"
    html.write_bytes(b"<html><body>not a crawl</body></html>\n")
    url = upload(bucket, html)
    assert "not a WARC file" in _same_line(lambda: validate_warc(html), lambda: validate_warc(url), html, url)
    truncated = tmp_path / "cut.warc.gz"
    packed = gzip.compress(sample_path("cc_warc").read_bytes())
    truncated.write_bytes(packed[: len(packed) * 2 // 3])
    url = upload(bucket, truncated)
    line = _same_line(lambda: list(warc_records(truncated, 0)), lambda: list(warc_records(url, 0)), truncated, url)
    assert "corrupt or truncated gzip after" in line


# ------------------------------------------------------------------------------------------------------- parallel


def _parallel_pairs(bucket: str, tmp_path: Path) -> list[tuple[Path, str]]:
    """(local file, its URL) for each parallel layout, from the real samples: a .po catalogue, a UDHR declaration
    (its English pivot beside it), a TSV and a Moses pair made of the catalogue's pairs."""
    po = Path(shutil.copy(sample_path("django_po", "locale/de/LC_MESSAGES/django.po"), tmp_path / "django.po"))
    pairs = [r for r in parallel_records(po, 0) if type(r).__name__ == "SentencePair"
             and not any(c in r.src_text + r.tgt_text for c in "\n\t")]
    tsv = tmp_path / "django.en-de.tsv.gz"
    tsv.write_bytes(gzip.compress("".join(f"{p.src_text}\t{p.tgt_text}\n" for p in pairs).encode()))
    en, de = tmp_path / "django.de-en.en", tmp_path / "django.de-en.de"
    en.write_text("".join(p.src_text + "\n" for p in pairs), encoding="utf-8")
    de.write_text("".join(p.tgt_text + "\n" for p in pairs), encoding="utf-8")
    udhr = tmp_path / "udhr"
    udhr.mkdir()
    fra = Path(shutil.copy(sample_path("udhr", "fra.html"), udhr / "fra.html"))
    shutil.copy(sample_path("udhr", "eng.html"), udhr / "eng.html")
    folder = f"parallel-{next(_names)}"
    for f in (po, tsv, en, de):
        upload(bucket, f, folder)
    upload(bucket, udhr / "eng.html", f"{folder}/udhr")
    upload(bucket, fra, f"{folder}/udhr")
    return [(po, storage.join(bucket, folder, po.name)), (tsv, storage.join(bucket, folder, tsv.name)),
            (de, storage.join(bucket, folder, de.name)), (fra, storage.join(bucket, folder, "udhr", fra.name))]


def test_parallel_files_in_a_bucket_give_the_local_pairs_and_ids(bucket, tmp_path):
    from preprocessing.documents import document_id

    for local, url in _parallel_pairs(bucket, tmp_path):
        corpus = CorpusConfig(inputs=[url], format="parallel")
        validate_file(corpus, url)  # no longer refused
        from_url = list(read_records(corpus, url, 3, display_name=local.name))
        from_local = list(read_records(corpus, str(local), 3, display_name=local.name))
        assert len(from_url) > 25 and from_url == from_local, local.name
        assert [r.ordinal for r in from_url] == list(range(len(from_url)))
        # document ids hash the file's base name: a URL of the same name gives the same ids
        pairs = [r for r in from_url if type(r).__name__ == "SentencePair"]
        others = ["a.tsv", "b.tsv", "c.tsv"]  # sources 0..2: the pairs are source 3
        assert [document_id(corpus, p, others + [url]) for p in pairs] == \
            [document_id(corpus, p, others + [str(local)]) for p in pairs]


def test_bad_parallel_input_on_a_url_names_it(bucket, tmp_path):
    corpus = CorpusConfig(inputs=["x"], format="parallel")
    url = storage.join(bucket, "absent", "news.en-fr.tsv")
    assert _error(lambda: validate_file(corpus, url)) == f"{url}: no such file"
    lonely = tmp_path / "orphan.fr-it.fr"
    lonely.write_text("Bonjour\n", encoding="utf-8")
    url = upload(bucket, lonely)
    other = url[: -len(".fr")] + ".it"
    assert _error(lambda: validate_file(corpus, url)) == f"{other}: no such file"


# ------------------------------------------------------------------------------------------- the whole stage, CLI


@pytest.mark.parametrize("layout", ["bz2", "multistream"])
def test_preprocess_a_dump_in_a_bucket_into_the_bucket_matches_the_local_run(bucket, tmp_path, enwiki_xml, layout):
    """multistream: the driver plans the chunks from the bucket (corpus.multistream_chunk_streams 1: 5 chunks of
    50 pages), the workers read each as a ranged GET."""
    from tests.preprocessing.test_cluster_simulation import SMALL, _bf, _env, _manifest_without_runner, _sets

    if layout == "bz2":
        local = Path(shutil.copy(sample_path("enwiki"), tmp_path / "enwiki-pages-articles.xml.bz2"))
        url = upload(bucket, local)
        small = SMALL
    else:
        local, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=50)
        folder = f"ms-{next(_names)}"
        url = upload(bucket, local, folder)
        upload(bucket, index, folder)
        small = SMALL + ["corpus.multistream_chunk_streams=1"]
    server_env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    reference = _bf("preprocess", "--input", str(local), "--format", "wikipedia", "--out", str(tmp_path / "local"),
                    "--no-prefect", *_sets(small), env=_env(tmp_path / "reference"), cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-4000:]
    run_url = storage.join(bucket, f"run-{next(_names)}")
    driver = tmp_path / "driver"
    run = _bf("preprocess", "--input", url, "--format", "wikipedia", "--out", run_url, "--no-prefect", *_sets(small),
              "--set", "preprocess.runner.exchange=bucket", env={**_env(driver), **server_env}, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-5000:]
    assert f"exchange their files through {run_url}/.preprocess-staging/" in run.stderr
    remote = {name: storage.read_bytes(storage.join(run_url, name)) for name in storage.list_files(run_url)}
    produced = {p.relative_to(tmp_path / "local").as_posix(): p.read_bytes()
                for p in (tmp_path / "local").rglob("*") if p.is_file() and ".bertfactory" not in p.parts}
    shards = sorted(name for name in produced if name.endswith(".arrow"))
    assert shards and {name for name in remote if name.endswith(".arrow")} == set(shards)
    assert all(remote[name] == produced[name] for name in shards)
    assert remote["tokenizer/tokenizer.json"] == produced["tokenizer/tokenizer.json"]
    manifest_url, manifest_local = (json.loads(m) for m in (remote["shards/manifest.json"],
                                                            produced["shards/manifest.json"]))
    assert manifest_url["sources"][0]["path"] == url and manifest_local["sources"][0]["path"] == str(local)
    assert _manifest_without_runner(remote["shards/manifest.json"]) == \
        _manifest_without_runner(produced["shards/manifest.json"])


def test_a_glob_in_a_bucket_gives_the_files_a_local_glob_gives(bucket, tmp_path):
    """`s3://b/dir/*` and `s3://b/dir/**` list no folder and no hidden name (.git/, .DS_Store), as the local glob and
    the listing of `s3://b/dir/` do (before: s3fs's glob gave `…/.git` and `…/sub`, and the job stopped on
    `s3://…/.git: no such file`)."""
    from preprocessing.inputs import expand_inputs

    folder = f"glob-{next(_names)}"
    for name in ("a.txt", ".DS_Store", ".git/config", "sub/b.txt", "sub/.hidden.txt"):
        storage.write_bytes(storage.join(bucket, folder, name), name.encode())
    for pattern, want in [("*", ["a.txt"]), ("**", ["a.txt", "sub/b.txt"]), ("", ["a.txt", "sub/b.txt"])]:
        corpus = CorpusConfig(inputs=[f"{storage.join(bucket, folder)}/{pattern}"], format="text")
        assert [f.location for f in expand_inputs(corpus)] == [storage.join(bucket, folder, w) for w in want], pattern
