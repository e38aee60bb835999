"""Our encoder reproduces a real published BERT: all-MiniLM-L6-v2 (the real sample `minilm`) loaded through
training.hf gives the sentence similarities published on its model card, so embeddings, attention (with padding
mask), post-LN layers and GELU match BERT's definition to float precision."""

import json

import pytest
import torch
from tokenizers import Tokenizer

from bertfactory.errors import ContractError
from bertfactory.samples import sample_path
from training.hf import bert_config_from_hf, load_hf_bert_encoder

# sentence-transformers model card of all-MiniLM-L6-v2: model.similarity(embeddings, embeddings)
SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PUBLISHED = [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]


def test_minilm_reproduces_published_similarities():
    directory = sample_path("minilm")
    encoder, config = load_hf_bert_encoder(directory)
    assert (config.num_layers, config.hidden_size, config.num_heads, config.vocab_size) == (6, 384, 12, 30522)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.no_padding()
    encodings = [tok.encode(s) for s in SENTENCES]
    width = max(len(e.ids) for e in encodings)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings])
    with torch.no_grad():
        hidden = encoder(ids, torch.zeros_like(ids), mask)
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # mean pooling over real tokens
    pooled = torch.nn.functional.normalize(pooled, dim=-1)
    similarity = pooled @ pooled.T
    assert torch.allclose(similarity, torch.tensor(PUBLISHED), atol=6e-5), similarity


def test_unsupported_hf_configs_are_refused():
    hf = json.loads((sample_path("minilm") / "config.json").read_text())
    with pytest.raises(ContractError, match="hidden_act 'relu'"):
        bert_config_from_hf({**hf, "hidden_act": "relu"})
    with pytest.raises(ContractError, match="model_type is 'roberta'"):
        bert_config_from_hf({**hf, "model_type": "roberta"})
    with pytest.raises(ContractError, match="expected a JSON object"):
        bert_config_from_hf([hf])


def test_invalid_hf_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ContractError, match="config.json is not valid JSON"):
        load_hf_bert_encoder(tmp_path)
