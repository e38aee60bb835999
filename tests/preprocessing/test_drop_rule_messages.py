"""Issue 34 item 3: a drop reason that more than one setting can cause (too_short: corpus.filters.min_chars /
min_words, corpus.min_doc_chars / min_doc_sentences; too_long; boilerplate; the repetition rules) is reported
with the setting and value that applied, counted in the manifest's counts.docs_dropped_rules, and the "no
training documents left" error says which rule to relax for a small input."""

from __future__ import annotations

import json
import random

from flows.cli import main
from preprocessing.document_results import drop_rules, empty_corpus_error
from preprocessing.config import CorpusConfig
from preprocessing.filters import FiltersConfig, clean_document


def _short_documents(n: int = 61) -> list[str]:
    """n documents of 45 words in three sentences, ~230-240 characters each: long enough for corpus.min_doc_chars=200
    and min_doc_sentences=2, too few words for Gopher's min_words=50."""
    rng = random.Random(1)
    words = "the and of to river town market stone bridge farmer walked slowly with his dog near old mill green hill"
    words = words.split()
    docs = []
    for i in range(n):
        docs.append(" ".join(" ".join([f"Day{i}s{s}"] + [rng.choice(words) for _ in range(14)]).capitalize() + "."
                             for s in range(3)))
    return docs


def test_short_documents_name_gophers_min_words_not_min_doc_chars(tmp_path, capsys):
    docs = _short_documents()
    assert all(len(d) >= 200 and len(d.split()) == 45 for d in docs)
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    code = main(["preprocess", "--input", str(path), "--format", "jsonl", "--out", str(tmp_path / "run"),
                 "--no-prefect", "--set", "preprocess.runner.preset=in_process"])
    err = capsys.readouterr().err
    assert code == 2, err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert "no training documents left" in line
    assert "dropped too_short (fewer words than corpus.filters.min_words=50, Gopher): 61" in line
    assert "min_doc_chars" not in line and "min_doc_sentences" not in line  # not the rule that applied
    assert "--set corpus.filters.min_words=N with N below 50" in line  # how to relax it for a small input
    assert "Traceback" not in err and not (tmp_path / "run" / "shards" / "manifest.json").exists()


def test_each_rule_of_a_shared_reason_is_named_with_its_value():
    cfg = FiltersConfig(stop_words=None)
    text = "A quiet sentence about the river and the town near the old stone bridge today."

    def rule(paragraphs, filters=cfg):
        _, reason = clean_document(paragraphs, "en", filters)
        return str(reason), getattr(reason, "rule", None)

    assert rule([text]) == ("too_short", "corpus.filters.min_words=50")
    assert rule([text], cfg.model_copy(update={"min_words": None, "min_chars": 500})) == \
        ("too_short", "corpus.filters.min_chars=500")
    assert rule([text * 20], cfg.model_copy(update={"min_words": 1, "max_words": 100})) == \
        ("too_long", "corpus.filters.max_words=100")
    assert rule(["lorem ipsum " + text * 10]) == ("boilerplate", "corpus.filters.drop_lorem_ipsum=true")
    # the reason still equals its plain string: counts and older code compare it as before
    _, reason = clean_document([text], "en", cfg)
    assert reason == "too_short" and {reason: 1} == {"too_short": 1}


def test_the_empty_corpus_error_lists_every_rule_of_a_reason_with_its_count():
    from collections import Counter

    outcomes = Counter({"read": 5, "dropped:too_short": 5, "rule:too_short:corpus.filters.min_words=50": 3,
                        "rule:too_short:corpus.min_doc_sentences=2": 2})
    counts = {"docs_read": 5, "docs_kept": 0, "docs": {"train": 0}, "docs_dropped": {"too_short": 5},
              "quarantined": {}, "duplicates_removed": {}, "docs_dropped_rules": drop_rules(outcomes)}
    message = str(empty_corpus_error(["a.jsonl"], CorpusConfig(inputs=["a.jsonl"]), counts))
    assert ("dropped too_short (fewer words than corpus.filters.min_words=50, Gopher: 3; fewer sentences than "
            "corpus.min_doc_sentences=2: 2): 5") in message
    assert "--set corpus.filters.min_words=N with N below 50" in message
