"""preprocessing.tokenizer_sample: language budgets q_i ~ p_i^alpha, documents chosen by stable hash, independent
of input order; on the real newspaper4k paragraphs (one document per paragraph)."""

import random
from collections import Counter

import pytest

from preprocessing.language_sampling import sampling_probabilities
from preprocessing.tokenizer_sample import plan_sample, training_sample

from .news_texts import NEWS_ARTICLE_LANGS, news_paragraphs


def _docs() -> dict[str, list[str]]:
    return {lang: news_paragraphs(lang) for lang in sorted(set(NEWS_ARTICLE_LANGS.values()))}


def _chars_by_lang(sample: list[str], docs: dict[str, list[str]]) -> Counter:
    lang_of = {text: lang for lang, texts in docs.items() for text in texts}
    out: Counter = Counter()
    for text in sample:
        out[lang_of[text]] += len(text)
    return out


def test_alpha_one_at_corpus_size_is_the_corpus_once():
    docs = _docs()
    sample = training_sample(docs, max_chars=None, alpha=1.0, seed=3)
    assert Counter(sample) == Counter(t for texts in docs.values() for t in texts)


def test_budgets_follow_smoothed_shares_and_small_languages_repeat():
    docs = _docs()
    available = {lang: sum(map(len, texts)) for lang, texts in docs.items()}
    budget = 20_000
    sample = training_sample(docs, max_chars=budget, alpha=0.5, seed=0)
    got = _chars_by_lang(sample, docs)
    q = sampling_probabilities(available, 0.5)
    longest = {lang: max(map(len, texts)) for lang, texts in docs.items()}
    for lang in docs:
        # the document that crosses the budget is included: at most one document over, never under
        assert q[lang] * budget - 1e-6 <= got[lang] <= q[lang] * budget + longest[lang], lang
    # English is 82% of the characters and gets 46% of the sample; Latvian (2%) gets 6%
    assert got["en"] / budget < 0.6 * available["en"] / sum(available.values())
    assert got["lv"] > available["lv"]  # repeated: alpha lifted it above its own size
    plan = plan_sample(((lang, t, len(t)) for lang, texts in docs.items() for t in texts), budget, 0.5, 0)
    assert plan.full_copies["lv"] >= 1 and plan.full_copies["en"] == 0


def test_independent_of_input_order_and_dependent_on_seed():
    docs = _docs()
    pairs = [(lang, t) for lang, texts in docs.items() for t in texts]
    shuffled = pairs[:]
    random.Random(7).shuffle(shuffled)
    a = training_sample(pairs, max_chars=15_000, alpha=0.3, seed=1)
    assert a == training_sample(shuffled, max_chars=15_000, alpha=0.3, seed=1)
    assert a == training_sample(docs, max_chars=15_000, alpha=0.3, seed=1)
    assert a != training_sample(docs, max_chars=15_000, alpha=0.3, seed=2)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="nothing to draw from"):
        training_sample({"en": [""]}, max_chars=10)
    with pytest.raises(ValueError, match="not in the planned corpus"):
        plan_sample([("en", "a", 3)], None, 0.5, 0).copies("fr", "a")
