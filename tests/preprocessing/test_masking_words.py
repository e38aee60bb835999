"""Word boundaries for every tokenizer kind (WordPiece `##` continuations, byte-level BPE `Ġ` and Unigram `▁` word
starts) and the whole-word policy: over thousands of masked rows no word is ever partly masked, the budget holds,
and the 80/10/10 choice is made per token."""

import random

import pytest

from preprocessing.config import MaskingConfig, TokenizerConfig
from preprocessing.masking import Masker
from preprocessing.masking_vocab import word_continuation_ids
from preprocessing.tokenizer import special_ids, train_tokenizer

from .news_texts import news_paragraphs

PARAGRAPHS = news_paragraphs("en")


@pytest.fixture(scope="module", params=["wordpiece", "bpe", "unigram"])
def tokenizer(request):
    cfg = TokenizerConfig(kind=request.param, vocab_size=1500, min_frequency=2, lowercase=request.param == "wordpiece")
    return request.param, train_tokenizer(lambda: iter(PARAGRAPHS), cfg)


def _words_of(masker: Masker, ids: list[int]) -> list[list[int]]:
    return [word for run in masker.candidates(ids).word_runs() for word in run]


def test_word_runs_follow_the_text_words(tokenizer):
    kind, tok = tokenizer
    continuation = word_continuation_ids(tok.get_vocab())
    assert continuation, kind
    specials = special_ids(tok, kind)
    masker = Masker(MaskingConfig(policy="whole-word"), 1, tok.get_vocab_size(), specials["mask"],
                    frozenset(specials.values()), continuation)
    checked = 0
    for paragraph in PARAGRAPHS[:80]:
        words = paragraph.split()
        plain = [w for w in words if w.isalpha()]  # words without punctuation map to whole token words
        enc = tok.encode(paragraph, add_special_tokens=False)
        groups = _words_of(masker, enc.ids)
        # every token word decodes to a piece of text without inner spaces, and the words cover all tokens
        assert sorted(p for g in groups for p in g) == list(range(len(enc.ids)))
        texts = {tok.decode([enc.ids[p] for p in g]).strip().lower() for g in groups}
        if kind != "bpe":  # BPE glues punctuation to the word before it; the others split it off
            checked += sum(w.lower() in texts for w in plain)
            assert sum(w.lower() in texts for w in plain) >= 0.9 * len(plain), (kind, paragraph[:80])
    assert kind == "bpe" or checked > 500


def test_whole_word_masking_statistics(tokenizer):
    kind, tok = tokenizer
    specials = special_ids(tok, kind)
    cfg = MaskingConfig(policy="whole-word", variants=1, max_predictions_per_seq=40)
    masker = Masker(cfg, 7, tok.get_vocab_size(), specials["mask"], frozenset(specials.values()),
                    word_continuation_ids(tok.get_vocab()))
    rows = []
    for paragraph in PARAGRAPHS:
        ids = tok.encode(paragraph, add_special_tokens=False).ids[:100]
        if len(ids) >= 20:
            rows.append([specials["cls"], *ids, specials["sep"]])
    chosen = masked = kept = randomised = budget = 0
    for n, ids in enumerate(rows * 6):
        positions, tokens = masker.mask(ids, random.Random(n))
        taken = set(positions)
        for word in _words_of(masker, ids):  # whole-word integrity: all of a word or nothing
            assert taken.isdisjoint(word) or taken.issuperset(word), (kind, word, positions)
        assert len(positions) <= masker.num_to_predict(len(ids))
        chosen += len(positions)
        budget += masker.num_to_predict(len(ids))
        for p, t in zip(positions, tokens):
            masked += t == specials["mask"]
            kept += t == ids[p]
            randomised += t != specials["mask"] and t != ids[p]
    assert chosen > 5000
    assert chosen >= 0.9 * budget  # words rarely leave the budget unspent by more than a word
    assert abs(masked / chosen - 0.8) < 0.02 and abs(kept / chosen - 0.1) < 0.02 and abs(randomised / chosen - 0.1) < 0.02
