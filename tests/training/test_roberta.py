"""RoBERTa as a member of the BERT family: BertForPreTraining with one segment embedding, trained with objective
mlm. The recipe's size against the published 125M and transformers' RobertaForMaskedLM, the single segment
embedding (segment ids of pair shards are ignored), and mlm pretraining through the real stage."""

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from flows.recipe import load_recipe
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.describe import count_parameters
from training.models.bert.model import BertConfig, BertForPreTraining
from training.pretrain import pretrain

REPO = Path(__file__).resolve().parents[2]


def test_roberta_base_recipe_has_the_published_size():
    transformers = pytest.importorskip("transformers")
    r = load_recipe(REPO / "configs" / "roberta-base.yaml")
    m, p = r.model, r.pretrain
    assert p.objective == "mlm" and m.type_vocab_size == 1 and m.max_position_embeddings == 512
    assert (p.batch_size, p.learning_rate, p.betas, p.eps, p.warmup_steps, p.max_steps) == \
        (8192, 6e-4, (0.9, 0.98), 1e-6, 24000, 500000)
    total, _ = count_parameters(m, r.preprocess.tokenizer.vocab_size, "mlm")
    print(f"roberta-base: {total:,} parameters")
    assert r.preprocess.tokenizer.vocab_size == 50265
    assert abs(total - 125e6) / 125e6 < 0.02
    # = transformers' RobertaForMaskedLM (514 position rows, no pooler, no sentence head) + our pooler and unused
    # NSP head - the 2 position rows HF's padding_idx offset never uses for a real token
    hf_config = transformers.RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                                           pad_token_id=1)
    with torch.device("meta"):
        hf = transformers.RobertaForMaskedLM(hf_config)
    h = m.hidden_size
    assert total == sum(q.numel() for q in hf.parameters()) + (h * h + h) + (2 * h + 2) - 2 * h


def test_tiny_roberta_recipe_is_the_tiny_twin_with_roberta_choices():
    tiny, local = load_recipe(REPO / "configs" / "tiny-roberta.yaml"), load_recipe(REPO / "configs" / "local.yaml")
    assert tiny.pretrain.objective == "mlm" and tiny.model.type_vocab_size == 1 and tiny.pretrain.betas == (0.9, 0.98)
    assert tiny.preprocess.instances.format == "full-sentences" and tiny.corpus == local.corpus
    assert tiny.model.hidden_size == local.model.hidden_size and tiny.model.num_layers == local.model.num_layers


def test_one_segment_embedding_is_allowed_and_ignores_segment_ids():
    assert ModelConfig(type_vocab_size=1).type_vocab_size == 1
    with pytest.raises(ValidationError, match="type_vocab_size"):
        ModelConfig(type_vocab_size=0)
    config = BertConfig(vocab_size=45, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_position_embeddings=16, type_vocab_size=1)
    model = BertForPreTraining(config).eval()
    assert model.bert.embeddings.token_type_embeddings.weight.shape == (1, 16)
    ids = torch.randint(5, 45, (2, 10), generator=torch.Generator().manual_seed(0))
    pair_types = torch.zeros_like(ids)
    pair_types[:, 5:] = 1  # what pair shards carry for segment B
    with torch.no_grad():
        assert torch.equal(model.bert(ids, pair_types), model.bert(ids, torch.zeros_like(ids)))


def test_mlm_pretraining_with_one_segment_embedding(tiny_run):
    model_cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128, max_position_embeddings=32,
                            type_vocab_size=1, layer_norm_eps=1e-5)
    cfg = PretrainConfig(objective="mlm", batch_size=16, max_steps=200, warmup_steps=10, learning_rate=3e-3,
                         betas=(0.9, 0.98), eps=1e-6, log_every=50, save_every=1000, seed=1, num_threads=1)
    threads = torch.get_num_threads()
    try:
        summary = pretrain(model_cfg, cfg, tiny_run)
    finally:
        torch.set_num_threads(threads)
    metrics = [json.loads(line) for line in (tiny_run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert summary["status"] == "trained" and "nsp_loss" not in metrics[-1]
    print("mlm on pair shards, one segment embedding:", [round(m["mlm_loss"], 3) for m in metrics])
    assert metrics[-1]["mlm_loss"] < metrics[0]["mlm_loss"] - 0.5, metrics
