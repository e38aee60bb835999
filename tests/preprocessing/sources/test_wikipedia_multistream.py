"""preprocessing.sources.wikipedia_multistream: a multistream dump (built here from the real enwiki sample, in
Wikimedia's layout: header stream, 100-page streams, closing stream, bz2 index) read chunk by chunk gives exactly
the pages, ordinals and quarantine records of a sequential read."""

import bz2
import re

import pytest

from bertfactory.errors import InputError
from bertfactory.samples import sample_path
from preprocessing.sources.wikipedia import Page, iter_pages
from preprocessing.sources.wikipedia_multistream import index_path_for, iter_chunk_pages, plan_chunks


def write_multistream(directory, xml: str, pages_per_stream: int = 100, name: str = "enwiki-test-pages-articles-multistream"):
    """Wikimedia's layout from one XML export string; returns (dump path, index path)."""
    head_end = xml.index("</siteinfo>") + len("</siteinfo>")
    pages = re.findall(r"<page>.*?</page>", xml, flags=re.S)
    assert pages, "no pages in the XML"
    dump = directory / f"{name}.xml.bz2"
    index_lines = []
    with open(dump, "wb") as out:
        out.write(bz2.compress(xml[:head_end].encode() + b"\n"))
        for i in range(0, len(pages), pages_per_stream):
            offset = out.tell()
            group = pages[i : i + pages_per_stream]
            for page in group:
                title = re.search(r"<title>(.*?)</title>", page, flags=re.S).group(1)
                page_id = re.search(r"<id>(\d+)</id>", page)
                index_lines.append(f"{offset}:{page_id.group(1) if page_id else 0}:{title}\n")
            out.write(bz2.compress("".join("  " + p + "\n" for p in group).encode()))
        out.write(bz2.compress(b"</mediawiki>\n"))
    index = directory / f"{name}-index.txt.bz2"
    index.write_bytes(bz2.compress("".join(index_lines).encode()))
    return dump, index


@pytest.fixture(scope="module")
def enwiki_xml():
    return bz2.decompress(sample_path("enwiki").read_bytes()).decode("utf-8")


def _records(records):
    return [(type(r).__name__, r.ordinal, getattr(r, "title", None), getattr(r, "text", None), getattr(r, "reason", None))
            for r in records]


def test_chunks_give_the_sequential_read_of_the_real_sample(tmp_path, enwiki_xml):
    dump, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=7)
    assert index_path_for(dump) == index
    sequential = list(iter_pages(dump, source=3))
    assert len(sequential) == 206 and all(isinstance(r, Page) for r in sequential)
    chunks = plan_chunks(dump, index, streams_per_chunk=4)
    assert len(chunks) == -(-206 // 28) and sum(c.pages for c in chunks) == 206
    chunked = [r for c in reversed(chunks) for r in iter_chunk_pages(dump, c, source=3)]  # any order of chunks
    assert sorted(_records(chunked), key=lambda r: r[1]) == _records(sequential)
    assert {r.source for r in chunked} == {3}


def test_malformed_pages_inside_a_chunk_are_quarantined_with_file_ordinals(tmp_path, wiki):
    xml = wiki.header + "".join(wiki.standard_pages()) + "</mediawiki>"
    dump, index = write_multistream(tmp_path, xml, pages_per_stream=2)
    sequential = list(iter_pages(dump))
    chunked = [r for c in plan_chunks(dump, index, streams_per_chunk=1) for r in iter_chunk_pages(dump, c)]
    assert _records(chunked) == _records(sequential)
    assert [r.reason for r in chunked if not isinstance(r, Page)] == ["missing_id"]


def test_an_index_of_another_dump_is_refused(tmp_path, enwiki_xml):
    dump, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=50)
    lines = bz2.decompress(index.read_bytes()).decode().splitlines(keepends=True)
    shifted = [f"{int(l.split(':', 1)[0]) + 5}:{l.split(':', 1)[1]}" for l in lines]
    index.write_bytes(bz2.compress("".join(shifted).encode()))
    with pytest.raises(InputError, match="no bz2 stream starts at offset"):
        plan_chunks(dump, index)
    index.write_bytes(bz2.compress(b"not an index line\n"))
    with pytest.raises(InputError, match="line 1 is not `offset:page_id:title`"):
        plan_chunks(dump, index)


def test_a_corrupt_stream_names_the_file_and_byte(tmp_path, enwiki_xml):
    dump, index = write_multistream(tmp_path, enwiki_xml, pages_per_stream=50)
    chunks = plan_chunks(dump, index, streams_per_chunk=1)
    data = bytearray(dump.read_bytes())
    target = chunks[2]
    data[target.start + 200 : target.start + 260] = b"\x00" * 60
    dump.write_bytes(bytes(data))
    assert list(iter_chunk_pages(dump, chunks[0]))  # the other chunks still read
    with pytest.raises(InputError, match=rf"{dump.name}: corrupt bz2 stream at byte {target.start:,}"):
        list(iter_chunk_pages(dump, target))
