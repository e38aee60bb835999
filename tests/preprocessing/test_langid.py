"""Language identification: accuracy on real multilingual text (UDHR articles of 12 languages, newspaper4k's gold
news articles), agreement with py3langid's own classify, the candidate restriction, max_chars, batching."""

from __future__ import annotations

import pytest

from bertfactory.errors import ConfigError
from bertfactory.samples import sample_dir, sample_path
from preprocessing.langcodes import normalise_lang_code
from preprocessing.langid import LangIdConfig, LanguageIdentifier
from preprocessing.sources.parallel import ParallelOptions, iter_records

UDHR = {"eng": "en", "fra": "fr", "deu_1996": "de", "rus": "ru", "cmn_hans": "zh", "jpn": "ja", "kor": "ko",
        "arb": "ar", "hin": "hi", "tha": "th", "spa": "es", "mya": "my"}
# newspaper4k gold texts: the language by page (yna_co_kr is Yonhap's English service)
NEWS_LANG = {"arabic_article": "ar", "burmese_article": "my", "chinese_article": "zh", "chinese_article_001": "zh",
             "chinese_article_002": "zh", "japanese_article": "ja", "japanese_article2": "ja",
             "latvian_article": "lv", "spanish_article": "es", "thai_article": "th"}


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier(LangIdConfig())


@pytest.fixture(scope="module")
def udhr_segments() -> list[tuple[str, str]]:
    """(text, language) for the preamble and 30 articles of each of the 12 declarations."""
    sample_path("udhr", "eng.html")
    segments = []
    for code, lang in UDHR.items():
        # every pair's target side is this declaration (English paired with French as the pivot)
        options = ParallelOptions(pivot="fra" if code == "eng" else "eng")
        segments += [(r.tgt_text, lang) for r in iter_records(sample_dir("udhr") / f"{code}.html", 0, options)]
    return segments


def test_accuracy_on_udhr_articles(identifier, udhr_segments):
    assert len(udhr_segments) == 12 * 31
    detected = identifier.detect_batch([text for text, _ in udhr_segments])
    correct = sum(code == lang for (code, _), (_, lang) in zip(detected, udhr_segments))
    accuracy = correct / len(udhr_segments)
    print(f"\nUDHR segments: {correct}/{len(udhr_segments)} = {accuracy:.4f}")
    assert accuracy >= 0.97
    per_language = {lang: sum(c == lang for (c, _), (_, g) in zip(detected, udhr_segments) if g == lang)
                    for lang in UDHR.values()}
    assert min(per_language.values()) >= 29, per_language  # no language is systematically missed


def test_accuracy_on_news_gold_texts(identifier):
    sample_path("newspaper4k", "txt/cnn_001.txt")
    files = sorted((sample_dir("newspaper4k") / "txt").glob("*.txt"))
    gold = [NEWS_LANG.get(f.stem, "en") for f in files]
    detected = identifier.detect_batch([f.read_text(encoding="utf-8") for f in files])
    correct = sum(code == lang for (code, _), lang in zip(detected, gold))
    print(f"\nnewspaper4k gold texts: {correct}/{len(files)} = {correct / len(files):.4f}")
    assert len(files) == 23 and correct == len(files), [(f.stem, d) for f, d, g in zip(files, detected, gold)
                                                        if d[0] != g]


def test_agrees_with_py3langid_classify(identifier, udhr_segments):
    from py3langid.langid import MODEL_FILE
    from py3langid.langid import LanguageIdentifier as Py3LangId

    reference = Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    texts = [text for text, _ in udhr_segments[::7]]
    for text, (code, p) in zip(texts, identifier.detect_batch(texts)):
        ref_code, ref_p = reference.classify(text[:2000])
        if code != "und":
            assert code == normalise_lang_code(ref_code)
        assert p == pytest.approx(ref_p, abs=1e-4)


def test_batches_do_not_change_answers_and_edge_cases(identifier, udhr_segments):
    texts = [text for text, _ in udhr_segments[::5]]
    batch = identifier.detect_batch(texts)
    assert identifier.detect_batch(texts[::-1]) == batch[::-1]
    assert [identifier.detect(t) for t in texts[:10]] == batch[:10]
    assert identifier.detect("") == ("und", 0.0)
    assert identifier.detect_batch([]) == []
    assert identifier.detect("12 345 678")[0] == "und"


def test_max_chars_looks_only_at_the_start(udhr_segments):
    french = next(t for t, lang in udhr_segments if lang == "fr" and len(t) > 300)
    english = " ".join(t for t, lang in udhr_segments if lang == "en")
    mixed = french[:300] + " " + english
    assert LanguageIdentifier(LangIdConfig(max_chars=300)).detect(mixed)[0] == "fr"
    assert LanguageIdentifier(LangIdConfig(max_chars=20000)).detect(mixed)[0] == "en"


def test_languages_restrict_the_candidates(udhr_segments):
    restricted = LanguageIdentifier(LangIdConfig(languages=["eng", "fra", "de-1996"]))
    assert restricted.codes == ["de", "en", "fr"]
    german = [t for t, lang in udhr_segments if lang == "de"]
    assert {code for code, _ in restricted.detect_batch(german)} == {"de"}
    russian = [t for t, lang in udhr_segments if lang == "ru"]
    assert all(code in ("de", "en", "fr", "und") for code, _ in restricted.detect_batch(russian))
    with pytest.raises(ConfigError, match="xq not known to the py3langid model"):
        LanguageIdentifier(LangIdConfig(languages=["en", "xq"]))
    with pytest.raises(ValueError, match="not a language code"):
        LangIdConfig(languages=["English"])


def test_text_without_letters_is_und_among_few_candidates(udhr_segments):
    """Digits, punctuation and symbols have byte n-grams too: with two candidates the larger share of such text
    went to one of them (`12:30 - 13:45 | 14:00` -> de 0.53, `1,234,567 890 000` -> en 0.59)."""
    for backend in ("py3langid", "cld2"):
        few = LanguageIdentifier(LangIdConfig(languages=["en", "de"], backend=backend))
        numbers = ["12:30 - 13:45 | 14:00", "1,234,567 890 000", "100 200 300 400 500 600 700 800", "12345 678"]
        assert [code for code, _ in few.detect_batch(numbers)] == ["und"] * 4, backend
        # a letter among the numbers is text again
        german = next(t for t, lang in udhr_segments if lang == "de")
        assert few.detect_batch(["2019: " + german, "12345 678"])[0][0] == "de"
