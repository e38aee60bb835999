"""Document text crosses no shuffle (issue 19, goal 4): the documents pipeline spills records and documents
(preprocessing.text_spill) and only references, stubs and dedup Members go through the local runner's buffers, in
the two-job and in the one-job run; the spill files read back byte for byte, and a cut one is named. The instances
pipeline does the same with its token ids (ByBucket) and its rows' sort keys (ByShard)."""

import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import execution

import preprocessing.instance_pipeline as instance_pipeline
import preprocessing.segments as segments

from preprocessing.dedup_config import DedupConfig
from preprocessing.document_results import DocTally, TallyDocs, tally_entry
from preprocessing.documents import ReadDocs, SpillDocs
from preprocessing.pipeline import run_preprocess
from preprocessing.config import PreprocessConfig
from preprocessing.instance_pipeline import (ROWS_PER_ELEMENT, WAITING_ROWS, BucketSpill, BuildInstances,
                                             load_row_spill)
from preprocessing.segments import RowBlock
from preprocessing.shards import merge_runs, shard_schema
from preprocessing.text_spill import SpillReader, SpillWriter, decode_int32_arrays, encode_int32_arrays

MARKER = "quokkamarker"  # a word in every sentence of every article, and in no title


def test_spilled_records_read_back_in_any_order(tmp_path):
    writer = SpillWriter(tmp_path / "spill", "docs")
    records = [f"record {i} " .encode() * (i + 1) for i in range(50)]
    refs = [writer.write(r) for r in records]
    writer.close()
    second = SpillWriter(tmp_path / "spill", "docs")  # the next bundle: a file of its own
    refs.append(second.write(b"last"))
    second.close()
    records.append(b"last")
    assert len({path for path, _, _ in refs}) == 2
    reader = SpillReader()
    order = list(range(len(refs)))
    random.Random(1).shuffle(order)
    assert [reader.read(refs[i]) for i in order] == [records[i] for i in order]
    reader.close()
    path, offset, length = refs[-2]
    with open(path, "r+b") as f:
        f.truncate(offset + 3)
    with pytest.raises(ValueError, match=f"{path}: spilled record at byte {offset} has 3 of its {length} bytes"):
        SpillReader().read(refs[-2])


def _doc(text: str, split: str = "train", lang: str | None = "en") -> dict:
    return {"doc_id": 7, "key": "line 1", "title": "line 1", "source": 0, "ordinal": 3, "split": split, "lang": lang,
            "meta": {"page_id": 12, "title": "Über"}, "paragraphs": [[text, "Zweiter Satz."], ["Dritter."]]}


def test_a_stub_holds_no_text_and_reads_back_as_the_docs_line(tmp_path):
    spill = SpillDocs(str(tmp_path / "spill"), DedupConfig())
    spill.setup()
    small, large = _doc("Ein Satz über nichts."), _doc("Ein Satz über nichts. " * 5000)
    stubs = [stub for doc in (small, large) for _, stub in spill.process((doc["doc_id"], doc))]
    spill.finish_bundle()
    # the stub's size does not grow with the text (a 110 kB document here; a few bytes more for bigger numbers)
    assert len(pickle.dumps(stubs[1])) < len(pickle.dumps(stubs[0])) + 16 < 2000
    assert stubs[1]["meta"] == {"page_id": 12} and stubs[1]["member"].exact != stubs[0]["member"].exact
    read = ReadDocs()
    read.setup()
    lines = [line for stub in stubs for line in read.process((7, stub))]
    assert lines == [json.dumps(d, sort_keys=True, ensure_ascii=False) for d in (small, large)]


def test_the_tally_of_stubs_is_the_tally_of_the_documents():
    docs = [_doc("A.", "train", "en"), _doc("B b.", "heldout", None), _doc("C c c.", "train", "de"),
            {"kind": "pair", "doc_id": 9, "source": 1, "split": "train", "src_lang": "en", "tgt_lang": "fr",
             "src": "hello", "tgt": "bonjour"}]
    direct = DocTally()
    for doc in docs:
        direct.add(doc)
    combine = TallyDocs()
    acc = combine.create_accumulator()
    for doc in docs:
        acc = combine.add_input(acc, (doc["doc_id"], {"tally": tally_entry(doc)}))
    assert combine.extract_output(combine.merge_accumulators([acc])) == direct.counts()
    assert direct.counts()["languages"]["de"] == {"docs": 1, "train_docs": 1, "train_chars": 27}


@pytest.fixture
def buffered(monkeypatch) -> list[bytes]:
    """Every encoded chunk the in-process FnApiRunner keeps between stages (its stage buffers and shuffles)."""
    seen: list[bytes] = []
    for cls in (execution.ListBuffer, execution.GroupingBuffer):
        original = cls.append

        def append(self, data, _original=original):
            seen.append(bytes(data))
            return _original(self, data)

        monkeypatch.setattr(cls, append.__name__, append)
    return seen


def test_no_document_text_in_the_runners_buffers(tmp_path, wiki, buffered):
    rng = random.Random(5)
    pages = []
    for i in range(12):
        text = wiki.article_text(rng).replace("river", f"river {MARKER}").replace(". ", f" {MARKER}. ")
        pages.append(wiki.page_xml(f"Article {i}", text, page_id=100 + i))
    dump = wiki.write_dump(tmp_path / "marker-pages-articles.xml.bz2", pages)
    cfg = wiki.config(preset="in_process")
    two = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "two")  # the tokenizer trained between two jobs
    assert two["counts"]["docs_kept"] == 12
    assert buffered and not [chunk for chunk in buffered if MARKER.encode() in chunk]
    buffered.clear()
    cfg.tokenizer.path = str(tmp_path / "two" / "tokenizer" / "tokenizer.json")
    one = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "one")  # given a tokenizer: one job
    assert one["counts"] == {k: v for k, v in two["counts"].items() if k != "tokenizer_sample_chars"}
    assert buffered and not [chunk for chunk in buffered if MARKER.encode() in chunk]


def test_int32_arrays_spill_without_pickle_and_a_cut_record_is_named(tmp_path):
    arrays = [np.arange(-3, 70000, 7, dtype=np.int32), np.zeros(0, np.int32), np.array([2**31 - 1], np.int32)]
    data = encode_int32_arrays(arrays)
    assert len(data) == 8 * 4 + 4 * sum(map(len, arrays)) and b"numpy" not in data
    back = decode_int32_arrays(data)
    assert [a.dtype for a in back] == [np.int32] * 3 and all(np.array_equal(a, b) for a, b in zip(arrays, back))
    with pytest.raises(ValueError, match=r"tokens\.spill: token record at byte 9: the header gives arrays of "
                                         r"\[10001, 0, 1\] int32 values, but 40004 bytes follow it"):
        decode_int32_arrays(data[:-4], "tokens.spill: token record at byte 9")
    with pytest.raises(ValueError, match="x: 3 bytes, too few"):
        decode_int32_arrays(b"abc", "x")


def test_merge_runs_reads_its_keys_from_files_and_names_a_wrong_one(tmp_path):
    keys = np.stack([np.arange(6), np.arange(6), np.arange(6)], 1).astype(np.uint64)
    np.save(tmp_path / "k.npy", keys)
    with pytest.raises(ValueError, match=r"k\.npy: sort keys of shape \(6, 3\) uint64, expected \(7, 3\) uint64"):
        merge_runs(tmp_path / "a.arrow", shard_schema(100), [([(tmp_path / "k.npy", 7)], [])], 64)
    np.save(tmp_path / "k.npy", keys.astype(np.int64))
    with pytest.raises(ValueError, match=r"k\.npy: sort keys of shape \(6, 3\) int64"):
        merge_runs(tmp_path / "a.arrow", shard_schema(100), [([(tmp_path / "k.npy", 6)], [])], 64)


def test_no_token_ids_or_sort_keys_in_the_runners_buffers(tmp_path, wiki, buffered, monkeypatch):
    """TokenizeDoc's packed token ids and the rows' sort keys stay on disk: only references cross ByBucket and
    ByShard (their raw bytes, which Beam's pickled numpy arrays would hold, are in no buffer)."""
    packed_ids, row_keys = [], []
    pack, keys_of = instance_pipeline.pack_sentences, segments.row_keys

    def recording_pack(sentences):
        ids, lengths = pack(sentences)
        packed_ids.append(ids.copy())
        return ids, lengths

    def recording_keys(docs, indexes):
        keys = keys_of(docs, indexes)
        row_keys.append(keys.copy())
        return keys

    monkeypatch.setattr(instance_pipeline, "pack_sentences", recording_pack)
    monkeypatch.setattr(segments, "row_keys", recording_keys)
    dump = wiki.write_dump(tmp_path / "tiny-pages-articles.xml.bz2", wiki.standard_pages())
    run = run_preprocess(wiki.corpus(dump), wiki.config(preset="in_process"), tmp_path / "run")
    assert run["counts"]["instances"]["train"] > 0 and buffered
    ids = [a for a in packed_ids if len(a) >= 4]  # 16 bytes or more: no chance match
    keys = np.concatenate(row_keys)
    assert len(ids) >= run["counts"]["docs_kept"] - 1 and len(keys) == sum(run["counts"]["instances"].values())
    chunks = b"\0".join(buffered)
    assert not [a for a in ids if a.tobytes() in chunks], "token ids went through a buffer of the runner"
    assert not [k for k in keys.tolist() if int(k).to_bytes(8, "little") in chunks], "sort keys went through one"
    assert not list((tmp_path / "run").rglob(".spill-*"))  # removed with the staging directory


def _row_block(rng: np.random.Generator, n: int, first: int) -> RowBlock:
    lengths = rng.integers(1, 9, size=n).astype(np.int32)
    keys = np.stack([rng.integers(0, 2**63, size=n, dtype=np.uint64), np.arange(first, first + n, dtype=np.uint64),
                     np.zeros(n, np.uint64)], 1)
    return RowBlock(keys, lengths, rng.integers(0, 500, size=int(lengths.sum())).astype(np.int32),
                    rng.integers(0, 3, size=(n, len(segments.ROW_FIELDS))).astype(np.int64))


def test_rows_waiting_for_their_pre_shards_stay_bounded_however_many_pre_shards(tmp_path):
    """With hundreds of pre-shards (a large corpus), BuildInstances keeps at most about WAITING_ROWS rows waiting,
    not ROWS_PER_ELEMENT per pre-shard; each pre-shard's file holds its rows in the order they came."""
    rng = np.random.default_rng(7)
    build = BuildInstances(PreprocessConfig(), 1, 2, str(tmp_path))
    spill, waiting, preshards = BucketSpill(str(tmp_path), "train", 3), {}, 300
    blocks = [_row_block(rng, ROWS_PER_ELEMENT, i * ROWS_PER_ELEMENT) for i in range(40)]
    most = 0
    for block in blocks:
        build._deal(block, preshards, waiting, spill)
        most = max(most, sum(len(b.lengths) for parts in waiting.values() for b in parts))
    assert WAITING_ROWS - ROWS_PER_ELEMENT <= most < WAITING_ROWS < preshards * ROWS_PER_ELEMENT
    for pre in sorted(waiting):
        spill.append(pre, waiting[pre])
    out = list(spill.finish())
    assert [pre for (_split, pre), _ in out] == list(range(preshards)) and not list(tmp_path.rglob("*.tmp"))
    every = RowBlock.concat(blocks)
    for (_split, pre), (path, rows) in out:
        mine = np.flatnonzero(every.keys[:, 0] % np.uint64(preshards) == pre)
        back, expected = load_row_spill(path), every.take(mine)[0]
        assert rows == len(mine) and all(np.array_equal(a, b) for a, b in zip(back, expected))
    path = out[0][1][0]
    with open(path, "r+b") as f:
        f.truncate(Path(path).stat().st_size - 5)
    with pytest.raises(ValueError, match=f"{path}: row spill file unreadable after byte"):
        load_row_spill(path)
