"""preprocessing.pipeline.run_preprocess end to end on a tiny dump the test writes: exact counts, quarantine,
loadable shards, byte-identical reruns, atomic replacement, and clear errors for bad input."""

import bz2
import json
import random
from pathlib import Path

import datasets
import pytest

from bertfactory.errors import InputError
from bertfactory.io import sha256_file
from preprocessing import hashing
from preprocessing.config import TokenizerConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import ShardSet, read_manifest
from preprocessing.tokenizer import save_tokenizer, train_tokenizer


def _tree(run_dir: Path, skip=("stats.json",)) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): sha256_file(p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in skip}


def _run(tmp_path, wiki, name="run", **runner):
    dump = tmp_path / "tiny-pages-articles.xml.bz2"
    if not dump.exists():
        wiki.write_dump(dump, wiki.standard_pages())
    run_dir = tmp_path / name
    manifest = run_preprocess(wiki.corpus(dump), wiki.config(**runner), run_dir)
    return dump, run_dir, manifest


def test_counts_quarantine_shards_and_manifest(tmp_path, wiki, no_prism):
    dump, run_dir, manifest = _run(tmp_path, wiki)
    counts = manifest["counts"]
    for key, value in wiki.expected.items():
        assert counts[key] == value, key
    assert counts["docs_read"] == counts["docs_kept"] + sum(counts["docs_dropped"].values()) + sum(counts["quarantined"].values())
    titles = [f"Article {i}" for i in range(30)]
    held = sum(hashing.is_heldout(t, 0.2) for t in titles)
    assert counts["docs"] == {"heldout": held, "train": 30 - held} and held > 0
    assert counts["instances"]["train"] > 0 and counts["instances"]["heldout"] > 0
    assert counts["sentences"] == 30 * 15

    quarantine = [json.loads(x) for x in (run_dir / "shards/quarantine.jsonl").read_text().splitlines()]
    assert sorted((q["reason"], q["record_id"]) for q in quarantine) == [("duplicate_key", "id=9"), ("missing_id", "title='No id'")]
    assert all(q["file"] == str(dump) for q in quarantine)

    m = read_manifest(run_dir / "shards")
    assert m.tokenizer.path == "../tokenizer/tokenizer.json"
    assert m.tokenizer.sha256 == sha256_file(run_dir / "tokenizer/tokenizer.json")
    assert m.tokenizer.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert m.tokenizer.vocab_size == 200 and m.tokenizer.lowercase is True
    assert m.sources[0].path == str(dump) and m.sources[0].bytes == dump.stat().st_size
    assert m.masking["variants"] == 3 and m.instance_format["max_seq_len"] == 32
    assert m.runner["runner"] == "FnApiRunner" and m.runner["direct_num_workers"] == 2
    assert [s.path for s in m.splits["train"].shards] == ["train/part-00000.arrow", "train/part-00001.arrow"]
    assert [s.path for s in m.splits["heldout"].shards] == ["heldout/part-00000.arrow"]
    assert str(tmp_path) not in json.dumps({k: v for k, v in manifest.items() if k != "sources"})
    stats = json.loads((run_dir / "shards/stats.json").read_text())
    assert stats["timings_s"]["total"] > 0 and stats["counts"] == counts
    assert not (run_dir / ".preprocess-staging").exists()

    for split in ("train", "heldout"):
        shards = ShardSet.open(run_dir / "shards", split, tokenizer_sha256=m.tokenizer.sha256)
        assert len(shards) == counts["instances"][split]
        seen_docs = set()
        for i in range(len(shards)):
            for v in range(3):
                inst = shards.instance(i, v)
                ids = inst.input_ids.tolist()
                assert len(ids) <= 32 and ids[0] == 2 and ids[inst.len_a - 1] == 3 and ids[-1] == 3
                assert len(inst.mask_positions) == min(20, max(1, round(len(ids) * 0.15)))
                assert all(ids[p] not in (0, 2, 3) for p in inst.mask_positions.tolist())
            seen_docs.add(inst.doc_id)
        split_titles = [t for t in titles if hashing.is_heldout(t, 0.2) == (split == "heldout")]
        assert seen_docs <= {hashing.doc_id(0, t) for t in split_titles}
        for info in m.splits[split].shards:
            ds = datasets.Dataset.from_file(str(run_dir / "shards" / info.path))
            assert ds.num_rows == info.rows
            if info.rows:
                row = ds[0]
                assert set(row) == {"input_ids", "len_a", "nsp_label", "mask_positions", "mask_tokens", "doc_id",
                                    "lang_a", "lang_b", "segment_index"}
                assert len(row["mask_positions"]) == 3


@pytest.mark.slow
def test_byte_identical_across_reruns_worker_counts_and_in_place(tmp_path, wiki):
    _, run_a, manifest_a = _run(tmp_path, wiki, "a")
    _, run_b, manifest_b = _run(tmp_path, wiki, "b", preset="in_process", num_workers=1)
    tree_a, tree_b = _tree(run_a), _tree(run_b, skip=("stats.json", "manifest.json"))
    assert tree_a.keys() - {"shards/manifest.json"} == tree_b.keys() and tree_b
    assert all(tree_a[k] == tree_b[k] for k in tree_b)
    assert {k: v for k, v in manifest_a.items() if k != "runner"} == {k: v for k, v in manifest_b.items() if k != "runner"}
    # rerun into an existing run directory holding stale extra files: replaced cleanly, same bytes
    (run_a / "shards/train/part-00099.arrow").write_bytes(b"stale")
    (run_a / "tokenizer/old.json").write_text("{}")
    _run(tmp_path, wiki, "a")
    assert _tree(run_a) == tree_a


def test_existing_tokenizer_is_used_as_is(tmp_path, wiki):
    mine = tmp_path / "mine.json"
    rng = random.Random(3)
    texts = [wiki.article_text(rng).replace("[[", "").replace("]]", "") for _ in range(10)]
    save_tokenizer(train_tokenizer(lambda: iter(texts), TokenizerConfig(vocab_size=150, lowercase=False)), mine)
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    cfg = wiki.config(preset="in_process")
    cfg.tokenizer.path = str(mine)
    cfg.tokenizer.vocab_size = 999  # ignored when a tokenizer is given
    manifest = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    assert manifest["tokenizer"]["sha256"] == sha256_file(mine)
    assert manifest["tokenizer"]["vocab_size"] == 150 and manifest["tokenizer"]["lowercase"] is False
    assert (tmp_path / "run/tokenizer/tokenizer.json").read_bytes() == mine.read_bytes()


def test_tokenizer_without_bert_specials_is_refused(tmp_path, wiki):
    from tokenizers import Tokenizer, models

    bad = tmp_path / "bad.json"
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(bad))
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages()[:5])
    cfg = wiki.config(preset="in_process")
    cfg.tokenizer.path = str(bad)
    with pytest.raises(InputError) as err:
        run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    assert str(bad) in str(err.value) and "[PAD]" in str(err.value)


def test_corrupt_bz2_mid_file_is_a_clear_error(tmp_path, wiki):
    pages = [wiki.page_xml(f"P{i}", wiki.article_text(random.Random(i)) * 20, page_id=i) for i in range(60)]
    data = bytearray(bz2.compress((wiki.header + "".join(pages) + "</mediawiki>").encode()))
    data[len(data) * 2 // 3 : len(data) * 2 // 3 + 64] = b"\x00" * 64
    dump = tmp_path / "corrupt.xml.bz2"
    dump.write_bytes(bytes(data))
    with pytest.raises(InputError) as err:
        run_preprocess(wiki.corpus(dump), wiki.config(), tmp_path / "run")
    message = str(err.value)
    assert message.startswith(f"{dump}: corrupt bz2 data after") and "pages read" in message
    assert "Traceback" not in message
    assert not (tmp_path / "run/shards").exists()


@pytest.mark.parametrize("content", [b"plain text, not a wiki dump\n", b"<html><body>a web page</body></html>"])
def test_not_mediawiki_is_a_clear_error(tmp_path, wiki, content):
    path = tmp_path / "input.xml"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        run_preprocess(wiki.corpus(path), wiki.config(), tmp_path / "run")
    assert str(path) in str(err.value) and "MediaWiki" in str(err.value)


def test_empty_corpus_after_filtering_names_filters_and_counts(tmp_path, wiki):
    pages = [p for p in wiki.standard_pages() if "<title>Article" not in p]
    dump = wiki.write_dump(tmp_path / "no-articles.xml.bz2", pages)
    with pytest.raises(InputError) as err:
        run_preprocess(wiki.corpus(dump), wiki.config(), tmp_path / "run")
    message = str(err.value)
    assert str(dump) in message and "no training documents left" in message
    for line in ("dropped redirect (redirect page): 3", "dropped namespace (namespace not in [0]): 2",
                 "dropped too_short (fewer words than corpus.filters.min_words=50, Gopher): 2",
                 "dropped empty (no text left after removing markup): 1", "quarantined missing_id: 1"):
        assert line in message, line


def test_missing_input_file(tmp_path, wiki):
    with pytest.raises(InputError) as err:
        run_preprocess(wiki.corpus(tmp_path / "nope.xml.bz2"), wiki.config(), tmp_path / "run")
    assert "nope.xml.bz2" in str(err.value) and "not found" in str(err.value)


def test_manifest_lowercase_is_read_from_the_normalizer():
    """An adopted tokenizer may lowercase with a Lowercase step in a Sequence (no top-level 'lowercase' key)."""
    from tokenizers import Tokenizer, models, normalizers

    from preprocessing.manifest import is_lowercase as _is_lowercase

    tok = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    assert _is_lowercase(tok) is False
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    assert _is_lowercase(tok) is True
    for lowercase in (True, False):
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        assert _is_lowercase(tok) is lowercase


def test_document_that_tokenises_to_nothing_is_counted_as_dropped(tmp_path, wiki, monkeypatch):
    # Paragraphs made only of combining accents survive cleaning but BERT's normalizer strips them all.
    accents = "\u0301" * 60
    pages = wiki.standard_pages() + [wiki.page_xml("Only accents", f"{accents}\n\n{accents}\n\n{accents}\n\n{accents}",
                                                   page_id=500)]
    dump = wiki.write_dump(tmp_path / "accents.xml.bz2", pages)
    # The quality filters drop a page without words before it is tokenised; this checks the tokeniser's own
    # guard, so the filters let the page through here (in_process: the workers run in this process).
    import preprocessing.filters

    keep_words = preprocessing.filters.clean_document
    monkeypatch.setattr(preprocessing.filters, "clean_document",
                        lambda paragraphs, lang, cfg, prob=None: (paragraphs, None) if "\u0301" in paragraphs[0]
                        else keep_words(paragraphs, lang, cfg, prob))
    counts = run_preprocess(wiki.corpus(dump), wiki.config(preset="in_process"), tmp_path / "run")["counts"]
    expected_kept = wiki.expected["docs_kept"]
    assert counts["docs_dropped"].get("no_tokens") == 1
    assert counts["docs_kept"] == expected_kept
    assert sum(counts["docs"].values()) == expected_kept
    assert counts["docs_read"] == counts["docs_kept"] + sum(counts["docs_dropped"].values()) + sum(counts["quarantined"].values())


def test_job_runs_with_the_objects_before_it_frozen_and_unfreezes_them(tmp_path, monkeypatch):
    import gc

    from preprocessing import pipeline

    seen = []

    def fake_job(corpus, cfg, run_dir):
        seen.append(gc.get_freeze_count())
        if len(seen) == 2:
            raise InputError("a bad input")
        return {"ok": True}

    monkeypatch.setattr(pipeline, "_run_preprocess", fake_job)
    assert gc.get_freeze_count() == 0
    assert run_preprocess(None, None, tmp_path) == {"ok": True}
    with pytest.raises(InputError, match="a bad input"):
        run_preprocess(None, None, tmp_path)
    assert seen[0] > 1000 and seen[1] > 1000  # the imported modules' objects, out of every collection meanwhile
    assert gc.get_freeze_count() == 0  # given back to the collector, after a failure too
