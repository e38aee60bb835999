"""Instance formats other than sentence pairs: packed text (RoBERTa, SpanBERT), causal segments (XLM CLM, XLNet,
Transformer-XL) and translation pairs (XLM TLM). Each builds rows of the same shape as preprocessing.instances'
pairs (`Row`), so masking, sharding and the shard schema are shared by every format.

    full-sentences   RoBERTa FULL-SENTENCES (Liu et al. 2019, 4.2): contiguous sentences packed up to
                     max_seq_len - 2 tokens, `[CLS] ... [SEP]`; a row may run across the end of a document into the
                     next one (the documents of a bucket in doc_id order), with an extra [SEP] between them
    doc-sentences    RoBERTa DOC-SENTENCES: the same, never across a document's end (a document's last row is shorter)
    single-segment   SpanBERT (Joshi et al. 2020, 3.3): one contiguous segment of a document's token stream, up to
                     max_seq_len - 2 tokens, `[CLS] ... [SEP]` (not cut at sentences; no NSP)
    clm              causal segments: a document's token stream cut into rows of exactly max_seq_len tokens (the
                     last row shorter), no special tokens; `segment_index` numbers the rows of a document, so a
                     recurrent model (Transformer-XL, XLNet) can carry its memory from segment i to i + 1
    tlm-pairs        XLM TLM (Lample & Conneau 2019, 3.3): `[CLS] source [SEP] target [SEP]` of one aligned pair;
                     len_a = source + 2; positions restart at the target and every token has its side's language
                     (lang_a, lang_b: ids into the manifest's instance_format.languages); the longer side loses
                     tokens from its end until the pair fits

    full-sentences with instances.packing tokens: rows filled to exactly max_seq_len (HF run_mlm's group_texts
                     with BERT's specials; `token_rows`): the documents' token streams end to end with a [SEP]
                     between two documents, cut every max_seq_len - 2 tokens, wherever that falls

A sentence longer than a row is cut into row-sized pieces (RoBERTa's packing does the same). `dupe_factor` does not
apply: these formats are fixed cuttings of the text (the K mask variants vary the rows between epochs).

    python -c "from preprocessing.segments import pack; print(pack([(1, [[5, 6], [7]], 0)], 4, True, 3))"
"""

from __future__ import annotations

from itertools import chain
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from .hashing import row_keys

TokenDoc = tuple[int, Sequence[Sequence[int]], int]  # (doc_id, sentences of token ids, language id)


class Row(NamedTuple):
    """An unmasked instance of any format (preprocessing.instances.PairInstance has the same fields). A named
    tuple: the pipeline makes one per instance and turns a block of them into arrays by transposing (zip)."""

    doc_id: int
    index: int  # n-th row of this document
    input_ids: list[int]
    len_a: int  # tokens of the first segment incl. its specials (the whole row for one-segment formats)
    nsp_label: int = 0
    lang_a: int = 0
    lang_b: int = 0
    segment_index: int = 0


# the small integer fields of a row, the columns of RowBlock.fields
ROW_FIELDS = ("len_a", "nsp_label", "lang_a", "lang_b", "segment_index")


class RowBlock(NamedTuple):
    """Rows as arrays, how the pipeline moves them through Beam (a few buffers, not a Python int per token):
    `keys` [n, 3] uint64 sort keys (row key, doc_id, index), `lengths` [n] and `ids` (int32, end to end) the token
    ids, `fields` [n, len(ROW_FIELDS)] int64."""

    keys: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    fields: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return offsets

    @staticmethod
    def concat(blocks: list["RowBlock"]) -> "RowBlock":
        if not blocks:
            return RowBlock(np.zeros((0, 3), np.uint64), np.zeros(0, np.int32), np.zeros(0, np.int32),
                            np.zeros((0, len(ROW_FIELDS)), np.int64))
        return RowBlock(*(np.concatenate(column) for column in zip(*blocks)))

    def take(self, rows: np.ndarray) -> tuple["RowBlock", np.ndarray]:
        """The given rows in that order, and their offsets into the new block's ids."""
        lengths = self.lengths[rows].astype(np.int64)
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # every taken id's index in self.ids: its row's start there, plus its place in the row
        where = np.repeat(self.offsets[rows] - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return RowBlock(self.keys[rows], self.lengths[rows], self.ids[where], self.fields[rows]), offsets


def pack_sentences(sentences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """A document's sentences of token ids as (ids end to end, int32; sentence lengths, int32): how a tokenised
    document travels through Beam's shuffle. A Python list costs 30-odd bytes a token there and in the worker that
    receives the group (a local runner hands a worker its whole share of a stage's input at once); this costs 4."""
    lengths = np.fromiter(map(len, sentences), dtype=np.int32, count=len(sentences))
    return np.fromiter(chain.from_iterable(sentences), dtype=np.int32, count=int(lengths.sum(dtype=np.int64))), lengths


def unpack_sentences(packed: tuple[np.ndarray, np.ndarray]) -> list[list[int]]:
    """pack_sentences undone: the sentences as lists of ints (what the instance builders walk)."""
    ids, lengths = packed
    flat, out, start = ids.tolist(), [], 0
    for n in lengths.tolist():
        out.append(flat[start:start + n])
        start += n
    return out


def rows_to_block(rows: Sequence[Row]) -> RowBlock:
    """Rows -> a RowBlock, their sort keys (row key, doc_id, index) hashed for the block at once."""
    doc_ids, indexes, input_ids, *fields = zip(*rows)
    docs = np.array(doc_ids, dtype=np.uint64)
    index = np.array(indexes, dtype=np.uint64)
    lengths = np.fromiter(map(len, input_ids), dtype=np.int32, count=len(input_ids))
    return RowBlock(np.stack([row_keys(docs, index), docs, index], axis=1), lengths,
                    np.fromiter(chain.from_iterable(input_ids), dtype=np.int32, count=int(lengths.sum(dtype=np.int64))),
                    np.array(fields, dtype=np.int64).T.reshape(-1, len(ROW_FIELDS)))


def _pieces(sentence: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for start in range(0, len(sentence), size):
        yield sentence[start : start + size]


def pack(docs: Sequence[TokenDoc], max_tokens: int, cross_documents: bool, sep_id: int) -> list[tuple[int, int, list[int]]]:
    """Sentences of the documents (in doc_id order) packed into chunks of at most `max_tokens` tokens:
    [(doc_id of the chunk's first token, its language, tokens)]."""
    out: list[tuple[int, int, list[int]]] = []
    current: list[int] = []
    owner: tuple[int, int] | None = None
    for doc_id, sentences, lang in sorted(docs, key=lambda d: d[0]):
        if current and cross_documents and len(current) < max_tokens:
            current.append(sep_id)  # the document boundary inside a row
        elif current and not cross_documents:
            out.append((*owner, current))
            current = []
        for sentence in sentences:
            for piece in _pieces(sentence, max_tokens):
                if current and len(current) + len(piece) > max_tokens:
                    out.append((*owner, current))
                    current = []
                if not current:
                    owner = (doc_id, lang)
                current.extend(piece)
    if current:
        out.append((*owner, current))
    return [(d, l, toks[:-1] if toks and toks[-1] == sep_id and cross_documents else toks) for d, l, toks in out]


def _numbered(chunks: list[tuple[int, int, list[int]]], cls_id: int | None, sep_id: int | None,
              segments: bool = False) -> list[Row]:
    counters: dict[int, int] = {}
    rows = []
    for doc_id, lang, tokens in chunks:
        if not tokens:
            continue
        index = counters.get(doc_id, 0)
        counters[doc_id] = index + 1
        ids = [cls_id, *tokens, sep_id] if cls_id is not None else list(tokens)
        rows.append(Row(doc_id, index, ids, len(ids), lang_a=lang, lang_b=lang,
                        segment_index=index if segments else 0))
    return rows


def full_sentences(docs: Sequence[TokenDoc], max_seq_len: int, cls_id: int, sep_id: int) -> list[Row]:
    return _numbered(pack(docs, max_seq_len - 2, True, sep_id), cls_id, sep_id)


def doc_sentences(docs: Sequence[TokenDoc], max_seq_len: int, cls_id: int, sep_id: int) -> list[Row]:
    return _numbered(pack(docs, max_seq_len - 2, False, sep_id), cls_id, sep_id)


def _stream_chunks(docs: Sequence[TokenDoc], size: int) -> list[tuple[int, int, list[int]]]:
    out = []
    for doc_id, sentences, lang in sorted(docs, key=lambda d: d[0]):
        stream = [t for sentence in sentences for t in sentence]
        out.extend((doc_id, lang, stream[i : i + size]) for i in range(0, len(stream), size))
    return out


def single_segment(docs: Sequence[TokenDoc], max_seq_len: int, cls_id: int, sep_id: int) -> list[Row]:
    return _numbered(_stream_chunks(docs, max_seq_len - 2), cls_id, sep_id)


def clm_segments(docs: Sequence[TokenDoc], max_seq_len: int) -> list[Row]:
    return _numbered(_stream_chunks(docs, max_seq_len), None, None, segments=True)


def tlm_pair(doc_id: int, source: Sequence[int], target: Sequence[int], lang_a: int, lang_b: int, max_seq_len: int,
             cls_id: int, sep_id: int) -> Row | None:
    """One translation pair as a row; None when a side is empty."""
    source, target = list(source), list(target)
    while len(source) + len(target) > max_seq_len - 3:
        (source if len(source) >= len(target) else target).pop()
    if not source or not target:
        return None
    ids = [cls_id, *source, sep_id, *target, sep_id]
    return Row(doc_id, 0, ids, len(source) + 2, lang_a=lang_a, lang_b=lang_b)


def tlm_pairs(docs: Sequence[tuple[int, Sequence[Sequence[int]], tuple[int, int]]], max_seq_len: int, cls_id: int,
              sep_id: int) -> list[Row]:
    """docs: (pair id, [source ids, target ids], (source language id, target language id))."""
    rows = []
    for doc_id, (source, target), (lang_a, lang_b) in sorted(docs, key=lambda d: d[0]):
        row = tlm_pair(doc_id, source, target, lang_a, lang_b, max_seq_len, cls_id, sep_id)
        if row is not None:
            rows.append(row)
    return rows


def token_rows(docs: Sequence[tuple[int, np.ndarray, int]], max_seq_len: int, cls_id: int, sep_id: int) -> RowBlock:
    """Full-sentences rows packed by tokens (instances.packing tokens), as arrays: `docs` = [(doc_id, its token ids
    end to end, language id)] in any order, walked in doc_id order. Their streams joined with one [SEP] between two
    documents are cut every max_seq_len - 2 tokens (the last row shorter) and each piece framed as [CLS] ... [SEP].
    A row belongs to the document of its first token (a separating [SEP] counts as the document before it) and is
    numbered among that document's rows, so the rows and their keys depend only on the bucket's documents."""
    ordered = sorted((d for d in docs if len(d[1])), key=lambda d: d[0])
    width = max_seq_len - 2
    if not ordered:
        return RowBlock.concat([])
    doc_ids = np.array([d for d, _, _ in ordered], dtype=np.uint64)
    langs = np.array([lang for _, _, lang in ordered], dtype=np.int64)
    sizes = np.array([len(ids) for _, ids, _ in ordered], dtype=np.int64)
    pieces: list[np.ndarray] = []
    separator = np.array([sep_id], dtype=np.int32)
    for n, (_, ids, _) in enumerate(ordered):
        if n:
            pieces.append(separator)
        pieces.append(np.asarray(ids, dtype=np.int32))
    stream = np.concatenate(pieces)
    starts = np.arange(0, len(stream), width, dtype=np.int64)
    # the document of every stream position: a document owns its tokens and the [SEP] after them
    doc_ends = np.cumsum(sizes + 1)  # one past each document's [SEP] (the last one's is virtual)
    owner = np.searchsorted(doc_ends, starts, side="right")
    first_row = np.searchsorted(owner, owner, side="left")  # owners ascend: a document's rows are consecutive
    index = np.arange(len(starts), dtype=np.int64) - first_row
    taken = np.minimum(width, len(stream) - starts)
    lengths = (taken + 2).astype(np.int32)
    framed = np.full((len(starts), width + 2), -1, dtype=np.int64)
    framed[:, 0] = cls_id
    body = np.full(len(starts) * width, -1, dtype=np.int64)
    body[:len(stream)] = stream
    framed[:, 1:width + 1] = body.reshape(-1, width)
    framed[np.arange(len(starts)), taken + 1] = sep_id
    ids = framed[framed >= 0].astype(np.int32)  # the last row's padding dropped (token ids are never negative)
    row_docs, row_index = doc_ids[owner], index.astype(np.uint64)
    fields = np.zeros((len(starts), len(ROW_FIELDS)), dtype=np.int64)
    fields[:, ROW_FIELDS.index("len_a")] = lengths
    fields[:, ROW_FIELDS.index("lang_a")] = fields[:, ROW_FIELDS.index("lang_b")] = langs[owner]
    return RowBlock(np.stack([row_keys(row_docs, row_index), row_docs, row_index], axis=1), lengths, ids, fields)


PACKED_FORMATS = ("full-sentences", "doc-sentences", "single-segment", "clm")


def build_rows(fmt: str, docs: Sequence, max_seq_len: int, cls_id: int, sep_id: int) -> list[Row]:
    """The rows of one bucket of tokenised documents in instance format `fmt` (not nsp/sop pairs)."""
    if fmt == "full-sentences":
        return full_sentences(docs, max_seq_len, cls_id, sep_id)
    if fmt == "doc-sentences":
        return doc_sentences(docs, max_seq_len, cls_id, sep_id)
    if fmt == "single-segment":
        return single_segment(docs, max_seq_len, cls_id, sep_id)
    if fmt == "clm":
        return clm_segments(docs, max_seq_len)
    if fmt == "tlm-pairs":
        return tlm_pairs(docs, max_seq_len, cls_id, sep_id)
    raise ValueError(f"unknown instance format {fmt!r}")
