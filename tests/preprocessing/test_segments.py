"""preprocessing.segments: packed text (RoBERTa full-/doc-sentences), SpanBERT single segments, causal segments
and XLM translation pairs — by hand on tiny documents, and no token lost or reordered on random ones."""

import random

import pytest

from preprocessing.segments import Row, build_rows, pack, pack_sentences, rows_to_block, tlm_pair, unpack_sentences

CLS, SEP = 2, 3


def test_pack_by_hand():
    docs = [(2, [[8, 9, 10]], 1), (1, [[5, 6], [7]], 0)]  # any order: packed in doc_id order
    assert pack(docs, 4, True, SEP) == [(1, 0, [5, 6, 7]), (2, 1, [8, 9, 10])]  # no room for the boundary [SEP]
    assert pack([(1, [[5]], 0), (2, [[8]], 0)], 4, True, SEP) == [(1, 0, [5, SEP, 8])]
    assert pack([(1, [[5]], 0), (2, [[8]], 0)], 4, False, SEP) == [(1, 0, [5]), (2, 0, [8])]
    # a sentence longer than a row is cut into row-sized pieces
    assert pack([(1, [[5, 6, 7, 8, 9]], 0)], 2, False, SEP) == [(1, 0, [5, 6]), (1, 0, [7, 8]), (1, 0, [9])]


def _random_docs(rng, n=30):
    return [(rng.getrandbits(63), [[rng.randrange(10, 99) for _ in range(rng.randint(1, 20))]
                                   for _ in range(rng.randint(1, 8))], rng.randrange(3)) for _ in range(n)]


@pytest.mark.parametrize("fmt", ["full-sentences", "doc-sentences", "single-segment", "clm"])
def test_no_token_lost_or_reordered(fmt):
    rng = random.Random(fmt)
    docs = _random_docs(rng)
    rows = build_rows(fmt, docs, 16, CLS, SEP)
    stream = [t for _d, sentences, _l in sorted(docs) for s in sentences for t in s]
    specials = fmt != "clm"
    body = [t for r in rows for t in (r.input_ids[1:-1] if specials else r.input_ids) if t != SEP]
    assert body == stream
    assert all(len(r.input_ids) <= 16 and r.len_a == len(r.input_ids) for r in rows)
    if specials:
        assert all(r.input_ids[0] == CLS and r.input_ids[-1] == SEP for r in rows)
    by_doc = {}
    for r in rows:
        by_doc.setdefault(r.doc_id, []).append(r)
    assert all([r.index for r in rs] == list(range(len(rs))) for rs in by_doc.values())
    langs = {d: l for d, _s, l in docs}
    assert all(r.lang_a == r.lang_b == langs[r.doc_id] for r in rows)
    if fmt == "clm":  # fixed-length segments, numbered within the document
        assert all(r.segment_index == r.index for r in rows)
        assert all(len(r.input_ids) == 16 for rs in by_doc.values() for r in rs[:-1])
    if fmt in ("doc-sentences", "single-segment", "clm"):  # never across documents
        assert len(body) == sum(len(r.input_ids) - (2 if specials else 0) for r in rows)


def test_tlm_pair_layout_and_truncation():
    row = tlm_pair(7, [10, 11, 12], [20, 21], 4, 9, 16, CLS, SEP)
    assert row.input_ids == [CLS, 10, 11, 12, SEP, 20, 21, SEP] and row.len_a == 5
    assert (row.lang_a, row.lang_b, row.doc_id) == (4, 9, 7)
    long = tlm_pair(7, list(range(100, 120)), [20, 21, 22], 0, 1, 12, CLS, SEP)
    # the longer side loses tokens from its end until [CLS] src [SEP] tgt [SEP] fits
    assert long.input_ids == [CLS, 100, 101, 102, 103, 104, 105, SEP, 20, 21, 22, SEP] and long.len_a == 8
    assert tlm_pair(7, [], [20], 0, 1, 16, CLS, SEP) is None


def test_packed_sentences_come_back_as_they_went_in():
    rng = random.Random(4)
    for _ in range(50):
        sentences = [[rng.randrange(0, 250_000) for _ in range(rng.randrange(0, 40))]
                     for _ in range(rng.randrange(0, 9))]
        ids, lengths = pack_sentences(sentences)
        assert ids.dtype.itemsize == 4 and len(ids) == sum(map(len, sentences))
        assert unpack_sentences((ids, lengths)) == sentences


def test_rows_to_block_keeps_every_row_and_field():
    rows = [Row(10 + i, i % 3, list(range(i + 1)), 1 + i % 2, i % 2, 3, 4, i) for i in range(7)]
    block = rows_to_block(rows)
    assert block.keys[:, 1].tolist() == [r.doc_id for r in rows]
    assert block.keys[:, 2].tolist() == [r.index for r in rows]
    offsets = block.offsets.tolist()
    assert [block.ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == [r.input_ids for r in rows]
    assert block.fields.tolist() == [[r.len_a, r.nsp_label, r.lang_a, r.lang_b, r.segment_index] for r in rows]
