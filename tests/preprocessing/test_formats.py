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


def _udhr_corpus(tmp_path) -> CorpusConfig:
    """31 English, 8 French and 8 German UDHR articles, one JSONL document each."""
    path = tmp_path / "udhr.jsonl"
    _udhr_jsonl(path, {"eng": 31, "fra": 8, "deu_1996": 8})
    return CorpusConfig(inputs=[str(path)], format="jsonl", min_doc_chars=20, min_doc_sentences=1,
                        filters={"min_words": None, "stop_words": None})


def test_language_sampling_smooths_the_mix(tmp_path, wiki):
    corpus = _udhr_corpus(tmp_path)
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


def test_a_given_tokenizer_runs_one_job_with_the_two_jobs_outputs(tmp_path, wiki):
    # with nothing to train both pipelines run as one Beam job, the instance plan (buckets, pre-shards, language
    # copy rates and ids) computed inside it; a two-job run with the tokenizer it trained is the reference
    corpus = _udhr_corpus(tmp_path)
    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.language_sampling = cfg.language_sampling.model_copy(update={"enabled": True, "alpha": 0.3, "min_docs": 5})
    two = run_preprocess(corpus, cfg, tmp_path / "two")
    cfg.tokenizer.path = str(tmp_path / "two" / "tokenizer" / "tokenizer.json")
    one = run_preprocess(corpus, cfg, tmp_path / "one")
    assert "documents+instances" in json.loads((tmp_path / "one/shards/stats.json").read_text())["timings_s"]
    assert "documents" in json.loads((tmp_path / "two/shards/stats.json").read_text())["timings_s"]
    assert two["counts"].pop("tokenizer_sample_chars") and one["counts"] == two["counts"]
    assert one["counts"]["language_sampling"] and one["counts"]["instances"]["heldout"] > 0
    assert one["instance_format"] == two["instance_format"] and one["splits"] == two["splits"]
    files = {run: {str(f.relative_to(tmp_path / run)): f.read_bytes() for f in (tmp_path / run).rglob("*")
                   if f.is_file() and f.name not in ("manifest.json", "stats.json")} for run in ("one", "two")}
    assert files["one"].keys() == files["two"].keys() and files["one"] == files["two"]


def test_a_parallel_corpus_needs_tlm_pairs(tmp_path, wiki):
    tsv = tmp_path / "pairs.en-fr.tsv"
    tsv.write_text("hello world\tbonjour le monde\n")
    corpus = CorpusConfig(inputs=[str(tsv)], format="parallel")
    with pytest.raises(ConfigError, match="tlm-pairs"):
        run_preprocess(corpus, wiki.config(preset="in_process"), tmp_path / "run")


@pytest.mark.parametrize("fmt", ["full-sentences", "doc-sentences", "single-segment", "clm"])
def test_every_text_instance_format_through_the_pipeline(tmp_path, wiki, fmt):
    from preprocessing.shards import ShardSet

    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.instances = cfg.instances.model_copy(update={"format": fmt})
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    manifest = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    assert manifest["schema_version"] == 2 and manifest["instance_format"]["name"] == fmt
    assert manifest["instance_format"]["languages"] == ["en"]
    rows = ShardSet.open(tmp_path / "run/shards", "train")
    cls, sep = manifest["tokenizer"]["special_ids"]["cls"], manifest["tokenizer"]["special_ids"]["sep"]
    segments: dict[int, list[int]] = {}
    for inst in rows:
        ids = list(inst.input_ids)
        assert len(ids) <= 32 and inst.len_a == len(ids) and inst.nsp_label == 0
        if fmt == "clm":
            assert cls not in ids and sep not in ids
            segments.setdefault(inst.doc_id, []).append(inst.segment_index)
        else:
            assert ids[0] == cls and ids[-1] == sep
    if fmt == "clm":  # every document's segments 0..n-1, each exactly once
        assert all(sorted(s) == list(range(len(s))) for s in segments.values())
    assert manifest["counts"]["instances"]["train"] == len(rows) > 0


def test_tlm_pairs_from_real_udhr_train_the_tlm_objective(tmp_path, wiki):
    import torch

    from preprocessing.shards import ShardSet
    from training.data import PretrainBatches
    from training.models.xlm.model import XlmConfig, XlmForPreTraining
    from training.objectives.xlm import tlm

    corpus = CorpusConfig(inputs=[f"sample:udhr/{c}.html" for c in ("eng", "fra", "deu_1996")], format="parallel")
    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.instances = cfg.instances.model_copy(update={"format": "tlm-pairs", "max_seq_len": 64})
    cfg.tokenizer = cfg.tokenizer.model_copy(update={"vocab_size": 400})
    manifest = run_preprocess(corpus, cfg, tmp_path / "run")
    counts = manifest["counts"]
    assert counts["docs_dropped"].get("pivot_language") == 31  # eng.html itself: the pivot of the others
    assert counts["docs_read"] == 3 * 31 and counts.get("pairs") == counts["docs_kept"] > 50
    languages = manifest["instance_format"]["languages"]
    assert set(languages) == {"en", "fr", "de"}
    shards = ShardSet.open(tmp_path / "run/shards", "train")
    first = shards.instance(0)
    assert first.lang_a == languages.index("en") and first.lang_b in (languages.index("fr"), languages.index("de"))
    assert first.len_a < len(first.input_ids)

    batches = PretrainBatches.open(tmp_path / "run/shards", manifest["tokenizer"]["sha256"], batch_size=4, seed=1)
    batch = batches.batch(0)
    positions, langs = batch["position_ids"], batch["language_ids"]
    inst = batches.shards.instance(int(batches.rows_of(0)[0]), 0)
    n = len(inst.input_ids)
    assert positions[0, :inst.len_a].tolist() == list(range(inst.len_a))
    assert positions[0, inst.len_a:n].tolist() == list(range(1, n - inst.len_a + 1))  # restarting at the target
    assert langs[0, :inst.len_a].tolist() == [inst.lang_a] * inst.len_a
    assert langs[0, inst.len_a:n].tolist() == [inst.lang_b] * (n - inst.len_a)
    torch.manual_seed(0)
    model = XlmForPreTraining(XlmConfig(vocab_size=manifest["tokenizer"]["vocab_size"], hidden_size=32, num_layers=1,
                                        num_heads=2, intermediate_size=64, max_position_embeddings=64,
                                        num_languages=len(languages)))
    out = tlm(model, batch)
    out["loss"].backward()
    grads = model.bert.embeddings.language_embeddings.weight.grad.abs().sum(-1)
    assert torch.isfinite(out["loss"]) and (grads > 0).sum() >= 2  # both sides' languages are used


def test_dynamic_masking_stores_no_masks_and_the_loader_masks_per_epoch(tmp_path, wiki):
    from preprocessing.shards import ShardSet
    from training.data import PretrainBatches

    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.masking = cfg.masking.model_copy(update={"dynamic": True})
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    manifest = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    assert manifest["masking"]["dynamic"] is True and manifest["counts"]["masked_tokens"] == 0
    shards = ShardSet.open(tmp_path / "run/shards")
    assert shards.k == 0 and all(len(i.mask_positions) == 0 for i in shards)
    sha = manifest["tokenizer"]["sha256"]
    one = PretrainBatches.open(tmp_path / "run/shards", sha, batch_size=8, seed=1)
    again = PretrainBatches.open(tmp_path / "run/shards", sha, batch_size=8, seed=1)
    spe = one.steps_per_epoch
    # the same row in two epochs: masked differently; the same step twice: identically
    row = int(one.rows_of(0)[0])
    later = next(s for s in range(spe, 2 * spe) if row in one.rows_of(s).tolist())
    first, second = one.batch(0), one.batch(later)
    i, j = 0, one.rows_of(later).tolist().index(row)
    assert not torch_equal(first["masked_positions"][i], second["masked_positions"][j]) or \
        not torch_equal(first["input_ids"][i], second["input_ids"][j])
    assert all(torch_equal(first[k], again.batch(0)[k]) for k in first)
    mask_id = manifest["tokenizer"]["special_ids"]["mask"]
    for step in range(spe):
        b = one.batch(step)
        predicted = (b["masked_labels"] != -100).sum(1)
        real = b["attention_mask"].sum(1)
        assert bool(((predicted >= 1) & (predicted <= cfg.masking.max_predictions_per_seq)).all())
        assert bool((predicted <= (real * 0.15).round().clamp(min=1)).all())
    assert (one.batch(1)["input_ids"] == mask_id).any()
    # `bertfactory inspect` shows the masks the loader draws for a row in a given epoch
    from flows.inspect import inspect_shards

    shown = inspect_shards(tmp_path / "run/shards", index=row, variant=1)
    drawn = one.batch(later)["masked_labels"][j]
    assert "dynamic masks of epoch 1 (drawn at read time)" in shown
    assert f"{int((drawn != -100).sum())} masked:" in shown


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_held_out_documents_are_chosen_by_identity_not_by_a_key_every_file_repeats(tmp_path, wiki):
    """Text files of one document each all have the key "line 1": the split hashes the document's identity."""
    inputs = []
    for article in sorted(NEWS_ARTICLE_LANGS)[:12]:
        path = tmp_path / f"{article}.txt"
        path.write_text(sample_path("newspaper4k", f"txt/{article}.txt").read_text(encoding="utf-8"), encoding="utf-8")
        inputs.append(str(path))
    corpus = CorpusConfig(inputs=inputs, format="text", min_doc_chars=50)
    cfg = wiki.config(preset="in_process").model_copy(update={"heldout_fraction": 0.5})
    docs = run_preprocess(corpus, cfg, tmp_path / "run")["counts"]["docs"]
    assert docs["train"] > 0 and docs["heldout"] > 0, docs


@pytest.mark.parametrize("policy, kind", [("whole-word", "bpe"), ("entity", "unigram"), ("span", "wordpiece")])
def test_masking_policies_through_the_pipeline(tmp_path, wiki, policy, kind):
    """Every policy builds its masker from the run's tokenizer (special ids, word boundaries, token texts)."""
    from preprocessing.shards import ShardSet

    cfg = wiki.config(preset="in_process").model_copy(deep=True)
    cfg.masking = cfg.masking.model_copy(update={"policy": policy})
    cfg.tokenizer = cfg.tokenizer.model_copy(update={"kind": kind, "lowercase": False, "vocab_size": 400})
    dump = wiki.write_dump(tmp_path / "d.xml.bz2", wiki.standard_pages())
    manifest = run_preprocess(wiki.corpus(dump), cfg, tmp_path / "run")
    assert manifest["masking"]["policy"] == policy and manifest["counts"]["masked_tokens"] > 0
    specials = set(manifest["tokenizer"]["special_ids"].values())
    for inst in ShardSet.open(tmp_path / "run/shards"):
        assert len(inst.mask_positions) >= 1 and not specials & {int(inst.input_ids[p]) for p in inst.mask_positions}
