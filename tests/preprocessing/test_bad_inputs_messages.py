"""Readers say what is wrong with a bad input in the user's terms (issue 23, item 6): a WARC whose version line ends
CR CR LF is read (warcio reads it too), a damaged bz2 block is a corrupt bz2 stream at an offset of the file (not
"broken XML"), a dump cut short is a truncated bz2 file, and each of these file-level breaks is a CorruptInput
(what the pipeline quarantines) carrying its reason, the pages read and the byte offset."""

from __future__ import annotations

import io
import pickle

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from bertfactory.samples import sample_path
from preprocessing.records import Document
from preprocessing.sources.corrupt import CorruptInput
from preprocessing.sources.warc import iter_records, validate_file
from preprocessing.sources.wikipedia import iter_pages, validate_dump

PAGE = ("<html><head><title>Quay</title></head><body><article>"
        + "".join(f"<p>The quay of the old harbour was repaired in month {n}, and the boats came back with the "
                  f"tide while a crowd watched from the stone wall.</p>" for n in range(6))
        + "</article></body></html>").encode()


def _warc_bytes() -> bytes:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False)
    for i in range(2):
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8")], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(f"https://quay.example/{i}", "response",
                                                      payload=io.BytesIO(PAGE), http_headers=http))
    return out.getvalue()


def test_a_warc_version_line_ending_cr_cr_lf_is_read(tmp_path):
    path = tmp_path / "crcr.warc"
    path.write_bytes(_warc_bytes().replace(b"WARC/1.0\r\n", b"WARC/1.0\r\r\n"))
    with open(path, "rb") as f:  # what users compare against: warcio reads both records
        assert [r.rec_type for r in ArchiveIterator(f)] == ["response", "response"]
    validate_file(path)
    records = list(iter_records(path, 0, min_chars=50))
    assert [type(r) for r in records] == [Document, Document]
    assert [r.key for r in records] == ["https://quay.example/0", "https://quay.example/1"]


def test_a_warc_written_with_lf_line_ends_is_read(tmp_path):
    # WARC header lines ending LF were read, but the LF LF after each block was "not followed by CRLF CRLF": every
    # record of such a file was quarantined as bad_length (warcio reads them all)
    data, records, at = _warc_bytes(), [], 0
    while at < len(data):
        end = data.index(b"\r\n\r\n", at)
        header = data[at:end]
        length = int(header.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        records.append(header.replace(b"\r\n", b"\n") + b"\n\n" + data[end + 4:end + 4 + length] + b"\n\n")
        at = end + 4 + length + 4
    path = tmp_path / "lf.warc"
    path.write_bytes(b"".join(records))
    with open(path, "rb") as f:
        assert [r.rec_type for r in ArchiveIterator(f)] == ["response", "response"]
    records = list(iter_records(path, 0, min_chars=50))
    assert [type(r) for r in records] == [Document, Document]
    assert [r.key for r in records] == ["https://quay.example/0", "https://quay.example/1"]


def test_a_flipped_byte_in_a_bz2_dump_is_a_corrupt_bz2_stream_not_broken_xml(tmp_path):
    data = bytearray(sample_path("enwiki").read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit: the block decompresses to garbage before its CRC check fails
    path = tmp_path / "flipped.xml.bz2"
    path.write_bytes(bytes(data))
    validate_dump(path)  # the head is fine: only reading finds the damage
    read = []
    with pytest.raises(CorruptInput) as err:
        read.extend(iter_pages(path))
    message = str(err.value)
    assert message.startswith(f"{path}: corrupt bz2 data after ") and "broken XML" not in message
    assert err.value.reason == "corrupt_bz2" and err.value.records_read == len(read) > 0
    assert len(data) // 2 < err.value.offset <= len(data) and f"{err.value.offset:,}" in message


def test_a_bz2_dump_cut_in_half_is_a_truncated_file(tmp_path):
    data = sample_path("enwiki").read_bytes()
    path = tmp_path / "half.xml.bz2"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptInput) as err:
        list(iter_pages(path))
    assert str(err.value).startswith(f"{path}: truncated bz2 data: the file ends ({len(data) // 2:,} bytes)")
    assert err.value.reason == "truncated_bz2" and err.value.offset == len(data) // 2


def test_a_truncated_warc_gz_is_a_corrupt_input_with_its_position(tmp_path):
    whole = tmp_path / "whole.warc.gz"
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for i in range(30):
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        writer.write_record(writer.create_warc_record(f"https://quay.example/{i}", "response",
                                                      payload=io.BytesIO(PAGE + str(i).encode()), http_headers=http))
    whole.write_bytes(out.getvalue())
    cut = tmp_path / "cut.warc.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 2 // 3])
    read = []
    with pytest.raises(CorruptInput) as err:
        read.extend(iter_records(cut, 0, min_chars=50))
    # records_read counts the cut record too when its headers were read before the break
    assert err.value.reason == "truncated_gzip" and len(read) <= err.value.records_read <= len(read) + 1
    assert 0 < err.value.offset <= cut.stat().st_size
    assert f"after {err.value.records_read} WARC records (at byte {err.value.offset:,} of the file)" in str(err.value)
    copy = pickle.loads(pickle.dumps(err.value))  # crosses process boundaries with its fields
    assert (str(copy), copy.reason, copy.offset) == (str(err.value), "truncated_gzip", err.value.offset)
    fields = err.value.to_quarantine(source=4)
    assert fields["source"] == 4 and fields["file"] == str(cut) and fields["reason"] == "truncated_gzip"
    assert fields["ordinal"] == err.value.records_read and not fields["detail"].startswith(str(cut))
