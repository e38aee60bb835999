"""evaluate.objective (evaluation/heldout.py): a checkpoint's own pretraining objective scored on held-out shards
against the no-context baseline, for members whose intrinsic MLM evaluation does not apply; and scored at a longer
length than the shards' rows (evaluate.objective.max_seq_len, evaluation/long_rows.py)."""

from __future__ import annotations

import math

import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from evaluation.config import ObjectiveEvalConfig
from evaluation.heldout import checkpoint_objective, evaluate_objective
from evaluation.long_rows import LongRowBatches
from preprocessing.shards import ShardSet, read_manifest, write_manifest
from training.checkpoint import load_pretrained, read_checkpoint_config
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

from tests.evaluation.conftest import one_thread
from tests.training.conftest import make_run

BASE = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():  # tests/evaluation/conftest.py: tiny models on one thread
        yield


def _trained(tmp_path, objective: str, steps: int, **model):
    run = make_run(tmp_path / objective)
    pretrain(ModelConfig(**{**BASE, **model}), PretrainConfig(batch_size=16, max_steps=steps, warmup_steps=2,
                                                           learning_rate=3e-3, log_every=steps, save_every=1000,
                                                           seed=1, num_threads=1, device="cpu", objective=objective), run)
    final = run / "pretrain" / "final"
    model, _, _ = load_pretrained(final)
    return run, model, read_checkpoint_config(final)


def _score(run, model, doc, **cfg):
    return evaluate_objective(model, doc, run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"),
                              ObjectiveEvalConfig(max_batches=3, **cfg), torch.device("cpu"))


def test_a_causal_lm_is_scored_by_its_own_loss_and_beats_the_unigram_baseline(tmp_path):
    run, model, doc = _trained(tmp_path, "txl_clm", 40)
    assert checkpoint_objective(doc) == "txl_clm"
    scores = _score(run, model, doc)
    head = scores["headline"]
    assert head["metric"] == "clm_loss" and head["baseline_name"] == "unigram (no context)"
    # counting text: the next word follows from the last one, so context beats word frequencies clearly
    assert head["value"] < head["baseline"] - 0.3, head
    assert head["perplexity"] == pytest.approx(math.exp(head["value"]))
    # 64 held-out rows in batches of 32: the whole split (2 of the 3 batches allowed)
    assert 0.0 <= scores["clm_acc"] <= 1.0 and scores["batches"] == 2 and scores["instances"] == 64
    assert _score(run, model, doc) == scores  # deterministic: the same rows, the same draws


def test_electra_reports_replaced_token_detection_against_always_original(tmp_path):
    run, model, doc = _trained(tmp_path, "electra", 4, electra={"generator_size": 0.5})
    scores = _score(run, model, doc)
    assert {"mlm_loss", "mlm_acc", "disc_loss", "disc_acc", "disc_baseline_acc", "disc_baseline_loss"} <= set(scores)
    assert 0.5 < scores["disc_baseline_acc"] <= 1.0  # most tokens are original: the majority answer
    assert scores["headline"]["metric"] == "mlm_loss"


def test_bert_reports_its_sentence_task_against_the_majority_label(tmp_path):
    run, model, doc = _trained(tmp_path, "mlm_nsp", 4)
    scores = _score(run, model, doc)
    assert 0.0 <= scores["nsp_acc"] <= 1.0 and 0.5 <= scores["nsp_baseline_acc"] <= 1.0
    assert scores["headline"]["metric"] == "mlm_loss" and "mlm_perplexity" in scores


def test_an_imported_model_without_a_recorded_objective_is_not_scored(tmp_path):
    _, _, doc = _trained(tmp_path, "mlm", 2)
    doc.pop("training")
    assert checkpoint_objective(doc) is None


def _as_format(run, name: str, **masking):
    """Relabel the synthetic shards' instance format (their rows are [CLS] ... [SEP] already) and masking."""
    manifest = read_manifest(run / "shards")
    write_manifest(run / "shards", manifest.model_copy(update={
        "instance_format": {**manifest.instance_format, "name": name},
        "masking": {**manifest.masking, **masking}}))
    return run


def test_long_rows_join_every_held_out_row_once_by_document_and_scale_the_prediction_cap(tmp_path):
    run = _as_format(make_run(tmp_path / "rows"), "full-sentences", masked_lm_prob=0.3, max_predictions_per_seq=8)
    shards = ShardSet.open(run / "shards", "heldout")
    long_rows = LongRowBatches(shards, max_seq_len=100, batch_size=8, seed=0)
    assert sorted(i for group in long_rows.groups for i in group) == list(range(len(shards)))
    cls, sep = 2, 3  # tests/training/conftest.py's specials: pad, unk, cls, sep, mask
    joined_texts, short_texts = [], []
    for r, group in enumerate(long_rows.groups):
        ids = long_rows.joined(r).input_ids
        assert ids[0] == cls and ids[-1] == sep and len(ids) <= 100
        docs = [shards.instance(i).doc_id for i in group]
        runs = [d for k, d in enumerate(docs) if k == 0 or d != docs[k - 1]]
        assert len(runs) == len(set(runs))  # a document's rows side by side
        texts = [shards.instance(i).input_ids[1:-1].tolist() for i in group]
        separators = sum(1 for a, b in zip(docs, docs[1:]) if a != b)
        assert len(ids) == 2 + sum(map(len, texts)) + separators
        joined_texts += ids.tolist()
        short_texts += [t for text in texts for t in text]
    assert len(long_rows.groups) < len(shards) / 2  # rows of 12..32 tokens: several per row of 100
    real = [t for t in joined_texts if t not in (cls, sep)]
    assert sorted(real) == sorted(t for t in short_texts if t not in (cls, sep))
    batch = long_rows.batch(0)
    assert batch["input_ids"].shape[1] > 32 and long_rows.max_predictions == 25  # ceil(8 x 100 / 32)
    predictions = (batch["masked_labels"] >= 0).sum(1)
    lengths = batch["attention_mask"].sum(1)
    assert predictions.max() > 8  # the shards' cap of 8 grew with the length
    assert all(int(p) == min(25, max(1, round(0.3 * int(n)))) for p, n in zip(predictions, lengths))
    assert torch.equal(long_rows.batch(0)["input_ids"], batch["input_ids"])  # deterministic


MODERN = dict(type_vocab_size=1, layer_norm_eps=1e-5, max_position_embeddings=128,
              modernbert={"global_attn_every_n_layers": 2, "local_attention": 8})


def test_modernbert_is_scored_at_a_longer_length_than_its_shards_and_bad_lengths_are_refused(tmp_path):
    run, model, doc = _trained(tmp_path, "modernbert_mlm", 20, **MODERN)
    _as_format(run, "full-sentences")
    native = _score(run, model, doc)
    long = _score(run, model, doc, max_seq_len=96, batch_size=8)
    assert native["max_seq_len"] == 32 and long["max_seq_len"] == 96
    assert long["instances"] < native["instances"] and long["headline"]["metric"] == "mlm_loss"
    assert math.isfinite(long["mlm_loss"]) and long["mlm_loss"] != native["mlm_loss"]
    assert _score(run, model, doc, max_seq_len=96, batch_size=8) == long
    with pytest.raises(ConfigError, match="evaluate.objective.max_seq_len=16 is shorter than the rows"):
        _score(run, model, doc, max_seq_len=16)
    with pytest.raises(ConfigError, match=r"max_seq_len=256 is longer .*max_position_embeddings 128"):
        _score(run, model, doc, max_seq_len=256)
    _as_format(run, "nsp-pairs")
    with pytest.raises(ConfigError, match="evaluate.objective.max_seq_len=96: joining .*holds 'nsp-pairs' rows"):
        _score(run, model, doc, max_seq_len=96)
