"""preprocessing.tokenizer_sample: language budgets q_i ~ p_i^alpha, documents chosen by stable hash, independent
of input order; on the real newspaper4k paragraphs (one document per paragraph)."""

import random
from collections import Counter

import pytest

from preprocessing.hashing import hash64
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


def test_the_whole_corpus_budget_takes_every_document_once():
    docs = _docs()
    for alpha in (1.0, 0.5, 0.0):
        sample = training_sample(docs, max_chars=None, alpha=alpha, seed=3)
        assert Counter(sample) == Counter(t for texts in docs.values() for t in texts)


def test_budgets_follow_smoothed_shares_capped_at_each_language_size():
    docs = _docs()
    available = {lang: sum(map(len, texts)) for lang, texts in docs.items()}
    budget = 20_000
    keyed = [(lang, f"{hash64('text', t):016x}", len(t)) for lang, texts in docs.items() for t in texts]
    plan = plan_sample(keyed, budget, 0.5, 0)
    sample = training_sample(docs, max_chars=budget, alpha=0.5, seed=0)
    got = _chars_by_lang(sample, docs)
    assert dict(got) == plan.chars
    assert sum(plan.budgets.values()) == pytest.approx(budget)
    # measured: ja, lv, my, th want more than they have at alpha 0.5 and are taken whole (never repeated)
    capped = sorted(lang for lang in docs if plan.budgets[lang] == available[lang])
    uncapped = sorted(set(docs) - set(capped))
    assert capped == ["ja", "lv", "my", "th"] and uncapped == ["ar", "en", "es", "zh"]
    assert all(got[lang] == available[lang] for lang in capped)
    for lang in uncapped:  # the document that crosses the budget is included: at most one over, never under
        assert plan.budgets[lang] <= got[lang] <= plan.budgets[lang] + max(map(len, docs[lang]))
    # among the uncapped languages b_i is proportional to n_i^alpha (the capped ones' leftovers shared by q)
    ratios = [plan.budgets[lang] / available[lang] ** 0.5 for lang in uncapped]
    assert max(ratios) == pytest.approx(min(ratios))
    assert got["en"] / budget < 0.6 * available["en"] / sum(available.values())  # 47% of the sample vs 82%


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
