"""Fixtures for the preprocessing tests: a tiny MediaWiki XML export written by the test itself (with every kind
of page the stage must handle, so the expected counts are known exactly) and a small preprocess config."""

from __future__ import annotations

import bz2
import random
from pathlib import Path
from xml.sax.saxutils import escape

from types import SimpleNamespace

import pytest

from preprocessing.config import CorpusConfig, PreprocessConfig

WORDS = (
    "river mountain city people history language music science king war water forest island country village "
    "century church school market bridge road castle garden train letter paper stone night summer winter "
    "writer painter farmer sailor doctor teacher soldier merchant builder singer"
).split()
VERBS = "built wrote found crossed visited painted studied opened sold carried described named".split()

HEADER = (
    '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
    "  <siteinfo><sitename>Testwiki</sitename><namespaces><namespace key=\"0\" /></namespaces></siteinfo>\n"
)


def page_xml(title: str, text: str, ns: int = 0, page_id: int | None = 1, redirect: str | None = None) -> str:
    parts = [f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n"]
    if page_id is not None:
        parts.append(f"    <id>{page_id}</id>\n")
    if redirect:
        parts.append(f'    <redirect title="{escape(redirect)}" />\n')
    parts.append(f'    <revision><id>{(page_id or 0) + 1000}</id><model>wikitext</model>'
                 f'<text xml:space="preserve">{escape(text)}</text></revision>\n  </page>\n')
    return "".join(parts)


def article_text(rng: random.Random, paragraphs: int = 3, sentences: int = 5) -> str:
    out = ["{{Infobox thing|name=Example|size=12}}"]
    for p in range(paragraphs):
        sents = []
        for s in range(sentences):
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 11))]
            words.insert(1, rng.choice(VERBS))
            if s == 1:
                words[2] = f"[[{words[2].title()} article|{words[2]}]]"
            if s == 2:
                words.append("<ref>{{cite web|title=Source}}</ref>")
            sents.append(" ".join(words).capitalize() + ".")
        out.append(" ".join(sents))
        if p == 0:
            out.append("[[File:Picture.jpg|thumb|A caption that must go]]")
            out.append('{| class="wikitable"\n|-\n| cell one || cell two\n|}')
    out.append("== References ==\n{{reflist}}\n* A reference line that must go")
    out.append("[[Category:Things]]")
    return "\n\n".join(out)


# What the standard dump holds, and so what the stage must count.
N_ARTICLES = 30
EXPECTED = {
    "docs_read": N_ARTICLES + 3 + 2 + 2 + 1 + 1 + 1,
    "docs_kept": N_ARTICLES,
    "docs_dropped": {"empty": 1, "namespace": 2, "redirect": 3, "too_short": 2},
    "quarantined": {"duplicate_key": 1, "missing_id": 1},
}


def standard_pages() -> list[str]:
    rng = random.Random(7)
    pages = [page_xml(f"Article {i}", article_text(rng), page_id=100 + i) for i in range(N_ARTICLES)]
    pages.insert(3, page_xml("Redirect A", "#REDIRECT [[Article 1]]", page_id=1, redirect="Article 1"))
    pages.insert(7, page_xml("Redirect B", "#REDIRECT [[Article 2]]", page_id=2, redirect="Article 2"))
    pages.append(page_xml("Redirect C", "#REDIRECT [[Article 3]]", page_id=3, redirect="Article 3"))
    pages.append(page_xml("Talk:Article 1", article_text(rng), ns=1, page_id=4))
    pages.append(page_xml("Talk:Article 2", article_text(rng), ns=1, page_id=5))
    pages.append(page_xml("Stub one", "This stub is much too short to keep.", page_id=6))
    pages.append(page_xml("Stub two", "{{stub}} A few words only. Not enough.", page_id=7))
    pages.append(page_xml("Only templates", "{{Infobox|a=b}}\n\n[[Category:Empty]]", page_id=8))
    pages.append(page_xml("No id", article_text(rng), page_id=None))
    pages.append(page_xml("Article 0", article_text(rng), page_id=9))  # same title again: quarantined
    return pages


def write_dump(path: Path, pages: list[str], compress: bool = True) -> Path:
    data = (HEADER + "".join(pages) + "</mediawiki>\n").encode("utf-8")
    path.write_bytes(bz2.compress(data) if compress else data)
    return path


@pytest.fixture
def no_prism(monkeypatch):
    """Fail the test if Beam tries to download or start a Prism binary (the default DirectRunner path)."""
    from apache_beam.runners.portability import prism_runner

    def refuse(*args, **kwargs):
        raise AssertionError("Beam tried to download or start Prism")

    for name in ("_download_to_local_path", "local_bin", "_prepare_executable", "__init__"):
        monkeypatch.setattr(prism_runner.PrismJobServer, name, refuse)
    monkeypatch.setattr(prism_runner.PrismRunner, "default_job_server", refuse)


@pytest.fixture
def tiny_dump(tmp_path: Path) -> Path:
    return write_dump(tmp_path / "tiny-pages-articles.xml.bz2", standard_pages())


def tiny_config(**runner) -> PreprocessConfig:
    return PreprocessConfig.model_validate({
        "seed": 3,
        "heldout_fraction": 0.2,
        # in_process_below_mib 0: the tiny dump would otherwise run in this process, and the tests that compare
        # worker counts or kill workers need the local preset's worker subprocesses
        "runner": {"preset": "local", "num_workers": 2, "in_process_below_mib": 0, **runner},
        "tokenizer": {"vocab_size": 200, "min_frequency": 2, "limit_alphabet": 40},
        "instances": {"max_seq_len": 32, "dupe_factor": 2, "docs_per_bucket": 8},
        "masking": {"variants": 3},
        "shards": {"train_shards": 2, "heldout_shards": 1, "batch_rows": 50},
    })


def tiny_corpus(path: Path) -> CorpusConfig:
    # The synthetic articles are English nouns and verbs without function words: Gopher's stop-word rule would
    # drop them all (it is tested on its own in test_filters.py); the language is given, not detected.
    return CorpusConfig(inputs=[str(path)], min_doc_chars=100, min_doc_sentences=2, lang="en",
                        filters={"stop_words": None})


@pytest.fixture
def wiki() -> SimpleNamespace:
    """The helpers above, for tests (conftest modules cannot be imported by name under importlib mode)."""
    return SimpleNamespace(page_xml=page_xml, article_text=article_text, standard_pages=standard_pages,
                           write_dump=write_dump, config=tiny_config, corpus=tiny_corpus, expected=EXPECTED,
                           header=HEADER)
