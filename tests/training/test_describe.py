"""Parameter counts without allocating weights, against the published sizes, and the FLOPs formula by hand."""

import pytest

from training.config import ModelConfig
from training.describe import count_parameters, describe, flops_per_token, meta_model

BERT_LARGE = ModelConfig(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096)


def test_bert_base_and_large_match_the_published_sizes():
    # BertForPreTraining of google-research/bert (= transformers' BertForPreTraining): encoder + pooler + MLM
    # transform + decoder bias + NSP; the decoder weight is the word-embedding matrix (counted once).
    base, base_embedding = count_parameters(ModelConfig(), 30522)
    assert base == 110_106_428
    assert base_embedding == 30522 * 768 + 512 * 768 + 2 * 768 + 2 * 768
    assert abs(base - 110e6) / 110e6 < 0.02
    large, _ = count_parameters(BERT_LARGE, 30522)
    assert large == 336_226_108
    assert abs(large - 335e6) / 335e6 < 0.02


def test_counting_allocates_nothing():
    # 24 layers of 1024 would be 1.3 GB of fp32 weights; on the meta device every tensor is a shape only.
    model = meta_model(BERT_LARGE, 30522)
    tensors = list(model.parameters()) + list(model.buffers())
    assert tensors and all(t.is_meta for t in tensors)


def test_flops_formula_by_hand_and_the_sparse_head_saving():
    cfg = ModelConfig(hidden_size=4, num_layers=2, num_heads=2, intermediate_size=8, max_position_embeddings=16)
    # per layer: 2 * (4*16 + 2*4*8) + 4 * S * H = 2 * 128 + 4*16*4 = 512; head: f * 2 * (16 + 4*10)
    assert flops_per_token(cfg, vocab_size=10, seq_len=16, predicted_fraction=0.5) == 2 * 512 + 0.5 * 2 * 56
    d = describe(ModelConfig(), 30522, 128, 0.15)
    assert d.train_flops_per_token == 3 * d.forward_flops_per_token
    saving = 1 - d.train_flops_per_token / d.dense_head_train_flops_per_token
    assert 0.15 < saving < 0.2  # BERT-base: predicting only at masked positions saves ~18 % of the step
    with pytest.raises(ValueError, match="seq_len 1024 exceeds"):
        describe(ModelConfig(), 30522, 1024, 0.15)
