"""preprocessing.tokenizer: WordPiece / byte-level BPE / Unigram, special ids by role, and byte-identical training
across processes, document orders and thread counts for every kind."""

import json
import random
import subprocess
import sys
import textwrap

import pytest

from preprocessing.config import TokenizerConfig
from preprocessing.tokenizer import (SPECIAL_TOKENS, SPECIAL_TOKENS_BY_KIND, adopt_tokenizer, save_tokenizer, special_ids,
                                     tokenizer_kind, train_tokenizer)

from .news_texts import news_texts_by_lang

_TRAIN_SCRIPT = textwrap.dedent("""
    import json, random, sys
    from pathlib import Path
    from preprocessing.config import TokenizerConfig
    from preprocessing.tokenizer import save_tokenizer, train_tokenizer
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
    if sys.argv[3] == "shuffled":
        random.Random(1).shuffle(lines)
    kind = sys.argv[4]
    cfg = TokenizerConfig(kind=kind, vocab_size=600 if kind == "wordpiece" else 1500, min_frequency=2,
                          limit_alphabet=30, lowercase=kind != "bpe")
    save_tokenizer(train_tokenizer(lambda: iter(lines), cfg), Path(sys.argv[2]))
""")


def _corpus(wiki) -> list[str]:
    """Prose from the test wiki plus pseudo-words from syllables: many merges of equal count (ties)."""
    from preprocessing.clean import wikitext_to_paragraphs

    rng = random.Random(0)
    lines = []
    for _ in range(20):
        lines += wikitext_to_paragraphs(wiki.article_text(rng))
    syllables = ["ka", "lo", "mi", "tu", "ren", "sar", "vel", "dio", "pha", "gru", "ux", "bre", "Ön", "zy"]
    for _ in range(400):
        lines.append(" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12)))
    # characters of equal, low frequency: the limit_alphabet cut falls among them
    lines += [f"rare {chr(c)} zq{chr(c)}x" for c in range(0x3b1, 0x3c9)]
    return lines


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_training_is_byte_identical_across_processes_orders_and_threads(tmp_path, wiki, kind):
    lines = _corpus(wiki)
    if kind != "wordpiece":  # real multilingual news too: long CJK / Thai words, many scripts
        lines += [p for texts in news_texts_by_lang().values() for t in texts for p in t.splitlines() if p.strip()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    outputs = []
    for i, (order, threads) in enumerate([("file", "2"), ("file", "2"), ("shuffled", "1")]):
        out = tmp_path / f"tok{i}.json"
        env = {"RAYON_NUM_THREADS": threads, "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", _TRAIN_SCRIPT, str(corpus), str(out), order, kind], check=True, env=env)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    model = json.loads(outputs[0])["model"]
    if kind == "wordpiece":
        assert len(model["vocab"]) == 600
        assert sum(1 for t in model["vocab"] if len(t) == 1) == 30  # limit_alphabet honoured
    elif kind == "bpe":
        assert len(model["vocab"]) == 1500 and len(model["merges"]) == 1500 - 5 - 256
    else:
        assert len(model["vocab"]) == 1500 and model["unk_id"] == 1


def test_bert_layout_special_ids_and_post_processor(wiki):
    lines = _corpus(wiki)
    tok = train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300, limit_alphabet=40))
    assert special_ids(tok, "t") == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS.values())
    enc = tok.encode("The River", "a Mountain")
    assert enc.tokens[0] == "[CLS]" and enc.tokens.count("[SEP]") == 2 and "river" in enc.tokens
    assert enc.type_ids == [0] * (enc.tokens.index("[SEP]") + 1) + [1] * (len(enc.tokens) - enc.tokens.index("[SEP]") - 1)
    # the pre-registered ## tokens are ordinary vocabulary again: matched only inside words, never skipped
    added = {t["content"] for t in json.loads(tok.to_str())["added_tokens"]}
    assert added == set(SPECIAL_TOKENS.values())
    assert tok.decode(tok.encode("rivers").ids) == "rivers"


def test_adopting_an_existing_tokenizer_copies_it(tmp_path, wiki):
    lines = _corpus(wiki)
    source = tmp_path / "mine.json"
    save_tokenizer(train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300)), source)
    target = tmp_path / "run" / "tokenizer.json"
    adopt_tokenizer(source, target)
    assert target.read_bytes() == source.read_bytes()


def test_adopting_a_broken_tokenizer_names_it_and_writes_nothing(tmp_path):
    import pytest

    from bertfactory.errors import InputError

    source = tmp_path / "broken.json"
    source.write_bytes(b"\xff\xfe not json")
    target = tmp_path / "run" / "tokenizer.json"
    with pytest.raises(InputError) as err:
        adopt_tokenizer(source, target)
    assert str(source) in str(err.value)
    assert not target.parent.exists() or not any(target.parent.iterdir())


def test_roberta_layout_for_bpe(wiki):
    lines = _corpus(wiki)
    tok = train_tokenizer(lambda: iter(lines), TokenizerConfig(kind="bpe", vocab_size=400, lowercase=False))
    assert [tok.id_to_token(i) for i in range(5)] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert special_ids(tok, "t") == {"pad": 1, "unk": 3, "cls": 0, "sep": 2, "mask": 4}
    assert tokenizer_kind(tok) == "bpe"
    enc = tok.encode("The River", "a Mountain")
    assert enc.tokens[0] == "<s>" and enc.tokens.count("</s>") == 3 and enc.type_ids == [0] * len(enc.tokens)
    assert "</s></s>" in "".join(enc.tokens)  # RoBERTa's pair template: <s> A </s></s> B </s>
    text = "Ünïcödé 東京 ok"  # byte-level: nothing unknown, exact round trip, cased
    assert tok.decode(tok.encode(text).ids) == text and 3 not in tok.encode(text).ids


def test_albert_layout_for_unigram(wiki):
    lines = _corpus(wiki)
    tok = train_tokenizer(lambda: iter(lines), TokenizerConfig(kind="unigram", vocab_size=400))
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS_BY_KIND["unigram"].values())
    assert special_ids(tok, "t") == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    enc = tok.encode("The River", "a Mountain")
    assert enc.tokens[0] == "[CLS]" and enc.tokens.count("[SEP]") == 2 and enc.tokens[1].startswith("▁")
    assert enc.type_ids[-1] == 1 and enc.type_ids[0] == 0
    assert tok.decode(tok.encode("the rivers").ids) == "the rivers"  # lowercase (default) and ▁ decoding
    assert tok.encode("ＡＢＣ").tokens == tok.encode("abc").tokens  # NFKC before lowercasing


def test_casing_and_accents(wiki):
    lines = _corpus(wiki)
    cased = train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300, lowercase=False))
    assert "R" in cased.encode("River").tokens[1] and "Ö" in "".join(cased.encode("Ön").tokens)
    keep = train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300, lowercase=True, strip_accents=False))
    assert "ö" in "".join(keep.encode("Ön").tokens)
    bert = train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300, lowercase=True))
    assert "o" in "".join(bert.encode("Ön").tokens) and "ö" not in "".join(bert.encode("Ön").tokens)


def test_wordpiece_isolates_cjk_ideographs_like_bert():
    texts = [t for ts in news_texts_by_lang().values() for t in ts]
    tok = train_tokenizer(lambda: iter(texts), TokenizerConfig(vocab_size=3000, lowercase=False, limit_alphabet=None))
    tokens = tok.encode("在美国旧金山举行的中美元首会晤").tokens[1:-1]
    assert tokens == list("在美国旧金山举行的中美元首会晤")  # one ideograph per token, never ## pieces


def test_special_ids_names_a_tokenizer_without_a_complete_set(tmp_path):
    from tokenizers import Tokenizer, models

    from bertfactory.errors import InputError

    tok = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "<s>": 2}, unk_token="[UNK]"))
    with pytest.raises(InputError, match=r"mine\.json.*\[CLS\]"):
        special_ids(tok, "mine.json")
    source = tmp_path / "half.json"
    source.write_text(tok.to_str(), encoding="utf-8")
    with pytest.raises(InputError, match="half.json"):
        adopt_tokenizer(source, tmp_path / "run" / "tokenizer.json")
