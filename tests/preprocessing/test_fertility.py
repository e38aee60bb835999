"""preprocessing.fertility on the real multilingual newspaper4k texts, with the three tokenizer kinds trained on
them (cased, every character kept, vocab 4000; in-sample figures, docs/tokenizers.md has the full table)."""

import re

import pytest

from preprocessing.config import TokenizerConfig
from preprocessing.fertility import first_chars, fertility, format_table, is_spaced
from preprocessing.tokenizer import train_tokenizer
from preprocessing.tokenizer_sample import training_sample

from .news_texts import news_texts_by_lang

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
_IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]+")


@pytest.fixture(scope="module")
def texts():
    return news_texts_by_lang()


@pytest.fixture(scope="module")
def tokenizers(texts):
    sample = training_sample(texts, max_chars=None, alpha=0.5, seed=0)
    return {kind: train_tokenizer(lambda: iter(sample), TokenizerConfig(
        kind=kind, vocab_size=4000, lowercase=False, limit_alphabet=None)) for kind in ("wordpiece", "bpe", "unigram")}


def _cjk_lengths(tok) -> list[int]:
    return [len(_CJK.findall(tok.decode([i]))) for i in range(tok.get_vocab_size())]


def test_definitions(texts, tokenizers):
    tok = tokenizers["wordpiece"]
    table = fertility(tok, {"zh": texts["zh"], "en": texts["en"][:2]})
    assert list(table) == ["en", "zh"]
    zh = table["zh"]
    assert zh["chars"] == sum(len(re.sub(r"\s", "", t)) for t in texts["zh"])
    assert zh["tokens"] == sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts["zh"])
    assert zh["tokens_per_char"] == round(zh["tokens"] / zh["chars"], 4)
    assert zh["spaced"] is False and zh["words"] is None and zh["tokens_per_word"] is None
    en = table["en"]
    assert en["spaced"] and en["words"] == sum(len(t.split()) for t in texts["en"][:2])
    assert en["tokens_per_word"] == round(en["tokens"] / en["words"], 4)
    assert not is_spaced(texts["th"]) and not is_spaced(texts["my"]) and is_spaced(texts["ar"])
    assert "| zh |" in format_table(table)


# Bounds, from the measured figures (docs/tokenizers.md) with margin:
# - unk rate: 0 for every language and kind (every character of the sample is in each vocabulary; WordPiece words
#   up to 1000 chars, so Thai runs of 104-110 chars are no longer [UNK]); <= 0.001 allows a stray character.
# - zh tokens per char: measured wordpiece 0.99 (one token per ideograph, BERT's isolation), bpe 1.04, unigram
#   0.71. Below 0.5 would mean whole phrases memorised as tokens, above 1.3 bytes of characters left unmerged.
# - longest CJK token: wordpiece never more than one ideograph per token (kana runs up to 4 chars measured);
#   bpe 7 chars measured ("工业和信息化部", a ministry's name) -> 8; unigram 10 ("美方应当采取更多行动", a phrase
#   that recurs in one article; SentencePiece's own cap is 16) -> 12, and few long pieces: 3 of 919 CJK pieces
#   longer than 8 -> at most 1%.
# - byte-level BPE on CJK: 0.99 tokens per CJK character measured; a byte explosion would be up to 3 -> 1.5.
# - English tokens per word: 1.63 (wordpiece), 1.64 (bpe), 1.71 (unigram) -> between 1.2 and 2.2.
@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_sane_multilingual_fertility(texts, tokenizers, kind):
    tok = tokenizers[kind]
    table = fertility(tok, texts)
    assert set(table) == {"ar", "en", "es", "ja", "lv", "my", "th", "zh"}
    for lang, row in table.items():
        assert row["unk_rate"] <= 0.001, (lang, row)
        assert (row["tokens_per_word"] is None) == (lang in ("ja", "my", "th", "zh")), lang
    assert 0.5 <= table["zh"]["tokens_per_char"] <= 1.3
    assert 1.2 <= table["en"]["tokens_per_word"] <= 2.2
    lengths = _cjk_lengths(tok)
    if kind == "wordpiece":
        assert max(len(_IDEOGRAPH.findall(tok.decode([i]))) for i in range(tok.get_vocab_size())) == 1
    elif kind == "bpe":
        assert max(lengths) <= 8
        cjk = "".join(t for lang in ("zh", "ja") for t in texts[lang])
        runs = _CJK_RUN.findall(cjk)
        tokens = sum(len(tok.encode(r, add_special_tokens=False).ids) for r in runs)
        assert tokens / sum(map(len, runs)) <= 1.5
    else:
        pieces = [n for n in lengths if n]
        assert max(pieces) <= 12 and sum(n > 8 for n in pieces) <= 0.01 * len(pieces)


def test_first_chars_bounds_the_sample_without_half_words():
    texts = ["alpha beta", "gamma delta", "epsilon"]
    assert first_chars(texts, 100) == texts
    assert first_chars(texts, 10) == ["alpha beta"]  # exactly full: nothing of the next text
    assert first_chars(texts, 18) == ["alpha beta", "gamma"]  # "gamma de" would split "delta"
    assert first_chars(texts, 16) == ["alpha beta", "gamma "]  # the cut falls on a space
    assert first_chars(["一二三四五六"], 4) == ["一二三四"]  # no spaces: cut at the character
    assert sum(map(len, first_chars(texts * 1000, 5000))) <= 5000
