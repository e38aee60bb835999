"""pretrain.init_from naming a Hugging Face BERT directory without an MLM head (the real MiniLM, and a tiny one this
test writes): the encoder is loaded, the MLM head starts fresh from the pretraining seed (its decoder is the word
embedding matrix), the run logs "MLM head initialised fresh: not in <path>", and a shape or vocabulary that does not
fit the recipe fails with one line."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertfactory.errors import ConfigError
from bertfactory.samples import is_fetched, sample_path
from preprocessing.tokenizer import adopt_tokenizer
from training.models.bert.model import BertConfig, BertForPreTraining, BertModel
from training.pretrain_model import warm_start

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]


def _tiny_hf_bert(directory, tokens=TOKENS, hidden=16):
    """A HF BertModel directory (no MLM, no NSP head) with random weights under HF's names."""
    directory.mkdir(parents=True)
    config = BertConfig(vocab_size=len(tokens), hidden_size=hidden, num_layers=2, num_heads=2,
                        intermediate_size=4 * hidden, max_position_embeddings=64)
    torch.manual_seed(7)
    encoder = BertModel(config)
    save_file({k: v.contiguous() for k, v in encoder.state_dict().items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": len(tokens), "hidden_size": hidden,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 4 * hidden,
        "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu",
        "position_embedding_type": "absolute", "layer_norm_eps": 1e-12, "pad_token_id": 0}))
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return config


def _model(config, sentence_head=False, seed=3, **changes):
    torch.manual_seed(seed)
    values = {**config.to_dict(), "sentence_head": sentence_head, **changes}
    return BertForPreTraining(BertConfig(**values))


def test_tiny_hf_bert_encoder_loads_and_the_mlm_head_starts_fresh(tmp_path, caplog):
    hf = tmp_path / "hf"
    config = _tiny_hf_bert(hf)
    tokenizer = tmp_path / "tokenizer.json"
    adopt_tokenizer(hf / "vocab.txt", tokenizer)
    model, fresh = _model(config), _model(config)  # the same seed: what a random init would be
    with caplog.at_level(logging.INFO, logger="training.pretrain"):
        warm_start(model, hf, "BertForPreTraining", "unused", tokenizer)
    assert f"MLM head initialised fresh: not in {hf}" in caplog.text
    stored = load_file(str(hf / "model.safetensors"))
    for name, tensor in stored.items():
        assert torch.equal(model.state_dict()[f"bert.{name}"], tensor), name
    for name, tensor in fresh.state_dict().items():
        if name.startswith("mlm_head."):
            assert torch.equal(model.state_dict()[name], tensor), name  # fresh: as the pretraining seed built it
    # the decoder is tied: the MLM logits are the transformed hidden states times the imported embeddings
    assert not any("decoder" in n for n in model.state_dict())
    hidden = torch.randn(3, config.hidden_size)
    with torch.no_grad():
        logits = model.mlm_head(hidden, model.bert.embeddings.word_embeddings.weight)
        transformed = model.mlm_head.LayerNorm(torch.nn.functional.gelu(model.mlm_head.dense(hidden)))
        expected = transformed @ stored["embeddings.word_embeddings.weight"].T + model.mlm_head.bias
    assert torch.allclose(logits, expected, atol=1e-5)


def test_a_sentence_head_the_checkpoint_lacks_is_fresh_too(tmp_path, caplog):
    hf = tmp_path / "hf"
    config = _tiny_hf_bert(hf)
    tokenizer = tmp_path / "tokenizer.json"
    adopt_tokenizer(hf / "vocab.txt", tokenizer)
    with caplog.at_level(logging.INFO, logger="training.pretrain"):
        warm_start(_model(config, sentence_head=True), hf, "BertForPreTraining", "unused", tokenizer)
    assert f"NSP head initialised fresh: not in {hf}" in caplog.text


@pytest.mark.parametrize("changes, expected", [
    ({"hidden_size": 32, "intermediate_size": 64}, "hidden_size 16 (model.hidden_size: 32), intermediate_size 64 "
                                                   "(model.intermediate_size: 64)"),
    ({"num_layers": 3}, "num_layers 2 (model.num_layers: 3)"),
])
def test_a_model_section_of_another_shape_fails_with_one_line(tmp_path, changes, expected):
    hf = tmp_path / "hf"
    config = _tiny_hf_bert(hf)
    tokenizer = tmp_path / "tokenizer.json"
    adopt_tokenizer(hf / "vocab.txt", tokenizer)
    with pytest.raises(ConfigError) as err:
        warm_start(_model(config, **changes), hf, "BertForPreTraining", "unused", tokenizer)
    message = str(err.value)
    assert f"pretrain.init_from {hf}" in message and "\n" not in message and "model section" in message
    assert expected.split(", ")[0] in message


def test_shards_of_another_tokenizer_fail_with_one_line(tmp_path):
    hf = tmp_path / "hf"
    config = _tiny_hf_bert(hf)
    other = tmp_path / "other"
    other.mkdir()
    (other / "vocab.txt").write_text("\n".join(TOKENS[:5] + list(reversed(TOKENS[5:]))) + "\n")
    tokenizer = tmp_path / "tokenizer.json"
    adopt_tokenizer(other / "vocab.txt", tokenizer)
    with pytest.raises(ConfigError) as err:
        warm_start(_model(config), hf, "BertForPreTraining", "unused", tokenizer)
    message = str(err.value)
    assert "gives other ids than the shards'" in message and str(hf / "vocab.txt") in message
    assert "preprocess.tokenizer.path" in message and "\n" not in message


@pytest.mark.skipif(not is_fetched("minilm"), reason="needs `bertfactory samples fetch minilm`")
def test_real_minilm_as_init_from(tmp_path, caplog):
    tokenizer = tmp_path / "tokenizer.json"
    adopt_tokenizer(sample_path("minilm") / "tokenizer.json", tokenizer)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12, intermediate_size=1536,
                        max_position_embeddings=512)
    model = _model(config)
    with caplog.at_level(logging.INFO, logger="training.pretrain"):
        warm_start(model, "sample:minilm", "BertForPreTraining", "unused", tokenizer)
    assert f"MLM head initialised fresh: not in {sample_path('minilm')}" in caplog.text
    stored = load_file(str(sample_path("minilm") / "model.safetensors"))
    word = "embeddings.word_embeddings.weight"
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, stored[word])
    with pytest.raises(ConfigError, match="max_position_embeddings 512 \\(model.max_position_embeddings: 128\\)"):
        warm_start(_model(config, max_position_embeddings=128), "sample:minilm", "BertForPreTraining", "unused",
                   tokenizer)
