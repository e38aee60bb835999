"""One corrupt input file does not sink the job (issue 23, item 2): through the CLI, a truncated .warc.gz among
good ones, and a Wikipedia dump cut in half plus one with a flipped byte, are quarantined whole (reason, records
read before the break, byte offset) while the rest is processed; past corpus.max_bad_inputs (default 1 % of the
files: none of three) the job fails naming the first bad file. The records read before a break are kept and
counted."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from bertfactory.samples import sample_dir, sample_path
from preprocessing.bad_inputs import allowed_bad_inputs

ROOT = Path(__file__).resolve().parents[2]
BERTFACTORY = Path(sys.executable).with_name("bertfactory")


def _preprocess(inputs: list[Path], fmt: str, run_dir: Path, *sets: str) -> subprocess.CompletedProcess:
    overrides = [arg for value in sets for arg in ("--set", value)]
    return subprocess.run([str(BERTFACTORY), "preprocess", "--input", *map(str, inputs), "--format", fmt,
                           "--vocab-size", "500", "--out", str(run_dir), "--no-prefect", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def _news_warcs(directory: Path) -> list[Path]:
    """The 23 newspaper4k pages as WARC responses in three .warc.gz files (8, 8, 7 pages; a gzip member per
    record, as Common Crawl writes them); the third cut at 60 % of its bytes, as a broken download is."""
    sample_path("newspaper4k", "txt/cnn_001.txt")  # raises SampleMissingError with the fetch command
    pages = sorted((sample_dir("newspaper4k") / "html").glob("*.html"))
    files = []
    for part in range(3):
        out = io.BytesIO()
        writer = WARCWriter(out, gzip=True)
        for page in pages[part::3]:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(f"https://news.example/{page.stem}", "response",
                                                          payload=io.BytesIO(page.read_bytes()), http_headers=http))
        path = directory / f"news-{part}.warc.gz"
        path.write_bytes(out.getvalue())
        files.append(path)
    whole = files[2].read_bytes()
    files[2].write_bytes(whole[: len(whole) * 6 // 10])
    return files


def test_max_bad_inputs_is_a_count_or_a_fraction_of_the_files():
    assert allowed_bad_inputs(0.01, 3) == 0 and allowed_bad_inputs(0.01, 5000) == 50
    assert allowed_bad_inputs(0.5, 3) == 1 and allowed_bad_inputs(2, 3) == 2 and allowed_bad_inputs(0, 100) == 0


def test_a_truncated_warc_gz_is_quarantined_and_the_rest_processed(tmp_path):
    warcs = _news_warcs(tmp_path)

    refused = _preprocess(warcs, "warc", tmp_path / "strict")  # default max_bad_inputs: 1 % of 3 files = none
    output = refused.stdout + refused.stderr
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert refused.returncode == 2 and errors, output[-3000:]
    assert errors[0].startswith(f"error: {warcs[2]}: corrupt or truncated gzip after ")
    assert "1 of 3 input files are corrupt or truncated, more than corpus.max_bad_inputs=0.01 allows (0)" in output
    assert "Traceback" not in output and not (tmp_path / "strict" / "shards").exists()

    done = _preprocess(warcs, "warc", tmp_path / "run", "corpus.max_bad_inputs=1")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    shards = tmp_path / "run" / "shards"
    counts = json.loads((shards / "manifest.json").read_text())["counts"]
    (bad,) = counts["bad_inputs"]
    assert bad["file"] == str(warcs[2]) and bad["reason"] == "truncated_gzip" and bad["ordinal"] >= 1
    assert "at byte" in bad["detail"] and f"after {bad['ordinal']} WARC records" in bad["detail"]
    assert counts["quarantined"]["truncated_gzip"] == 1
    quarantine = [json.loads(line) for line in (shards / "quarantine.jsonl").read_text().splitlines()]
    assert [q for q in quarantine if q["record_id"] == "<file>"] == [{**bad, "source": 2, "record_id": "<file>"}]
    sources = counts["sources"]
    assert [s["docs_read"] for s in sources[:2]] == [8, 8]  # the good files whole
    # the broken file's records before the break are read, counted and kept unless a rule dropped them; its
    # unreadable rest counts as one record read and quarantined
    before_break = sources[2]["docs_read"] - 1
    assert bad["ordinal"] - 1 <= before_break <= bad["ordinal"] and before_break >= 1
    assert sources[2]["docs_kept"] >= 1 and sources[2]["quarantined"] == {"truncated_gzip": 1}
    assert counts["docs_read"] == sum(s["docs_read"] for s in sources)
    for source in sources:
        assert source["docs_read"] == (source["docs_kept"] + sum(source["docs_dropped"].values())
                                       + sum(source["quarantined"].values())
                                       + sum(source["duplicates_removed"].values())), source


def test_a_cut_and_a_damaged_bz2_dump_are_quarantined_with_their_offsets(tmp_path, wiki):
    enwiki = sample_path("enwiki").read_bytes()
    half = tmp_path / "enwiki-half.xml.bz2"
    half.write_bytes(enwiki[: len(enwiki) // 2])
    flipped = bytearray(enwiki)
    flipped[len(enwiki) * 3 // 4] ^= 0x10
    damaged = tmp_path / "enwiki-flipped.xml.bz2"
    damaged.write_bytes(bytes(flipped))
    good = wiki.write_dump(tmp_path / "good-pages-articles.xml.bz2", wiki.standard_pages())

    done = _preprocess([good, half, damaged], "wikipedia", tmp_path / "run", "corpus.max_bad_inputs=2")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "broken XML" not in output
    counts = json.loads((tmp_path / "run" / "shards" / "manifest.json").read_text())["counts"]
    by_file = {entry["file"]: entry for entry in counts["bad_inputs"]}
    assert set(by_file) == {str(half), str(damaged)}
    assert by_file[str(half)]["reason"] == "truncated_bz2"
    assert f"the file ends ({len(enwiki) // 2:,} bytes)" in by_file[str(half)]["detail"]
    assert by_file[str(damaged)]["reason"] == "corrupt_bz2" and "damaged bz2 block" in by_file[str(damaged)]["detail"]
    assert counts["quarantined"]["truncated_bz2"] == 1 and counts["quarantined"]["corrupt_bz2"] == 1
    sources = counts["sources"]
    # pages before the break: read and counted; the unreadable rest: one record read and quarantined
    assert sources[1]["docs_read"] == by_file[str(half)]["ordinal"] + 1 > 1
    assert sources[2]["docs_read"] == by_file[str(damaged)]["ordinal"] + 1 > sources[1]["docs_read"]
    assert sources[1]["docs_kept"] > 0
