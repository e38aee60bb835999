"""The one preprocessing pipeline over every input format and at scale: JSONL of real multilingual news (language
detected, counted, fertility per language), WARC of real news pages, a multistream dump (chunks = the
sequential read, byte for byte), shards of equal rows, language-smoothed sampling, parallel corpora refused
without tlm-pairs."""

import bz2
import json

import pyarrow as pa
import pytest

from bertfactory.errors import ConfigError
from bertfactory.samples import sample_path
from preprocessing.config import CorpusConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.sources.parallel_udhr import read_declaration

from .news_texts import NEWS_ARTICLE_LANGS
from .sources.test_warc import html_response, write_warc
from .sources.test_wikipedia_multistream import write_multistream


def _rows(shard_dir, split="train"):
    return [pa.ipc.open_stream(p.read_bytes()).read_all().num_rows if p.stat().st_size else 0
            for p in sorted((shard_dir / split).glob("part-*.arrow"))]


def test_jsonl_news_languages_detected_counted_and_fertility(tmp_path, wiki):
    path = tmp_path / "news.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for article in sorted(NEWS_ARTICLE_LANGS):
            text = sample_path("newspaper4k", f"txt/{article}.txt").read_text(encoding="utf-8")
            f.write(json.dumps({"id": article, "text": text, "url": f"https://example.org/{article}"}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"id": "no text"}) + "\n")
    corpus = CorpusConfig(inputs=[str(path)], format="jsonl", min_doc_chars=50)
    cfg = wiki.config(preset="in_process").model_copy(update={"heldout_fraction": 0.0})
    manifest = run_preprocess(corpus, cfg, tmp_path / "run")
    counts = manifest["counts"]
    assert counts["docs_read"] == len(NEWS_ARTICLE_LANGS) + 2
    assert counts["quarantined"] == {"invalid_json": 1, "missing_text": 1}
    assert counts["docs_read"] == counts["docs_kept"] + sum(counts["docs_dropped"].values()) + \
        sum(counts["quarantined"].values()) + sum(counts["duplicates_removed"].values())
    detected = set(counts["languages"])
    kept_langs = {"en", "zh", "th", "ar", "es", "lv"}
    assert kept_langs <= detected, detected
    assert set(counts["fertility"]) == detected
    zh = counts["fertility"]["zh"]
    assert zh["tokens"] > 0 and 0 < zh["tokens_per_char"] <= 1.5
    assert counts["sources"][0]["docs_kept"] == counts["docs_kept"]


def test_warc_of_real_news_pages(tmp_path, wiki):
    records = []
    for i, article in enumerate(["cnn_001", "time_001", "wired_001", "chinese_article", "thai_article"]):
        html = sample_path("newspaper4k", f"html/{article}.html").read_bytes()
        records.append(html_response(f"https://news.example/{article}", html))
    records.append(html_response("https://news.example/missing", b"<html>gone</html>", status="404 Not Found"))
    warc = write_warc(tmp_path / "news.warc.gz", records)
    corpus = CorpusConfig(inputs=[str(warc)], format="warc", min_doc_chars=50)
    counts = run_preprocess(corpus, wiki.config(preset="in_process"), tmp_path / "run")["counts"]
    assert counts["docs_read"] == 6 and counts["docs_dropped"].get("http_status") == 1
    assert counts["docs_kept"] >= 4 and {"en", "zh"} <= set(counts["languages"])


def test_multistream_chunks_give_the_shards_of_a_sequential_read(tmp_path, wiki):
    xml = bz2.decompress(sample_path("enwiki").read_bytes()).decode("utf-8")
    dump, _index = write_multistream(tmp_path, xml, pages_per_stream=10)
    cfg = wiki.config()
    base = CorpusConfig(inputs=[str(dump)], lang="en")
    chunked = run_preprocess(base.model_copy(update={"multistream_chunk_streams": 3}), cfg, tmp_path / "chunked")
    whole = run_preprocess(base.model_copy(update={"multistream_chunk_streams": 0}), cfg, tmp_path / "whole")
    assert chunked["counts"]["docs_kept"] > 80
    assert chunked["splits"] == whole["splits"]  # every shard's sha256
    assert chunked["counts"] == whole["counts"]


def test_shards_hold_equal_rows_and_counts_are_multiples_of_the_world_size(tmp_path, wiki):
    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.shards = cfg.shards.model_copy(update={"train_shards": 6, "heldout_shards": 2, "world_size": 2})
    run_preprocess(wiki.corpus(wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())), cfg, tmp_path / "run")
    rows = _rows(tmp_path / "run/shards")
    assert len(rows) == 6 and max(rows) - min(rows) <= 1 and sum(rows) > 6
    with pytest.raises(ValueError, match=r"shards.train_shards=5 is not a multiple of shards.world_size=2; use 6"):
        cfg.shards.model_validate({"train_shards": 5, "heldout_shards": 2, "world_size": 2})


def _udhr_jsonl(path, plan: dict[str, int]):
    """One JSONL document per UDHR article: `plan` = {declaration code: articles taken}."""
    with open(path, "w", encoding="utf-8") as f:
        for code, n in plan.items():
            d = read_declaration(sample_path("udhr", f"{code}.html"), code)
            for key, text in list(d.segments.items())[:n]:
                f.write(json.dumps({"id": f"{code}/{key}", "lang": d.lang, "text": text}) + "\n")


def test_language_sampling_smooths_the_mix(tmp_path, wiki):
    path = tmp_path / "udhr.jsonl"
    _udhr_jsonl(path, {"eng": 31, "fra": 8, "deu_1996": 8})
    corpus = CorpusConfig(inputs=[str(path)], format="jsonl", min_doc_chars=20, min_doc_sentences=1,
                          filters={"min_words": None, "stop_words": None})
    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.heldout_fraction = 0.0
    plain = run_preprocess(corpus, cfg, tmp_path / "plain")["counts"]
    assert "language_sampling" not in plain
    cfg.language_sampling = cfg.language_sampling.model_copy(update={"enabled": True, "alpha": 0.3, "min_docs": 5})
    smoothed = run_preprocess(corpus, cfg, tmp_path / "smoothed")["counts"]
    table = smoothed["language_sampling"]["languages"]
    assert set(table) == {"en", "fr", "de"}
    assert table["en"]["rate"] < 1 < table["fr"]["rate"] and table["de"]["rate"] > 1
    assert table["fr"]["copies"] > table["fr"]["docs"] and table["en"]["copies"] < table["en"]["docs"]
    chars = {lang: info["train_chars"] for lang, info in smoothed["languages"].items()}
    before = chars["en"] / sum(chars.values())
    after = table["en"]["copies"] * chars["en"] / table["en"]["docs"] / sum(
        table[l]["copies"] * chars[l] / table[l]["docs"] for l in table)
    assert after < before - 0.1  # English gives up share to the smaller languages


def test_a_parallel_corpus_needs_tlm_pairs(tmp_path, wiki):
    tsv = tmp_path / "pairs.en-fr.tsv"
    tsv.write_text("hello world\tbonjour le monde\n")
    corpus = CorpusConfig(inputs=[str(tsv)], format="parallel")
    with pytest.raises(ConfigError, match="tlm-pairs"):
        run_preprocess(corpus, wiki.config(preset="in_process"), tmp_path / "run")
