"""Parameter counts without allocating weights, against the published sizes, and the FLOPs formula by hand."""

import pytest

from bertfactory.errors import ConfigError

from training.config import ModelConfig
from training.describe import count_parameters, describe, meta_model
from training.flops import estimate_flops

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
    # per token, S = 16: per layer 2 * (4*16 + 2*4*8) + 4 * S * H = 256 + 256 = 512; head: f * 2 * (4*4 + 4*10)
    # at f = 0.5; the pooler + NSP head once per row: (2 * 16 + 4 * 4) / S
    est = estimate_flops(cfg, "mlm_nsp", vocab_size=10, seq_len=16, mask_rate=0.5)
    assert est.forward == 2 * 512 + 0.5 * 2 * 56 + (2 * 16 + 16) / 16
    assert est.train == 3 * est.forward
    assert estimate_flops(cfg, "mlm", 10, 16, 0.5).forward == 2 * 512 + 0.5 * 2 * 56  # RoBERTa: no sentence head
    d = describe(ModelConfig(), 30522, 128, 0.15)
    assert d.train_flops_per_token == 3 * d.forward_flops_per_token
    assert sum(t.forward + t.backward for t in d.flops_terms) == d.train_flops_per_token
    saving = 1 - d.train_flops_per_token / d.dense_head_train_flops_per_token
    assert 0.15 < saving < 0.2  # BERT-base: predicting only at masked positions saves ~18 % of the step
    with pytest.raises(ConfigError, match="max_seq_len 1024 exceeds model.max_position_embeddings=512: raise"):
        describe(ModelConfig(), 30522, 1024, 0.15)


def test_describe_counts_each_members_own_work():
    # the same encoder size costs more as ELECTRA (a generator besides) and as XLNet (a second stream, relative
    # position scores); Transformer-XL pays a full softmax at every token; relative members take any length
    base = ModelConfig(hidden_size=256, num_heads=4, intermediate_size=1024, num_layers=4)
    bert = describe(base, 30522, 128, 0.15, "mlm")
    electra = describe(base, 30522, 128, 0.15, "electra")
    xlnet = describe(base, 30522, 1024, 0.15, "plm")
    txl = describe(base, 30522, 1024, 0.15, "txl_clm")
    assert electra.train_flops_per_token > bert.train_flops_per_token
    assert xlnet.dense_head_train_flops_per_token is None and txl.dense_head_train_flops_per_token is None
    names = {t.name: t for t in xlnet.flops_terms}
    assert names["query stream (targets only)"].forward < names["content stream"].forward / 4  # K = 6
    assert next(t for t in txl.flops_terms if t.name == "logits at every token").forward == 2 * 256 * 30522


def test_modernbert_base_counts_geglu_no_biases_and_the_local_window():
    # configs/modernbert-base.yaml against transformers' ModernBertForMaskedLM of the default (= base) config, built
    # on the meta device: GeGLU's H -> 2I, no bias anywhere but the decoder's; ours adds the fine-tuning pooler
    transformers = pytest.importorskip("transformers")
    import torch

    from pathlib import Path

    from flows.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "configs" / "modernbert-base.yaml", [])
    with torch.device("meta"):
        hf = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig())
    published = sum(p.numel() for p in hf.parameters())
    d = describe(recipe.model, 50368, 1024, 0.3, "modernbert_mlm")
    h, i, layers, vocab = 768, 1152, 22, 50368
    assert d.parameters == published + h * h + h
    assert d.embedding_parameters == vocab * h + h  # no positions, no segments, a bias-free norm
    assert abs(published - 149e6) / 149e6 < 0.02
    by_hand = (layers * (4 * h * h + 3 * h * i + 2 * h) - h  # layer 0 has no attention norm
               + h + h * h + h + vocab)  # final norm, head dense + norm, decoder bias
    assert d.non_embedding_parameters == by_hand + h * h + h
    terms = {t.name: t.forward for t in d.flops_terms}
    s, w = 1024, 64
    assert terms["projections + GeGLU feed-forward"] == layers * 2 * (4 * h * h + 3 * h * i)
    assert terms["attention, 8 global layer(s)"] == 8 * 4 * s * h  # layers 0, 3, ..., 21
    assert terms["attention, 14 local layer(s) (window 128)"] == 14 * 4 * h * (s * (2 * w + 1) - w * (w + 1)) / s
