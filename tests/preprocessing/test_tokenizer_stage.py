"""The manifest's fertility table (tokenizer_stage.corpus_fertility): per language, on a deterministic bounded sample
of the docs files: up to FERTILITY_DOCS documents, held-out first, their text cut at FERTILITY_CHARS characters;
the same table whatever order the docs files list the documents in."""

import json
import random

from preprocessing import hashing, tokenizer_stage
from preprocessing.config import TokenizerConfig
from preprocessing.fertility import fertility, first_chars
from preprocessing.tokenizer import train_tokenizer
from preprocessing.tokenizer_stage import corpus_fertility, doc_texts

WORDS = ("river town rain farmers animals hills council school hall families homes water roads bridge market "
         "traders library station books tools games volunteers children roof shelves lamps").split()


def _doc(doc_id: int, split: str, lang: str, rng: random.Random) -> dict:
    paragraphs = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "." for _ in range(3)]
                  for _ in range(2)]
    return {"doc_id": doc_id, "split": split, "lang": lang, "title": f"d{doc_id}", "paragraphs": paragraphs}


def _write(work, docs) -> None:
    (work / "docs").mkdir(parents=True, exist_ok=True)
    for part in range(2):
        (work / "docs" / f"part-{part:05d}.jsonl").write_text(
            "".join(json.dumps(d, sort_keys=True) + "\n" for d in docs[part::2]), encoding="utf-8")


def test_fertility_sample_is_bounded_held_out_first_and_order_free(tmp_path, monkeypatch):
    rng = random.Random(0)
    docs = [_doc(1000 + i, "heldout" if i % 10 == 0 else "train", "en" if i % 3 else "de", rng) for i in range(60)]
    tokenizer = train_tokenizer(lambda: (t for d in docs for t in doc_texts(d)),
                                TokenizerConfig(vocab_size=120, min_frequency=1, limit_alphabet=40))
    monkeypatch.setattr(tokenizer_stage, "FERTILITY_DOCS", 8)
    monkeypatch.setattr(tokenizer_stage, "FERTILITY_CHARS", 700)
    _write(tmp_path / "a", docs)
    table = corpus_fertility(tokenizer, tmp_path / "a", seed=5)
    assert list(table) == ["de", "en"]
    for lang, row in table.items():
        # by the definition: held-out documents first, then training ones, each group by the stable hash; the
        # first 8 documents' paragraphs cut at 700 characters in all
        mine = sorted((d for d in docs if d["lang"] == lang),
                      key=lambda d: (d["split"] != "heldout", hashing.hash64("fertility", 5, d["doc_id"])))[:8]
        assert sum(d["split"] == "heldout" for d in mine) == sum(d["split"] == "heldout" and d["lang"] == lang
                                                                  for d in docs) > 0
        assert row == fertility(tokenizer, {lang: first_chars([t for d in mine for t in doc_texts(d)], 700)})[lang]
        assert row["chars"] <= 700 and row["tokens"] > 0
    # the same table from the same documents listed in another order and split across the files differently
    shuffled = docs[:]
    random.Random(1).shuffle(shuffled)
    _write(tmp_path / "b", shuffled)
    assert corpus_fertility(tokenizer, tmp_path / "b", seed=5) == table
    assert corpus_fertility(tokenizer, tmp_path / "b", seed=6) != table  # the seed picks the documents


def test_fertility_of_sentence_pairs_is_per_side_language(tmp_path):
    """A pair's sides are texts of their own languages: an `en-ja` row divided the Japanese tokens by the English
    words (tokens_per_word ~4.8 on UDHR). The English side paired with two languages counts once."""
    english = ["All human beings are born free and equal in dignity and rights.",
               "Everyone has the right to life, liberty and security of person."]
    japanese = ["すべての人間は、生れながらにして自由であり、かつ、尊厳と権利とについて平等である。",
                "すべて人は、生命、自由及び身体の安全に対する権利を有する。"]
    chinese = ["人人生而自由,在尊严和权利上一律平等。", "人人有权享有生命、自由和人身安全。"]
    docs = [{"kind": "pair", "doc_id": 10 * i + j, "split": "heldout" if i == 0 else "train", "src": en, "tgt": xx,
             "src_lang": "en", "tgt_lang": lang, "key": f"{lang} {i}"}
            for j, (lang, side) in enumerate((("ja", japanese), ("zh", chinese))) for i, (en, xx) in
            enumerate(zip(english, side))]
    tokenizer = train_tokenizer(lambda: (t for d in docs for t in doc_texts(d)),
                                TokenizerConfig(vocab_size=200, min_frequency=1))
    _write(tmp_path, docs)
    table = corpus_fertility(tokenizer, tmp_path, seed=5)
    assert list(table) == ["en", "ja", "zh"]
    assert table["en"]["texts"] == 2 and table["en"]["words"] == sum(len(t.split()) for t in english)
    for lang, texts in (("en", english), ("ja", japanese), ("zh", chinese)):
        assert table[lang]["chars"] == sum(len(t.replace(" ", "")) for t in texts)
        assert table[lang]["tokens"] == sum(len(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts)
    assert not table["ja"]["spaced"] and table["ja"]["tokens_per_word"] is None
