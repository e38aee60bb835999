"""The newspaper4k gold article texts grouped by language (real news: ar, my, zh, ja, th, es, lv and English),
for the multilingual sentence-splitting, tokenizer and fertility tests. Paragraphs are the non-empty lines."""

from __future__ import annotations

from bertfactory.samples import sample_path

# article -> language (read off the texts; yna_co_kr is Yonhap's English service)
NEWS_ARTICLE_LANGS = {
    "arabic_article": "ar", "burmese_article": "my", "chinese_article": "zh", "chinese_article_001": "zh",
    "chinese_article_002": "zh", "japanese_article": "ja", "japanese_article2": "ja", "thai_article": "th",
    "spanish_article": "es", "latvian_article": "lv", "cnn_001": "en", "cnn_002": "en", "cnn_article": "en",
    "time_001": "en", "wired_001": "en", "yna_co_kr": "en", "fox13now_001": "en",
}
NON_LATIN = ("ar", "my", "zh", "ja", "th")


def news_paragraphs(lang: str) -> list[str]:
    """All paragraphs of the articles in `lang`, article by article in name order."""
    paragraphs = []
    for article in sorted(a for a, code in NEWS_ARTICLE_LANGS.items() if code == lang):
        text = sample_path("newspaper4k", f"txt/{article}.txt").read_text(encoding="utf-8")
        paragraphs += [line.strip() for line in text.splitlines() if line.strip()]
    return paragraphs


def news_texts_by_lang() -> dict[str, list[str]]:
    """{lang: [article text, ...]} for every language of the sample (articles in name order)."""
    out: dict[str, list[str]] = {}
    for article in sorted(NEWS_ARTICLE_LANGS):
        text = sample_path("newspaper4k", f"txt/{article}.txt").read_text(encoding="utf-8")
        out.setdefault(NEWS_ARTICLE_LANGS[article], []).append(text)
    return out
