"""instances.packing tokens (issue 19, goal 1): full-sentences rows filled to exactly max_seq_len as HF's
group_texts fills its blocks, documents tokenised a paragraph at a time; the rows keep every token in order, and the
shards are byte-identical across reruns and worker counts, whatever batches the documents are tokenised in."""

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from bertfactory.io import sha256_file
from preprocessing.config import CorpusConfig, InstancesConfig, TokenizerConfig
from preprocessing.instance_pipeline import TokenizeDocBatch, load_tokens
from preprocessing.pipeline import run_preprocess
from preprocessing.segments import ROW_FIELDS, token_rows
from preprocessing.shards import ShardSet
from preprocessing.text_spill import SpillReader
from preprocessing.tokenizer import save_tokenizer, train_tokenizer

CLS, SEP = 101, 102


def _rows(block) -> list[list[int]]:
    offsets = block.offsets
    return [block.ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(block.lengths))]


def test_token_rows_by_hand():
    docs = [(7, np.array([5, 6, 7], np.int32), 1), (3, np.array([8, 9, 10, 11, 12], np.int32), 0),
            (9, np.array([], np.int32), 2)]  # given out of order; the empty document owns nothing
    block = token_rows(docs, max_seq_len=6, cls_id=CLS, sep_id=SEP)
    # stream in doc_id order: 8 9 10 11 12 [SEP] 5 6 7, cut every 4 tokens
    assert _rows(block) == [[CLS, 8, 9, 10, 11, SEP], [CLS, 12, SEP, 5, 6, SEP], [CLS, 7, SEP]]
    assert block.keys[:, 1].tolist() == [3, 3, 7] and block.keys[:, 2].tolist() == [0, 1, 0]
    fields = dict(zip(ROW_FIELDS, block.fields.T.tolist()))
    assert fields["len_a"] == [6, 6, 3] == block.lengths.tolist()
    assert fields["lang_a"] == fields["lang_b"] == [0, 0, 1] and fields["nsp_label"] == [0, 0, 0]
    # a [SEP] that starts a row belongs to the document before it
    cut_at_sep = token_rows([(1, np.array([4, 4, 4, 4]), 0), (2, np.array([5]), 0)], 6, CLS, SEP)
    assert _rows(cut_at_sep) == [[CLS, 4, 4, 4, 4, SEP], [CLS, SEP, 5, SEP]]
    assert cut_at_sep.keys[:, 1:].tolist() == [[1, 0], [1, 1]]
    assert len(token_rows([(1, np.array([], np.int32), 0)], 6, CLS, SEP).lengths) == 0


@pytest.mark.parametrize("width", [3, 4, 7, 50])
def test_token_rows_keep_every_token_in_order(width):
    rng = np.random.default_rng(width)
    docs = [(int(d), rng.integers(0, 100, size=int(rng.integers(1, 30))), 0) for d in rng.permutation(12) + 1]
    block = token_rows(docs, width + 2, CLS, SEP)
    rows = _rows(block)
    assert all(r[0] == CLS and r[-1] == SEP for r in rows)
    assert all(len(r) == width + 2 for r in rows[:-1]) and 3 <= len(rows[-1]) <= width + 2
    expected = [t for n, (_, ids, _) in enumerate(sorted(docs)) for t in ([SEP] if n else []) + ids.tolist()]
    assert [t for r in rows for t in r[1:-1]] == expected
    keys = block.keys[:, 1:].tolist()
    assert keys == sorted(keys) and len({tuple(k) for k in keys}) == len(keys)  # (doc_id, index) unique, in order


def test_token_packing_is_a_full_sentences_choice():
    assert InstancesConfig(format="full-sentences", packing="tokens").packing == "tokens"
    assert InstancesConfig().packing == "sentences"  # the default keeps every existing recipe's rows
    for fmt in ("nsp-pairs", "doc-sentences", "single-segment", "clm"):
        with pytest.raises(ValueError, match=rf"packing tokens packs full-sentences rows; format '{fmt}'"):
            InstancesConfig(format=fmt, packing="tokens")


PARAGRAPH = ("The river flooded the lower town after three days of rain. Farmers moved their animals to the hills. "
             "The council opened the school hall for families who had lost their homes. By Friday the water had gone "
             "down and the roads were open again.")


def _write_corpus(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    words = PARAGRAPH.split()
    for f in range(3):
        docs = []
        for d in range(4):  # documents of different lengths, two paragraphs each
            n = 12 + 9 * ((f * 4 + d) % 5)
            first = " ".join(words[(f + d) % 7:][:n])
            docs.append(f"{first}.\n{' '.join(reversed(words[:n]))}.")
        (directory / f"part{f}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return directory


def _packed_config(wiki, **runner):
    cfg = wiki.config(**runner)
    return cfg.model_copy(update={
        "instances": InstancesConfig.model_validate({**cfg.instances.model_dump(), "format": "full-sentences",
                                                     "packing": "tokens", "docs_per_bucket": 5}),
        "masking": cfg.masking.model_copy(update={"dynamic": True})})


def _tree(run_dir: Path) -> dict[str, str]:
    skip = ("stats.json", "manifest.json")
    return {str(p.relative_to(run_dir)): sha256_file(p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in skip}


@pytest.mark.slow
def test_token_packing_end_to_end_same_bytes_across_reruns_and_worker_counts(tmp_path, wiki):
    corpus = CorpusConfig(inputs=[str(_write_corpus(tmp_path / "in"))], format="text", documents="raw", lang="en")
    workers = run_preprocess(corpus, _packed_config(wiki), tmp_path / "workers")
    in_process = run_preprocess(corpus, _packed_config(wiki, preset="in_process", num_workers=1), tmp_path / "one")
    again = run_preprocess(corpus, _packed_config(wiki), tmp_path / "again")
    assert _tree(tmp_path / "workers") == _tree(tmp_path / "one") == _tree(tmp_path / "again")
    strip = lambda m: {k: v for k, v in m.items() if k != "runner"}  # noqa: E731
    assert strip(workers) == strip(in_process) == strip(again)
    assert workers["counts"]["docs_kept"] == 12 and workers["instance_format"]["name"] == "full-sentences"

    # rows full but each bucket's last; their tokens are the documents tokenised a paragraph at a time plus one
    # [SEP] between two documents of a bucket
    width = workers["instance_format"]["max_seq_len"]
    tokenizer = Tokenizer.from_file(str(tmp_path / "workers" / "tokenizer" / "tokenizer.json"))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    rows = [inst.input_ids.tolist() for split in ("train", "heldout")
            for inst in ShardSet.open(tmp_path / "workers" / "shards", split)]
    assert rows and all(ids[0] == cls_id and ids[-1] == sep_id and len(ids) <= width for ids in rows)
    buckets = sum(workers["instance_format"]["random_buckets"].values())
    assert 1 <= sum(len(ids) < width for ids in rows) <= buckets
    paragraphs = [p for f in sorted((tmp_path / "in").iterdir()) for doc in f.read_text().split("\n\n")
                  for p in doc.split("\n") if p.strip()]
    doc_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(paragraphs, add_special_tokens=False))
    separators = sum(len(ids) - 2 for ids in rows) - doc_tokens
    assert 12 - buckets <= separators <= 11
    assert sum(len(ids) for ids in rows) == workers["counts"]["tokens"]


def test_batched_tokenising_is_the_same_whatever_the_batch(tmp_path):
    texts = [PARAGRAPH, PARAGRAPH.upper(), " ".join(reversed(PARAGRAPH.split()))]
    tokenizer = train_tokenizer(lambda: iter(texts), TokenizerConfig(vocab_size=120, min_frequency=1, limit_alphabet=40))
    save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    fn = TokenizeDocBatch(str(tmp_path / "tokenizer.json"), str(tmp_path / "shards"))
    fn.setup()
    plan = {"buckets": {"train": 2, "heldout": 1}, "copy_rates": {}, "lang_ids": {"en": 0}}
    lines = [json.dumps({"doc_id": 10 + i, "split": "train", "lang": "en", "title": f"d{i}",
                         "paragraphs": [t.split(". ") for t in texts[i:] + texts[:i]]}) for i in range(3)]
    lines.append(json.dumps({"doc_id": 99, "split": "train", "lang": "en", "title": "blank", "paragraphs": [[" "]]}))

    def run(batches):
        out = []
        for batch in batches:
            fn.start_bundle()
            items = list(fn.process(batch, plan))
            fn.finish_bundle()  # the token spill files are complete
            for item in items:
                if hasattr(item, "tag"):
                    out.append(("no_tokens", item.value))
                    continue
                [(doc_id, (ids, lengths), lang)] = load_tokens([item[1]], SpillReader())
                out.append((item[0], doc_id, ids.tolist(), lengths.tolist(), lang))
        return out

    whole = run([lines])
    assert whole == run([[line] for line in lines]) == run([lines[:1], lines[1:]])
    assert [o[0] for o in whole][-1] == "no_tokens" and len(whole) == 4
    # paragraphs tokenised as one text each: a document's lengths are its paragraphs'
    assert all(len(o[3]) == 3 for o in whole[:3])
