"""A given tokenizer that fits most of the corpus but not one of its languages: the check before the job measures
the corpus as a blend (MiniLM's English WordPiece: 1.6 % unknown on English news + a Burmese article, it passes)
while 92 % of the Burmese text becomes [UNK]. The manifest's per-language fertility table measured that and nobody
said it; now each such language is one warning naming the rate and the fix."""

from __future__ import annotations

import json
import logging

from bertfactory.samples import resolve_input
from flows.cli import main
from preprocessing.config import TokenizerConfig
from preprocessing.tokenizer_check import warn_unknown_languages

NEWS = ("cnn_001", "cnn_002", "time_001", "wired_001", "burmese_article")


def test_a_language_the_given_tokenizer_cannot_read_is_warned_after_the_job(tmp_path, capsys, caplog):
    inputs = [f"sample:newspaper4k/txt/{name}.txt" for name in NEWS]
    with caplog.at_level(logging.INFO, logger="preprocessing"):
        code = main(["preprocess", "--no-prefect", "--input", *inputs, "--format", "text", "--lang", "auto",
                     "--tokenizer", str(resolve_input("sample:minilm/tokenizer.json")), "--out", str(tmp_path / "run"),
                     "--set", "preprocess.runner.preset=in_process", "--set", "preprocess.instances.dupe_factor=1",
                     "--set", "corpus.min_doc_chars=40", "--set", "corpus.min_doc_sentences=1",
                     "--set", "corpus.filters={min_words: null, stop_words: null}"])
    assert code == 0, capsys.readouterr().err
    fertility = json.loads((tmp_path / "run" / "shards" / "manifest.json").read_text())["counts"]["fertility"]
    assert fertility["my"]["unk_rate"] > 0.5 and fertility["en"]["unk_rate"] < 0.05
    assert "unknown tokens on a" in caplog.text  # the blend passed the check before the job
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "unknown (the" in r.getMessage()]
    assert len(warned) == 1 and "of the tokens of the 'my' documents are unknown" in warned[0], warned
    assert warned[0].endswith("to cover 'my', train one on this corpus (--vocab-size N instead of --tokenizer)")


def test_only_languages_above_the_limit_are_said_and_a_trained_tokenizer_gets_its_own_fix():
    fertility = {"en": {"tokens": 1000, "texts": 10, "unk_rate": 0.01},
                 "th": {"tokens": 400, "texts": 4, "unk_rate": 0.3},
                 "und": {"tokens": 20, "texts": 1, "unk_rate": 0.5}}  # digits and symbols: no language to cover
    said = warn_unknown_languages(fertility, TokenizerConfig(max_unk_rate=0.05), None)
    assert said == ["tokenizer (trained on this corpus): 30.0% of the tokens of the 'th' documents are unknown (the "
                    "fertility sample: 400 tokens of 4 texts), above preprocess.tokenizer.max_unk_rate=0.05: its text "
                    "reaches the model as unknown tokens; to cover 'th', raise preprocess.tokenizer.limit_alphabet "
                    "(the characters it keeps) or vocab_size"]
    assert warn_unknown_languages(fertility, TokenizerConfig(max_unk_rate=0.5), "t.json") == []


def test_a_corpus_version_is_not_told_to_train_another_tokenizer():
    """A refresh keeps its parent's tokenizer (token ids mean the same in every version): the fix is a new line."""
    said = warn_unknown_languages({"th": {"tokens": 400, "texts": 4, "unk_rate": 0.3}}, TokenizerConfig(),
                                  "runs/r/corpora/tokenizer/tokenizer.json", inherited=True)
    assert len(said) == 1 and said[0].endswith("to cover 'th', start a new corpus line without --parent (a version "
                                               "keeps its parent's tokenizer, so that token ids mean the same in every "
                                               "version)")
