"""benchmarks/compiled_libs.py, so that its agreement columns mean what they say: the boundary positions and their
F1, the WARC record split and the three framers on the real cc_warc sample, the language-code mapping, and rensa
fed our shingle hashes. No timing is asserted: the numbers are in benchmarks/RESULTS.md."""

from __future__ import annotations

import gzip

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("compiled_libs")


def test_sentence_starts_and_boundary_f1(bench):
    paragraph = "One here.  Two there! Three."
    assert bench.starts_of(paragraph, ["One here.", "Two there!", "Three."]) == [11, 22]
    assert bench.starts_of(paragraph, [paragraph]) == []
    with pytest.raises(ValueError, match="not a slice"):
        bench.starts_of(paragraph, ["One here.", "Two where!"])
    assert bench.boundary_f1([{11, 22}], [{11, 22}]) == 1.0
    assert bench.boundary_f1([set()], [set()]) == 1.0
    # 1 hit, 2 predicted, 1 reference: 2 * 1 / 3
    assert bench.boundary_f1([{11, 22}, set()], [{11}, set()]) == pytest.approx(2 / 3)
    assert bench.boundary_f1([{5}], [{11}]) == 0.0


def test_warc_framers_agree_on_the_sample(bench, tmp_path):
    inputs = bench.warc_inputs(2, tmp_path)
    data = inputs["plain"].read_bytes()
    records = bench.raw_records(data[: len(data) // 2])
    assert len(records) == 13 and b"".join(records) == data[: len(data) // 2]
    assert gzip.decompress(inputs["gzip"].read_bytes()) == data  # one member per record, 26 of them
    ours = bench.warc_ours(inputs["gzip"])
    assert len(ours) == 26 and ours[:13] == ours[13:]
    assert bench.warc_ours(inputs["plain"]) == ours
    assert bench.warc_warcio(inputs["gzip"]) == ours
    assert bench.warc_fastwarc(inputs["gzip"]) == ours
    with pytest.raises(ValueError, match="CRLF CRLF"):
        bench.raw_records(records[0][:-2] + b"xx")
    bad = tmp_path / "bad.warc"
    bad.write_bytes(data.replace(b"Content-Length: ", b"Content-Length: 1", 1))
    report = bench.warc_ours_report(bad)
    assert report.startswith("25 records, quarantined: ['bad_length: Content-Length") and report.count("bad_length") == 1


def test_language_codes_and_candidates(bench):
    assert [bench._code(c) for c in ("un", "und", "unknown", None, "", "iw", "zh-Hant", "ENG")] == \
        ["und", "und", "und", "und", "und", "he", "zh", "en"]
    detect = bench.lid_resiliparse()  # Resiliparse is a dependency: this row always runs
    assert detect(["Tous les êtres humains naissent libres et égaux en dignité et en droits."]) == ["fr"]


def test_rensa_on_our_shingle_hashes(bench):
    pytest.importorskip("rensa", reason="benchmark-only candidate (pip install rensa==0.5.0)")
    from preprocessing.minhash import shingle_hashes

    tokens = "the quick brown fox jumps over the lazy dog again and again".split()
    sets = [shingle_hashes(tokens, 5), shingle_hashes(tokens[:-1], 5), shingle_hashes(tokens, 5)]
    matrix = bench.rensa_signatures(sets, 128, 7)
    assert matrix.shape == (3, 128) and matrix.dtype == np.uint32
    assert (matrix[0] == matrix[2]).all() and not (matrix[0] == matrix[1]).all()
    assert (bench.rensa_signatures(sets[:1], 128, 7)[0] == matrix[0]).all()  # a row does not depend on the others
