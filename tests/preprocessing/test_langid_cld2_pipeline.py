"""`corpus.langid.backend: cld2` end to end: UDHR articles in six languages as JSONL documents without a language,
detected by CLD2 in the documents stage; every document gets its declaration's language in the manifest's counts,
and a second run writes byte-identical files."""

from __future__ import annotations

import json
from pathlib import Path

from bertfactory.io import sha256_file
from bertfactory.samples import sample_path
from preprocessing.config import CorpusConfig, PreprocessConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.sources.parallel_udhr import read_declaration

DECLARATIONS = {"eng": "en", "fra": "fr", "deu_1996": "de", "spa": "es", "rus": "ru", "arb": "ar"}
PER_LANGUAGE = 6


def _tree(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): sha256_file(p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in ("stats.json", "manifest.json")}


def _run(inputs: Path, run_dir: Path) -> dict:
    corpus = CorpusConfig(inputs=[str(inputs)], format="jsonl", lang="auto", min_doc_chars=20, min_doc_sentences=1,
                          langid={"backend": "cld2"}, dedup={"exact": False, "near": False},
                          # the quality filters off: the UDHR's repeated phrasing trips the repetition rules
                          filters={"min_words": None, "stop_words": None, "top_ngram_char_fraction": {},
                                   "duplicate_ngram_char_fraction": {}})
    cfg = PreprocessConfig.model_validate({
        "seed": 3, "heldout_fraction": 0.0, "runner": {"preset": "in_process"},
        "tokenizer": {"kind": "bpe", "vocab_size": 400, "lowercase": False, "min_frequency": 2},
        "masking": {"dynamic": True, "max_predictions_per_seq": 8},
        "instances": {"format": "doc-sentences", "max_seq_len": 48},
        "shards": {"train_shards": 1, "heldout_shards": 1}})
    return run_preprocess(corpus, cfg, run_dir)


def test_cld2_backend_labels_every_document_and_repeats_byte_for_byte(tmp_path):
    path = tmp_path / "udhr.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for stem in DECLARATIONS:
            declaration = read_declaration(sample_path("udhr", f"{stem}.html"), stem)
            long_segments = [key for key, text in declaration.segments.items() if len(text) >= 200]
            for key in long_segments[:PER_LANGUAGE]:
                out.write(json.dumps({"id": f"{stem} {key}", "text": declaration.segments[key]}) + "\n")
    first = _run(path, tmp_path / "a")
    languages = {code: info["docs"] for code, info in first["counts"]["languages"].items()}
    assert languages == {code: PER_LANGUAGE for code in DECLARATIONS.values()}, (languages, first["counts"])
    second = _run(path, tmp_path / "b")
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") != {}
    assert second["counts"] == first["counts"]
