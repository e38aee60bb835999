"""corpus.documents raw (issue 19, goal 1): the documents stage skips exactly its cleaning filters, language
detection, minimum sizes and dedup, through the ordinary pipeline; reading, sentence splitting, the held-out split,
empty-document drops and the one-record-per-identity rule stay. Rows packed by tokens skip the sentence splitting
too: each paragraph is one segment."""

import json
import unicodedata

import apache_beam as beam
import pytest
from apache_beam.runners.portability import local_job_service

from bertfactory.errors import ConfigError
from preprocessing import hashing
from preprocessing.config import CorpusConfig, InstancesConfig
from preprocessing.documents import CleanDocument, build_documents_pipeline, document_id, sentence_ends_needed
from preprocessing.pipeline import run_preprocess
from preprocessing.records import Document
from preprocessing.sentences import split_sentences

# NFD "é" (e + combining acute) and a BEL control character: normalisation would compose the one and drop the other
RAW_TEXT = "Cafe\u0301 owners met on Monday.\x07 They agreed on new hours for the summer months ahead."
BASE = ("The river flooded the lower town after three days of rain. Farmers moved their animals to the hills. "
        "The council opened the school hall for families who had lost their homes. By Friday the water had gone "
        "down and the roads were open again. Engineers from the county checked every bridge over the river before "
        "the buses ran. The market reopened on Saturday, and the traders sold what they had saved from the flood. "
        "Next spring the council will raise the banks of the river by a metre along the whole lower town.")
OTHER = ("A new library opened in the old station building this winter. It lends books, tools and board games, "
         "and it stays open late on Thursdays. Volunteers run reading hours for children every weekend. The town "
         "paid for the roof, and a local firm gave the shelves and the lamps. More than four hundred people have "
         "joined in the first month, and the waiting list for the sewing machines is already long.")


def _corpus(tmp_path, documents: str, lang: str = "auto") -> CorpusConfig:
    return CorpusConfig(inputs=[str(tmp_path / "in")], format="text", documents=documents, lang=lang,
                        filters={"stop_words": None})


def _clean(corpus: CorpusConfig, doc: Document, sentence_ends: bool = True) -> list:
    fn = CleanDocument(corpus, 0.5, ["a.txt"], sentence_ends)
    fn.setup()
    return list(fn.process(doc))


def test_raw_keeps_the_text_as_read_and_detects_no_language(tmp_path):
    doc = Document(source=0, ordinal=0, key="line 1", paragraphs=[RAW_TEXT, "   "])
    raw = _corpus(tmp_path, "raw")
    [(doc_id, record)] = _clean(raw, doc)
    assert record["paragraphs"] == [split_sentences(RAW_TEXT, None)]  # un-normalised, still split into sentences
    assert "\x07" in record["paragraphs"][0][0] and unicodedata.is_normalized("NFC", RAW_TEXT) is False
    assert record["lang"] is None  # lang auto: nothing detected
    assert doc_id == document_id(raw, doc, ["a.txt"])
    assert record["split"] == ("heldout" if hashing.is_heldout(f"doc:{doc_id}", 0.5) else "train")
    # the same document cleaned: normalised, language detected, dropped as too short (min_doc_chars 200)
    clean_out = _clean(_corpus(tmp_path, "clean"), doc)
    # ... and which rule applied (counts.docs_dropped_rules)
    assert [json.loads(o.value) for o in clean_out][0] == [0, "dropped:too_short"]
    assert json.loads(clean_out[1].value)[1].startswith("rule:too_short:")
    long_doc = Document(source=0, ordinal=0, key="line 1", paragraphs=[RAW_TEXT + " " + OTHER])
    [(_, cleaned)] = _clean(_corpus(tmp_path, "clean"), long_doc)
    assert cleaned["lang"] == "en" and "\x07" not in cleaned["paragraphs"][0][0]
    # a source's language or an assumed code is kept in raw, and an empty document is still dropped
    [(_, given)] = _clean(_corpus(tmp_path, "raw", lang="de"), doc)
    assert given["lang"] == "de"
    empty = _clean(raw, Document(source=0, ordinal=1, key="line 9", paragraphs=["  ", "\n"]))
    assert [json.loads(o.value) for o in empty] == [[0, "dropped:empty"]]


def _labels(corpus: CorpusConfig, tmp_path) -> set[str]:
    pipeline = beam.Pipeline()
    build_documents_pipeline(pipeline, corpus, 0.0, [str(tmp_path / "in" / "a.txt")], tmp_path / "work")
    return {t.unique_name for t in pipeline.to_runner_api().components.transforms.values()}


def test_raw_graph_has_no_dedup_step(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text(BASE + "\n")
    clean, raw = _labels(_corpus(tmp_path, "clean"), tmp_path), _labels(_corpus(tmp_path, "raw"), tmp_path)
    assert any(name.startswith("Deduplicate") for name in clean)
    assert not any("Dedup" in name or "Duplicates" in name or "IndexParts" in name for name in raw)
    assert raw < clean  # the rest of the graph is the same


def test_raw_run_drops_and_deduplicates_nothing(tmp_path, wiki):
    inputs = tmp_path / "in"
    inputs.mkdir()
    near = BASE.replace("three days", "four days")
    junk = "buy now buy now buy now buy now " * 12
    (inputs / "a.txt").write_text(f"{BASE}\n\n{near}\n\nToo short. Really.\n\n{junk}\n\n{RAW_TEXT} {OTHER}\n")
    (inputs / "b.txt").write_text(f"{BASE}\n")  # the same text under another identity: an exact duplicate
    cfg = wiki.config(preset="in_process").model_copy(update={"heldout_fraction": 0.0})
    overrides = {"instances": cfg.instances.model_copy(update={"format": "full-sentences"}),
                 "masking": cfg.masking.model_copy(update={"dynamic": True, "variants": 1})}
    cfg = cfg.model_copy(update=overrides)

    clean = run_preprocess(_corpus(tmp_path, "clean", lang="en"), cfg, tmp_path / "clean")["counts"]
    assert clean["docs_read"] == 6 and clean["docs_kept"] < 5
    assert clean["duplicates_removed"].get("exact") == 1 and clean["duplicates_removed"].get("near") == 1
    assert clean["docs_dropped"].get("too_short", 0) >= 1 and sum(clean["docs_dropped"].values()) >= 2

    manifest = run_preprocess(_corpus(tmp_path, "raw", lang="en"), cfg, tmp_path / "raw")
    raw = manifest["counts"]
    assert raw["docs_read"] == raw["docs_kept"] == 6
    assert raw["docs_dropped"] == {} and raw["duplicates_removed"] == {} and raw["quarantined"] == {}
    assert manifest["dedup_index"]["rows"] == 0
    assert (tmp_path / "raw" / "shards" / "duplicates.jsonl").read_text() == ""
    assert raw["tokens"] > clean["tokens"]


def test_raw_cannot_continue_a_corpus_version():
    with pytest.raises(ValueError, match=r"documents raw .* \(parent\)"):
        CorpusConfig(documents="raw", parent="runs/v1/shards")
    with pytest.raises(ConfigError):
        from bertfactory.config import validate

        validate(CorpusConfig, {"documents": "cleaned"}, "recipe.yaml: corpus")


def test_sentence_ends_are_skipped_only_for_raw_documents_packed_by_tokens(tmp_path):
    raw, clean = _corpus(tmp_path, "raw"), _corpus(tmp_path, "clean")
    assert sentence_ends_needed(raw, "tokens") is False
    assert sentence_ends_needed(raw, "sentences") is True
    assert sentence_ends_needed(clean, "tokens") is True  # min_doc_sentences counts sentences
    assert sentence_ends_needed(clean, "sentences") is True


def test_without_sentence_ends_a_paragraph_is_one_segment(tmp_path):
    doc = Document(source=0, ordinal=0, key="line 1", paragraphs=[f"  {RAW_TEXT}\t", "   ", f"{BASE}  {OTHER}"])
    raw = _corpus(tmp_path, "raw")
    [(doc_id, record)] = _clean(raw, doc, sentence_ends=False)
    assert record["paragraphs"] == [[RAW_TEXT], [f"{BASE}  {OTHER}"]]  # as read, edges stripped, no empty one
    [(same_id, split)] = _clean(raw, doc)
    assert len(split["paragraphs"][1]) > 1  # the default still splits
    assert same_id == doc_id and {k: v for k, v in split.items() if k != "paragraphs"} == \
        {k: v for k, v in record.items() if k != "paragraphs"}
    empty = _clean(raw, Document(source=0, ordinal=1, key="line 9", paragraphs=["  ", "\n"]), sentence_ends=False)
    assert [json.loads(o.value) for o in empty] == [[0, "dropped:empty"]]


def test_raw_run_packed_by_tokens_counts_paragraphs_and_runs_in_process(tmp_path, wiki, monkeypatch):
    started = []
    start = local_job_service.SubprocessSdkWorker.run
    monkeypatch.setattr(local_job_service.SubprocessSdkWorker, "run", lambda self: started.append(1) or start(self))
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_text(f"{BASE}\n{OTHER}\n\n{RAW_TEXT}\n")  # 2 documents, 3 paragraphs, 13 sentences
    # the local preset with a size rule that this input is far above: only the rule for token packing keeps it here
    cfg = wiki.config(in_process_below_mib=1e-6).model_copy(update={"heldout_fraction": 0.0})
    instances = InstancesConfig.model_validate({**cfg.instances.model_dump(), "format": "full-sentences"})
    cfg = cfg.model_copy(update={"instances": instances, "masking": cfg.masking.model_copy(update={"dynamic": True})})
    packed = cfg.model_copy(update={"instances": instances.model_copy(update={"packing": "tokens"})})
    by_tokens = run_preprocess(_corpus(tmp_path, "raw", lang="en"), packed, tmp_path / "tokens")
    assert started == [] and by_tokens["runner"]["ran_in_process"] is True
    in_process = cfg.model_copy(update={"runner": cfg.runner.model_copy(update={"preset": "in_process"})})
    by_sentences = run_preprocess(_corpus(tmp_path, "raw", lang="en"), in_process, tmp_path / "sentences")["counts"]
    assert by_sentences["sentences"] == 13 and by_tokens["counts"]["sentences"] == 3
    assert by_tokens["counts"]["docs_kept"] == by_sentences["docs_kept"] == 2
