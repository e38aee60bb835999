"""evaluate.objective (evaluation/heldout.py): a checkpoint's own pretraining objective scored on held-out shards
against the no-context baseline, for members whose intrinsic MLM evaluation does not apply."""

from __future__ import annotations

import math

import pytest
import torch

from bertfactory.io import sha256_file
from evaluation.config import ObjectiveEvalConfig
from evaluation.heldout import checkpoint_objective, evaluate_objective
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
    pretrain(ModelConfig(**BASE, **model), PretrainConfig(batch_size=16, max_steps=steps, warmup_steps=2,
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
