"""preprocessing.sources.wikipedia: streaming pages, quarantining malformed ones, clear errors for bad files."""

import bz2
import gzip
import lzma

import pytest
import zstandard

from bertfactory.errors import InputError
from preprocessing.sources.wikipedia import Page, Quarantined, iter_pages, validate_dump


def test_iter_pages_reads_every_page_and_quarantines_malformed(tmp_path, wiki):
    path = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    records = list(iter_pages(path, source=0))
    assert len(records) == wiki.expected["docs_read"]
    pages = [r for r in records if isinstance(r, Page)]
    bad = [r for r in records if isinstance(r, Quarantined)]
    assert [b.reason for b in bad] == ["missing_id"]
    assert bad[0].file == str(path) and bad[0].record_id == "title='No id'"
    assert sum(p.redirect for p in pages) == 3
    assert {p.namespace for p in pages} == {0, 1}
    assert [p.ordinal for p in records if isinstance(p, Page)] == sorted(p.ordinal for p in pages)
    first = pages[0]
    assert first.title == "Article 0" and first.page_id == 100 and "{{Infobox" in first.text


def test_a_redirect_without_text_is_a_redirect_and_an_article_without_text_is_quarantined(tmp_path, wiki):
    # a redirect page whose <revision> has no <text> was quarantined as missing_text, though preprocess drops every
    # redirect whatever its body; an article without text still is
    body = ("<page><title>A</title><ns>0</ns><id>1</id><redirect title='B'/><revision><id>5</id></revision></page>"
            "<page><title>C</title><ns>0</ns><id>2</id><revision><id>6</id></revision></page>")
    path = tmp_path / "d.xml"
    path.write_text(wiki.header + body + "</mediawiki>", encoding="utf-8")
    redirect, article = list(iter_pages(path))
    assert isinstance(redirect, Page) and redirect.redirect and redirect.text == ""
    assert isinstance(article, Quarantined) and article.reason == "missing_text"


def test_plain_xml_is_read_too(tmp_path, wiki):
    path = wiki.write_dump(tmp_path / "d.xml", wiki.standard_pages(), compress=False)
    validate_dump(path)
    assert len(list(iter_pages(path))) == wiki.expected["docs_read"]


def test_corrupt_bz2_in_the_middle_names_file_and_progress(tmp_path, wiki):
    pages = [wiki.page_xml(f"P{i}", wiki.article_text(__import__("random").Random(i)) * 20, page_id=i) for i in range(60)]
    data = bytearray(bz2.compress((wiki.header + "".join(pages) + "</mediawiki>").encode()))
    middle = len(data) * 2 // 3
    data[middle : middle + 64] = b"\x00" * 64
    path = tmp_path / "corrupt.xml.bz2"
    path.write_bytes(bytes(data))
    validate_dump(path)  # the head is fine: only reading finds the damage
    with pytest.raises(InputError) as err:
        list(iter_pages(path))
    message = str(err.value)
    assert str(path) in message and "corrupt bz2" in message and "pages read" in message and "compressed bytes" in message


@pytest.mark.parametrize(
    "content, compress, expect",
    [
        (b"just some words\nin a text file\n", False, "not MediaWiki XML"),
        (b"<!DOCTYPE html><html><body><p>hi</p></body></html>", False, "<html>, not <mediawiki>"),
        (b"<html><body><p>unclosed<br></body></html>", False, "<html>, not <mediawiki>"),
        (b"\xef\xbb\xbfid,text\n1,<b>hello</b>\n", False, "not MediaWiki XML"),
        (b"<html><body><p>hi</p></body></html>", True, "<html>, not <mediawiki>"),
        (b"", False, "empty"),
        (b"BZh91AY&SY garbage that is not bz2", False, "not a readable bz2"),
    ],
)
def test_validate_dump_rejects_non_mediawiki(tmp_path, content, compress, expect):
    path = tmp_path / "input.bin"
    path.write_bytes(bz2.compress(content) if compress and content else content)
    with pytest.raises(InputError) as err:
        validate_dump(path)
    assert str(path) in str(err.value) and expect in str(err.value)


def test_truncated_xml_is_an_input_error(tmp_path, wiki):
    text = wiki.header + "".join(wiki.standard_pages()[:3]) + "  <page><title>Cut"
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(bz2.compress(text.encode()))
    with pytest.raises(InputError) as err:
        list(iter_pages(path))
    assert str(path) in str(err.value) and "after 3 pages" in str(err.value)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_dump_reads_the_same_pages_as_utf8(tmp_path, wiki, encoding):
    """XML names its own encoding (BOM or the byte pattern of `<`): expat reads UTF-16 dumps, with or without a
    BOM, into exactly the pages of the UTF-8 file."""
    xml = wiki.header + "".join(wiki.standard_pages()) + "</mediawiki>\n"
    utf8 = tmp_path / "utf8.xml"
    utf8.write_bytes(xml.encode("utf-8"))
    utf16 = tmp_path / f"{encoding}.xml.bz2"
    utf16.write_bytes(bz2.compress(xml.encode(encoding)))
    validate_dump(utf16)
    assert [(type(r), r.ordinal, getattr(r, "text", None)) for r in iter_pages(utf16)] == \
        [(type(r), r.ordinal, getattr(r, "text", None)) for r in iter_pages(utf8)]


@pytest.mark.parametrize("suffix, compress, kind", [
    (".gz", gzip.compress, "gzip"), (".xz", lzma.compress, "xz"),
    (".zst", lambda data: zstandard.ZstdCompressor().compress(data), "zstd"),
])
def test_a_dump_in_another_compression_is_named_as_such(tmp_path, wiki, suffix, compress, kind):
    # it was "this file is not MediaWiki XML (not well-formed (invalid token): line 1, column 0; it starts with
    # '\x1f\ufffd\x08...')", the compressed bytes shown as text
    data = (wiki.header + "".join(wiki.standard_pages()) + "</mediawiki>\n").encode()
    path = tmp_path / f"enwiki-pages-articles.xml{suffix}"
    path.write_bytes(compress(data))
    with pytest.raises(InputError, match=rf"pages-articles\.xml\{suffix}: the file is {kind}-compressed; a MediaWiki "
                                         rf"XML export is read plain or bz2-compressed: decompress it first"):
        validate_dump(path)


def test_a_page_with_its_history_is_read_at_its_last_revision(tmp_path, wiki):
    # an export with history (Special:Export, pages-meta-history) lists the revisions oldest first, and the page
    # was read at its first revision: the text of years ago, without a word
    page = wiki.page_xml("Harbour", "The newest text of the page.", page_id=5).replace(
        "<revision>", "<revision><id>1</id><text>The first draft.</text></revision>\n    "
                      "<revision><id>2</id><text>A later text.</text></revision>\n    <revision>", 1)
    path = wiki.write_dump(tmp_path / "history.xml", [page], compress=False)
    [record] = iter_pages(path)
    assert isinstance(record, Page) and record.text == "The newest text of the page."
