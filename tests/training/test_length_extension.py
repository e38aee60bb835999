"""Sequence-length extension as a second pretraining phase (ModernBERT's 1,024 -> 8,192; configs/*-long.yaml):
phase 2 warm-starts from phase 1's final weights (pretrain.init_from) on shards of longer rows with a larger
model.max_position_embeddings. A rotary member (ModernBERT: no weight per position) loads the shorter model's
weights as they are and starts where phase 1 left off; a learned-position member (BERT) is refused in one line
naming both lengths. The phase-2 checkpoint is scored by its held-out MLM at its own length and at a longer one
(evaluate.objective.max_seq_len). The recipe end to end through `bertfactory run`: tests/flows/test_length_extension_flow.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bertfactory.errors import ConfigError
from bertfactory.io import sha256_file
from evaluation.config import ObjectiveEvalConfig
from evaluation.heldout import evaluate_objective
from preprocessing.shards import read_manifest, write_manifest
from training.checkpoint import load_pretrained, read_checkpoint_config
from training.config import ModelConfig
from training.models.modernbert.model import ModernBertSettings
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHORT, LONG = 32, 64
MODERN = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48, type_vocab_size=1,
              hidden_dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-5,
              modernbert=ModernBertSettings(global_attn_every_n_layers=2, local_attention=8))
BERT = dict(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def _cfg(objective: str, steps: int, init_from: Path | None = None, learning_rate: float = 3e-3) -> PretrainConfig:
    return PretrainConfig(objective=objective, batch_size=16, max_steps=steps, warmup_steps=2,
                          learning_rate=learning_rate, log_every=1, save_every=1000, seed=4, num_threads=1, device="cpu",
                          init_from=str(init_from) if init_from else None)


def _full_sentences(run: Path) -> Path:
    """The synthetic rows are [CLS] ... [SEP] token runs: label them as packed full-sentences rows (the format
    ModernBERT trains on, and the one a held-out row can be joined to a longer length from)."""
    manifest = read_manifest(run / "shards")
    write_manifest(run / "shards", manifest.model_copy(update={
        "instance_format": {**manifest.instance_format, "name": "full-sentences"}}))
    return run


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_a_rotary_model_continues_at_a_longer_length_from_the_shorter_models_weights(run_factory):
    short = _full_sentences(run_factory("phase1", max_seq_len=SHORT))
    # 120 steps at 1e-2: the tiny ModernBERT's MLM loss falls from ln(45) = 3.8 to about 1.5 on the counting rows
    pretrain(ModelConfig(**MODERN, max_position_embeddings=SHORT), _cfg("modernbert_mlm", 120, learning_rate=1e-2),
             short)
    phase1 = short / "pretrain" / "final"

    # phase 2: rows of 40..64 tokens (longer than anything phase 1 saw), the same tokenizer, positions raised
    long_model = ModelConfig(**MODERN, max_position_embeddings=LONG)
    extended = _full_sentences(run_factory("phase2", max_seq_len=LONG, min_seq_len=40))
    assert sha256_file(extended / "tokenizer/tokenizer.json") == sha256_file(short / "tokenizer/tokenizer.json")
    pretrain(long_model, _cfg("modernbert_mlm", 6, init_from=phase1), extended)
    fresh = _full_sentences(run_factory("fresh", max_seq_len=LONG, min_seq_len=40))
    pretrain(long_model, _cfg("modernbert_mlm", 6), fresh)

    continued, scratch = _metrics(extended), _metrics(fresh)
    # the first step of phase 2 is phase 1's model at work on rows twice as long: far below a random init's loss,
    # and near where phase 1 ended at its own length (rotary positions are relative: nothing new to learn)
    phase1_end = _metrics(short)[-1]["mlm_loss"]
    assert continued[0]["mlm_loss"] < scratch[0]["mlm_loss"] - 1.5, (continued[0], scratch[0])
    assert continued[0]["mlm_loss"] < phase1_end + 0.5, (continued[0], phase1_end)
    assert all(math.isfinite(m["loss"]) for m in continued)
    doc = read_checkpoint_config(extended / "pretrain" / "final")
    assert doc["model"]["max_position_embeddings"] == LONG

    # long-context evaluation of the phase-2 model: held-out MLM at its own 64 tokens and joined to 128
    model, _, _ = load_pretrained(extended / "pretrain" / "final")
    tokenizer_sha = sha256_file(extended / "tokenizer" / "tokenizer.json")

    def score(**cfg):
        return evaluate_objective(model, doc, extended / "shards", tokenizer_sha, ObjectiveEvalConfig(**cfg),
                                  torch.device("cpu"))

    native = score(max_batches=2)
    assert native["max_seq_len"] == LONG and native["headline"]["metric"] == "mlm_loss"
    assert native["headline"]["value"] < native["headline"]["baseline"], native["headline"]
    with pytest.raises(ConfigError, match=f"longer .*max_position_embeddings {LONG}"):
        score(max_seq_len=2 * LONG, batch_size=8)  # beyond phase 2's positions: refused, not extrapolated


def test_phase2_model_evaluates_beyond_its_rows_when_its_positions_reach(run_factory):
    short = _full_sentences(run_factory("phase1", max_seq_len=SHORT))
    pretrain(ModelConfig(**MODERN, max_position_embeddings=SHORT), _cfg("modernbert_mlm", 4), short)
    extended = _full_sentences(run_factory("phase2", max_seq_len=LONG, min_seq_len=40))
    # the full recipe's shape: positions raised beyond the phase-2 rows (8,192 in modernbert-base-long)
    pretrain(ModelConfig(**MODERN, max_position_embeddings=2 * LONG),
             _cfg("modernbert_mlm", 2, init_from=short / "pretrain" / "final"), extended)
    model, _, _ = load_pretrained(extended / "pretrain" / "final")
    doc = read_checkpoint_config(extended / "pretrain" / "final")
    scores = evaluate_objective(model, doc, extended / "shards", sha256_file(extended / "tokenizer/tokenizer.json"),
                                ObjectiveEvalConfig(max_seq_len=2 * LONG, batch_size=8, max_batches=2),
                                torch.device("cpu"))
    assert scores["max_seq_len"] == 2 * LONG and math.isfinite(scores["mlm_loss"])


def test_a_learned_position_model_is_refused_in_one_line(run_factory):
    short = run_factory("phase1", max_seq_len=SHORT)
    pretrain(ModelConfig(**BERT, max_position_embeddings=SHORT), _cfg("mlm_nsp", 2), short)
    extended = run_factory("phase2", max_seq_len=LONG, min_seq_len=40)
    phase1 = short / "pretrain" / "final"
    with pytest.raises(ConfigError) as refused:
        pretrain(ModelConfig(**BERT, max_position_embeddings=LONG), _cfg("mlm_nsp", 2, init_from=phase1), extended)
    message = str(refused.value)
    assert "\n" not in message and str(phase1) in message
    assert f"learned position table of {SHORT} positions but model.max_position_embeddings is {LONG}" in message
    assert not (extended / "pretrain" / "final").exists()
    # the same length warm-starts as before (continued pretraining on new data)
    pretrain(ModelConfig(**BERT, max_position_embeddings=SHORT), _cfg("mlm_nsp", 2, init_from=phase1),
             run_factory("same", max_seq_len=SHORT))
