"""WARC reader: real news pages wrapped into WARC response records (against their gold texts), the real Common Crawl
segment (exact counts), and every kind of bad input (each its own WARC, written by the test)."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from bertfactory.errors import InputError
from bertfactory.samples import sample_dir, sample_path
from preprocessing.records import Document, Dropped, Quarantined
from preprocessing.sources.warc import WarcOptions, iter_records, normalise_lang, validate_file

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from extraction import token_f1  # noqa: E402  — the benchmark's metric, so the threshold means the same

ARTICLE = ("<html lang='en-GB'><head><meta charset='utf-8'><title>Harbour reopens</title>"
           "<meta property='article:published_time' content='2024-03-05T08:00:00Z'></head><body><nav>Home | News</nav>"
           "<article><h1>Harbour reopens</h1>"
           + "".join(f"<p>The old harbour of the town reopened on Tuesday after {n} months of repairs to the stone "
                     f"quay, and the first fishing boats came in with the morning tide, watched by a crowd.</p>"
                     for n in range(2, 8))
           + "</article><footer>Contact us</footer></body></html>")


def write_warc(path: Path, records: list[tuple[str, str, bytes, list[tuple[str, str]] | None, str]],
               gzip_records: bool = False) -> Path:
    """records: (record type, url, payload, HTTP headers or None, HTTP status line)."""
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=gzip_records)
        for rec_type, url, payload, http_headers, status in records:
            http = StatusAndHeaders(status, http_headers, protocol="HTTP/1.1") if http_headers is not None else None
            writer.write_record(writer.create_warc_record(url, rec_type, payload=io.BytesIO(payload),
                                                          http_headers=http))
    return path


def html_response(url: str, body: bytes, content_type: str = "text/html; charset=utf-8", status: str = "200 OK"):
    return ("response", url, body, [("Content-Type", content_type)], status)


def by_kind(records) -> Counter:
    return Counter(type(r).__name__ + ("" if isinstance(r, Document) else ":" + r.reason) for r in records)


# ---------------------------------------------------------------------------------------------- real news pages


@pytest.fixture(scope="module")
def news_pages(tmp_path_factory):
    """The newspaper4k pages with gold texts, each a WARC response (HTTP Content-Type without a charset, so the
    charset comes from the page's meta tag or detection, as for many real responses)."""
    root = sample_dir("newspaper4k")
    sample_path("newspaper4k", "txt/cnn_001.txt")  # raises SampleMissingError with the fetch command
    names = sorted(p.stem for p in (root / "txt").glob("*.txt") if (root / "html" / f"{p.stem}.html").is_file())
    metadata = {n: json.loads((root / "metadata" / f"{n}.json").read_text("utf-8"))
                for n in names if (root / "metadata" / f"{n}.json").is_file()}
    urls = [metadata.get(n, {}).get("url") or f"https://news.example/{n}" for n in names]
    path = write_warc(tmp_path_factory.mktemp("news") / "news.warc.gz",
                      [html_response(u, (root / "html" / f"{n}.html").read_bytes(), "text/html")
                       for n, u in zip(names, urls)], gzip_records=True)
    docs = list(iter_records(path, source=3))
    gold = {n: (root / "txt" / f"{n}.txt").read_text("utf-8") for n in names}
    return names, urls, metadata, gold, docs


def test_news_pages_match_gold_texts(news_pages):
    names, urls, _, gold, docs = news_pages
    assert len(names) == 23 and all(isinstance(d, Document) for d in docs), by_kind(docs)
    scores = {n: token_f1("\n".join(d.paragraphs), gold[n]) for n, d in zip(names, docs)}
    # measured with the default extractor (trafilatura_precision): min 0.822 (article_with_divs), mean 0.966
    assert min(scores.values()) >= 0.80, sorted(scores.items(), key=lambda kv: kv[1])[:3]
    assert sum(scores.values()) / len(scores) >= 0.95
    assert [d.key for d in docs] == urls and [d.ordinal for d in docs] == list(range(23))
    assert {d.source for d in docs} == {3}
    assert all(len(d.paragraphs) > 1 and all(p == p.strip() and p for p in d.paragraphs) for d in docs)


def test_news_pages_metadata(news_pages):
    names, urls, metadata, _, docs = news_pages
    for name, url, doc in zip(names, urls, docs):
        assert doc.meta["url"] == url and doc.meta["domain"] == re.match(r"https?://([^/]+)", url).group(1)
        assert doc.meta["title"] and doc.meta["warc_record_id"].startswith("urn:uuid:")
        declared = metadata.get(name, {}).get("meta_lang")
        if declared:  # newspaper4k read the same <html lang>
            assert doc.lang == declared, name
    assert [d.lang for n, d in zip(names, docs) if n in ("burmese_article", "latvian_article", "chinese_article")] \
        == ["my", "zh", "lv"]  # sorted page names: burmese, chinese, latvian
    # the page's publish date wherever the page states one, else the WARC-Date of the record
    with_gold_date = [(n, d) for n, d in zip(names, docs) if metadata.get(n, {}).get("publish_date")]
    page_dated = [(n, d) for n, d in with_gold_date if d.meta["date"][:10] != docs[0].meta["date"][:10]
                  or d.meta["date"][:10] == metadata[n]["publish_date"][:10]]
    same_day = [n for n, d in page_dated if d.meta["date"][:10] == metadata[n]["publish_date"][:10]]
    assert len(with_gold_date) == 16 and len(same_day) == 12, same_day
    assert len(page_dated) == len(same_day)  # no page-derived date contradicts newspaper4k's


def test_resiliparse_is_selectable_and_differs(news_pages, tmp_path):
    names, _, _, gold, trafilatura_docs = news_pages
    root = sample_dir("newspaper4k")
    path = write_warc(tmp_path / "cnn.warc", [html_response("https://www.cnn.com/x", (root / "html/cnn_article.html")
                                                            .read_bytes())])
    [doc] = iter_records(path, 0, extractor="resiliparse")
    assert token_f1("\n".join(doc.paragraphs), gold["cnn_article"]) >= 0.8
    assert doc.paragraphs != trafilatura_docs[names.index("cnn_article")].paragraphs


# --------------------------------------------------------------------------------------------- real Common Crawl


def test_real_common_crawl_segment():
    path = sample_path("cc_warc")
    records = list(iter_records(path, source=0))
    # 2014 crawl: photo-gallery pages and a wiki "what links here" list — none has 200 chars of main text
    assert by_kind(records) == {"Dropped:not_response": 9, "Dropped:not_html": 1, "Dropped:too_short": 3}
    assert [r.ordinal for r in records] == list(range(13))
    assert list(iter_records(path, source=0)) == records  # deterministic
    docs = [r for r in iter_records(path, source=0, min_chars=0) if isinstance(r, Document)]
    assert [d.meta["domain"] for d in docs] == ["0pointer.de", "0pointer.de", "0x20.be"]
    assert [d.ordinal for d in docs] == [5, 8, 11]
    assert docs[2].lang == "en" and docs[2].meta["date"] == "2014-08-21T04:31:23Z"
    assert docs[2].meta["title"].startswith('Pages that link to "Thread:Talk:Gentse feesten/foo"')
    assert docs[2].meta["warc_record_id"] == "urn:uuid:a448a920-781f-4f53-a5c6-ca9f215239c4"
    assert docs[2].key == "http://0x20.be/Special:WhatLinksHere/Thread:Talk:Gentse_feesten/foo"
    # trafilatura's defaults keep the wiki page's link list (956 chars), so it passes min_chars
    assert by_kind(iter_records(path, 0, extractor="trafilatura"))["Document"] == 3


def test_status_and_type_drops(tmp_path):
    path = write_warc(tmp_path / "mixed.warc", [
        ("request", "https://a.example/", b"", [("Host", "a.example")], "GET / HTTP/1.1"),
        html_response("https://a.example/missing", ARTICLE.encode(), status="404 Not Found"),
        html_response("https://a.example/feed.json", b'{"items": []}', "application/json"),
        html_response("https://a.example/empty", b"<html><body><p>Menu</p></body></html>"),
        html_response("https://a.example/story", ARTICLE.encode()),
    ])
    records = list(iter_records(path, source=1))
    assert [(type(r).__name__, getattr(r, "reason", None)) for r in records] == [
        ("Dropped", "not_response"), ("Dropped", "http_status"), ("Dropped", "not_html"), ("Dropped", "too_short"),
        ("Document", None)]
    doc = records[-1]
    assert doc.lang == "en" and doc.meta["date"] == "2024-03-05T08:00:00+00:00" and doc.meta["title"] == \
        "Harbour reopens"
    assert not any("Contact us" in p or "Home | News" in p for p in doc.paragraphs)
    assert len(list(iter_records(path, source=1, min_chars=0))) == 5


# -------------------------------------------------------------------------------------------------- bad input


def test_bad_content_length_is_quarantined_and_reading_resumes(tmp_path):
    good = write_warc(tmp_path / "good.warc", [html_response(f"https://b.example/{i}", ARTICLE.encode())
                                               for i in range(3)]).read_bytes()
    lengths = list(re.finditer(rb"\r\nContent-Length: (\d+)\r\n", good))
    first = lengths[0]  # the WARC header's Content-Length of record 0 (the HTTP one comes later, inside the block)
    for delta, expected_detail in ((-30, "not followed by CRLF CRLF"), (+60, "into the next record")):
        bad = good[:first.start(1)] + str(int(first.group(1)) + delta).encode() + good[first.end(1):]
        path = tmp_path / f"bad{delta}.warc"
        path.write_bytes(bad)
        records = list(iter_records(path, source=0))
        assert isinstance(records[0], Quarantined) and records[0].reason == "bad_length", records[0]
        assert expected_detail in records[0].detail and records[0].file == str(path)
        assert [type(r).__name__ for r in records[1:]] == ["Document", "Document"]
        assert [r.key for r in records[1:]] == ["https://b.example/1", "https://b.example/2"]
    not_a_number = good[:first.start(1)] + b"12x" + good[first.end(1):]
    (tmp_path / "nan.warc").write_bytes(not_a_number)
    assert by_kind(iter_records(tmp_path / "nan.warc", 0)) == {"Quarantined:bad_length": 1, "Document": 2}
    last = lengths[-1]
    too_long_at_end = good[:last.start(1)] + str(int(last.group(1)) + 500).encode() + good[last.end(1):]
    (tmp_path / "end.warc").write_bytes(too_long_at_end)
    records = list(iter_records(tmp_path / "end.warc", 0))
    assert by_kind(records) == {"Document": 2, "Quarantined:bad_length": 1} and "file ends" in records[-1].detail


def test_binary_payload_declared_html(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    path = write_warc(tmp_path / "bin.warc", [html_response("https://c.example/logo", png),
                                              html_response("https://c.example/pic.png", png, "image/png")])
    first, second = iter_records(path, 0)
    assert isinstance(first, Quarantined) and first.reason == "binary_payload" and first.record_id
    assert isinstance(second, Dropped) and second.reason == "not_html"


def test_invalid_utf8_bytes(tmp_path):
    broken = ARTICLE.encode().replace(b"harbour of", b"harbour \xff\xfe\xc3 of")
    path = write_warc(tmp_path / "enc.warc", [
        html_response("https://d.example/declared", broken),  # HTTP charset utf-8: trusted, so quarantined
        html_response("https://d.example/latin1", ARTICLE.replace("utf-8", "latin-1").encode()
                      .replace(b"harbour of", "harbour \u00e9 of".encode("latin-1")), "text/html"),
    ])
    first, second = iter_records(path, 0)
    assert isinstance(first, Quarantined) and first.reason == "undecodable" and "utf-8" in first.detail
    assert isinstance(second, Document) and "harbour \u00e9 of" in " ".join(second.paragraphs)


def test_truncated_gzip_names_file_and_progress(tmp_path):
    path = write_warc(tmp_path / "t.warc.gz", [html_response(f"https://e.example/{i}", ARTICLE.encode())
                                               for i in range(4)], gzip_records=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 200])
    with pytest.raises(InputError, match=r"t\.warc\.gz: corrupt or truncated gzip after 4 WARC records"):
        list(iter_records(path, 0))
    # whole-file gzip (not per record) reads the same
    whole = tmp_path / "whole.warc.gz"
    whole.write_bytes(gzip.compress(write_warc(tmp_path / "w.warc", [html_response("https://e.example/w",
                                                                                   ARTICLE.encode())]).read_bytes()))
    assert by_kind(iter_records(whole, 0)) == {"Document": 1}


def test_empty_file(tmp_path):
    (tmp_path / "empty.warc").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.warc: empty file"):
        validate_file(tmp_path / "empty.warc")
    with pytest.raises(InputError, match="empty file"):
        list(iter_records(tmp_path / "empty.warc", 0))


def test_not_a_warc(tmp_path):
    (tmp_path / "page.warc").write_text("<html><body>hello</body></html>\n")
    with pytest.raises(InputError, match=r"page\.warc: not a WARC file: first line is"):
        list(iter_records(tmp_path / "page.warc", 0))
    (tmp_path / "x.warc.gz").write_bytes(gzip.compress(b"id,text\n1,hello\n"))
    with pytest.raises(InputError, match="not a WARC file"):
        validate_file(tmp_path / "x.warc.gz")
    # a WARC whose later bytes are garbage: names how many records were read
    good = write_warc(tmp_path / "g.warc", [html_response("https://f.example/", ARTICLE.encode())]).read_bytes()
    # another compression than gzip is named (it was "not a WARC file: first line is b'BZh91AY&SY...'")
    (tmp_path / "g.warc.bz2").write_bytes(bz2.compress(good))
    with pytest.raises(InputError, match=r"g\.warc\.bz2: the file is bz2-compressed; a WARC file is read plain or "
                                         r"gzip-compressed \(\.warc, \.warc\.gz\)"):
        list(iter_records(tmp_path / "g.warc.bz2", 0))
    (tmp_path / "tail.warc").write_bytes(good + b"garbage that is no record\r\n")
    with pytest.raises(InputError, match="after 1 records"):
        list(iter_records(tmp_path / "tail.warc", 0))


def test_options_and_lang_normalisation():
    assert WarcOptions().extractor == "trafilatura_precision"
    with pytest.raises(ValueError):
        WarcOptions(extractor="newspaper")
    with pytest.raises(ValueError):
        WarcOptions(min_chars=-1)
    assert [normalise_lang(v) for v in ("en-US", "zh_Hans", "ENG", "de, en", "", None, "x-klingon", "12")] == \
        ["en", "zh", "eng", "de", None, None, None, None]


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_content_length_past_the_end_of_the_file_loses_no_record_after_it(tmp_path, gzipped):
    # a record whose Content-Length runs past the end of the file swallowed every record after it without a word
    # (one bad_length counted, the rest of the file gone): also past max_record_bytes, skipped as record_too_large
    good = write_warc(tmp_path / "good.warc", [html_response(f"https://b.example/{i}", ARTICLE.encode())
                                               for i in range(3)]).read_bytes()
    first = next(re.finditer(rb"\r\nContent-Length: (\d+)\r\n", good))
    for length in (int(first.group(1)) + 100_000, 10 ** 9):
        bad = good[:first.start(1)] + str(length).encode() + good[first.end(1):]
        path = tmp_path / ("past.warc.gz" if gzipped else "past.warc")
        path.write_bytes(gzip.compress(bad) if gzipped else bad)
        records = list(iter_records(path, 0, max_record_bytes=1 << 20))
        assert by_kind(records) == {"Quarantined:bad_length": 1, "Document": 2}, records
        assert [r.key for r in records[1:]] == ["https://b.example/1", "https://b.example/2"]
        assert re.fullmatch(rf"Content-Length {length} runs into the next record and \d+ bytes past the end of "
                            rf"the file", records[0].detail)


def test_a_page_without_a_target_uri_is_quarantined(tmp_path):
    # the URI is a WARC document's identity: pages without one were Documents keyed "", and the pipeline
    # quarantined all but the first as duplicate_key of each other
    good = write_warc(tmp_path / "good.warc", [html_response(f"https://g.example/{i}", ARTICLE.encode())
                                               for i in range(3)]).read_bytes()
    path = tmp_path / "nouri.warc"
    path.write_bytes(re.sub(rb"WARC-Target-URI: https://g\.example/[01]\r\n", b"", good))
    records = list(iter_records(path, 0))
    assert by_kind(records) == {"Quarantined:missing_uri": 2, "Document": 1}
    assert records[0].detail == "an HTML response without a WARC-Target-URI" and records[0].record_id
    assert records[2].key == "https://g.example/2"


def test_a_payload_stored_with_its_content_encoding(tmp_path):
    # a deflate (zlib) payload, as a crawler that keeps what the server sent stores it, was quarantined as
    # binary_payload ("declared text/html but the payload starts with b'x\x9c...'"), and so was a zstd / br one
    import zlib

    import zstandard

    page = ARTICLE.encode()
    path = write_warc(tmp_path / "encoded.warc", [
        ("response", "https://h.example/plain", page, [("Content-Type", "text/html; charset=utf-8")], "200 OK"),
        ("response", "https://h.example/deflate", zlib.compress(page),
         [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "deflate")], "200 OK"),
        ("response", "https://h.example/zstd", zstandard.ZstdCompressor().compress(page),
         [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "zstd")], "200 OK"),
    ])
    plain, deflate, zstd = iter_records(path, 0)
    assert isinstance(deflate, Document) and deflate.paragraphs == plain.paragraphs
    assert isinstance(zstd, Quarantined) and zstd.reason == "bad_content_encoding"
    assert zstd.detail == "Content-Encoding zstd: the payload is stored encoded, and this reader decodes only gzip " \
                          "and deflate"
