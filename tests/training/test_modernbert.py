"""ModernBERT (training/models/modernbert/model.py): the core's modern options (no biases, pre-LN with embedding and final
norms, GeGLU, rotary positions, global / sliding-window layers), the loss and its gradients, the unpadded and
static-shape paths against the padded one, the config's checks and round trip, and the published size of the
full recipe on the meta device. HF parity: test_hf/modernbert.py."""

from pathlib import Path

import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from training.checkpoint import load_pretrained, save_pretrained
from training.config import ModelConfig
from training.models.bert.model import IGNORE_INDEX
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM, ModernBertSettings
from training.models.registry import get_architecture
from training.models.core.varlen import PackedSequences

from .conftest import write_tokenizer

REPO = Path(__file__).resolve().parents[2]
VOCAB = 45


def _config(**overrides) -> ModernBertConfig:
    values = dict(vocab_size=VOCAB, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=48,
                  max_position_embeddings=64, local_attention=8)
    return ModernBertConfig(**{**values, **overrides})


def _model(seed: int = 0, **overrides) -> ModernBertForMaskedLM:
    torch.manual_seed(seed)
    return ModernBertForMaskedLM(_config(**overrides))


def _batch(b: int = 3, t: int = 24, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (b, t), generator=g)
    attention = torch.ones(b, t, dtype=torch.long)
    attention[1, 15:] = 0
    attention[2, 6:] = 0
    ids[attention == 0] = 0
    positions = torch.tensor([[1, 3, 10, 20], [2, 5, 9, 14], [1, 2, 4, 0]])
    labels = ids.gather(1, positions)
    labels[2, 3] = IGNORE_INDEX
    masked = ids.clone()
    masked.scatter_(1, positions, 4)
    masked[attention == 0] = 0
    return {"input_ids": masked, "token_type_ids": torch.zeros_like(ids), "attention_mask": attention,
            "masked_positions": positions, "masked_labels": labels}


def _forward(model, batch, **kwargs):
    return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_positions"],
                 batch["masked_labels"], **kwargs)


# ------------------------------------------------------------------------------------------ the architecture


def test_the_modern_options_are_built_no_bias_anywhere_but_the_decoder():
    model = _model()
    names = dict(model.named_parameters())
    biases = [n for n in names if n.endswith("bias")]
    # the decoder's bias (tied weight, own bias, as transformers' decoder_bias) and the fine-tuning pooler's
    assert biases == ["bert.pooler.dense.bias", "mlm_head.bias"]
    assert "bert.embeddings.position_embeddings.weight" not in names  # rotary positions
    assert "bert.embeddings.token_type_embeddings.weight" not in names
    assert "bert.encoder.layer.0.attention.input_norm.weight" not in names  # the embedding norm serves layer 0
    assert "bert.encoder.layer.1.attention.input_norm.weight" in names
    assert names["bert.encoder.layer.0.intermediate.dense.weight"].shape == (2 * 48, 32)  # GeGLU
    assert names["bert.encoder.layer.0.output.dense.weight"].shape == (32, 48)
    assert "bert.final_norm.weight" in names
    assert model.config.sentence_head is False and not hasattr(model, "nsp_head")
    kinds = ["global" if model.config.is_global(i) else "local" for i in range(4)]
    assert kinds == ["global", "local", "local", "global"]


def test_local_layers_see_only_their_window():
    """A one-layer model attends globally; made local (every layer global only at 0, so compare layer kinds by
    the mask each receives), a token farther than local_attention / 2 cannot move another token's output."""
    model = _model(num_layers=2, global_attn_every_n_layers=2).eval()
    masks = []
    layer = model.bert.encoder.layer[1].attention.self
    original = layer.forward
    layer.forward = lambda hidden, mask, rotary=None: (masks.append(mask), original(hidden, mask, rotary))[1]
    ids = torch.randint(5, VOCAB, (1, 20))
    model.bert(ids, None, torch.ones_like(ids))
    (mask,) = masks
    distance = (torch.arange(20)[:, None] - torch.arange(20)[None, :]).abs()
    assert torch.equal(mask[0, 0], distance <= 4)  # local_attention 8: 4 on each side

    # a padding query keeps every real key (no softmax row without a key), a real query stays in its window
    from training.models.core.varlen import sliding_window_band
    real = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    band = sliding_window_band(real, 2)
    assert band[0, 0, 11].all() and band[0, 0, 0].tolist() == [True] * 3 + [False] * 9


def test_loss_gradients_and_the_untrained_pooler():
    model = _model().train()
    out = _forward(model, _batch())
    assert out["mlm_logits"].shape == (11, VOCAB) and int(out["mlm_count"]) == 11
    assert out["nsp_logits"] is None and torch.isfinite(out["loss"])
    out["loss"].backward()
    missing = sorted(n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum())
    assert missing == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    assert sorted(model.untrained_parameter_names()) == missing
    assert model.backbone() is model.bert


def test_loss_falls_on_a_repeated_batch():
    model = _model().train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = _batch()
    losses = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = _forward(model, batch)["loss"]
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0], losses


def test_unpadded_and_static_shape_paths_equal_the_padded_one():
    model = _model().eval()
    batch = _batch()
    padded = _forward(model, batch)
    unpadded = _forward(model, batch, unpad=True)
    assert torch.allclose(padded["mlm_logits"], unpadded["mlm_logits"], atol=1e-5)
    model.static_shapes = True
    fixed = _forward(model, batch)
    assert torch.allclose(fixed["loss"], padded["loss"], atol=1e-6)
    model.static_shapes = False

    # gradients agree too, and the encoder's hidden states on the real tokens
    model.train()
    grads = []
    for unpad in (False, True):
        model.zero_grad()
        _forward(model, batch, unpad=unpad)["loss"].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-5), name
    model.eval()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        last, states = model.bert(batch["input_ids"], None, batch["attention_mask"], output_hidden_states=True)
        packed, layout = model.bert(batch["input_ids"], None, batch["attention_mask"], unpad="packed")
    assert isinstance(layout, PackedSequences) and len(states) == len(packed) == 5
    assert torch.allclose(last[real], packed[-1], atol=1e-5) and torch.equal(states[-1], last)


def test_positions_are_rotary_relative_and_bounded():
    model = _model(num_layers=1).eval()
    ids = torch.randint(5, VOCAB, (1, 10))
    with torch.no_grad():
        base = model.bert(ids, None, None)
        shifted = model.bert(ids, None, None, position_ids=torch.arange(7, 17)[None])
    assert torch.allclose(base, shifted, atol=1e-5)  # only relative positions matter
    with pytest.raises(ValueError, match="sequence length 65 exceeds max_position_embeddings 64"):
        model.bert(torch.ones(1, 65, dtype=torch.long))


# ------------------------------------------------------------------------------------------------- config


def test_config_refuses_what_modernbert_does_not_have_naming_the_field():
    for overrides, message in [({"type_vocab_size": 2}, "type_vocab_size must be 1"),
                               ({"embedding_size": 16}, "embedding_size must be None"),
                               ({"sentence_head": True}, "sentence_head must be False"),
                               ({"num_heads": 8, "hidden_size": 24}, "must be even"),
                               ({"local_attention": 7}, "local_attention must be even")]:
        with pytest.raises(ContractError, match=message):
            ModernBertConfig.from_dict({**_config().to_dict(), **overrides}, "x/config.json")
    with pytest.raises(ContractError, match=r"x/config.json: unknown model config field\(s\) rope"):
        ModernBertConfig.from_dict({**_config().to_dict(), "rope": 1}, "x/config.json")


def test_recipe_section_becomes_the_config_and_bad_settings_name_the_section():
    arch = get_architecture("ModernBertForMaskedLM")
    section = ModelConfig(hidden_size=32, num_layers=3, num_heads=2, intermediate_size=48,
                          max_position_embeddings=256, type_vocab_size=1,
                          modernbert=ModernBertSettings(local_attention=16, global_rope_theta=1e5))
    config = arch.from_model_config(section, 100, 0)
    assert (config.local_attention, config.global_rope_theta, config.local_rope_theta) == (16, 1e5, 1e4)
    assert config.sentence_head is False and config.vocab_size == 100
    assert arch.from_model_config(ModelConfig(type_vocab_size=1), 100, 0).global_attn_every_n_layers == 3
    with pytest.raises(ConfigError, match="model / model.modernbert: .*type_vocab_size must be 1"):
        arch.from_model_config(ModelConfig(), 100, 0)  # BERT's default of 2 segments


def test_save_and_load_round_trip(tmp_path):
    model = _model()
    directory = save_pretrained(model, model.config, write_tokenizer(tmp_path / "tok.json", VOCAB - 5),
                                tmp_path / "model")
    loaded, config, _ = load_pretrained(directory)
    assert type(loaded) is ModernBertForMaskedLM and config == model.config
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_the_full_recipe_has_the_published_size_on_the_meta_device():
    """configs/modernbert-base.yaml: transformers' ModernBertForMaskedLM at ModernBERT-base's config (149.7M, "149M"
    on the model card) plus our [CLS] pooler, within 2 % of the published 149M."""
    from flows.recipe import load_recipe
    from training.describe import count_parameters, meta_model

    recipe = load_recipe(REPO / "configs" / "modernbert-base.yaml")
    total, _ = count_parameters(recipe.model, 50368, "modernbert_mlm")
    model = meta_model(recipe.model, 50368, "modernbert_mlm")
    pooler = sum(p.numel() for n, p in model.named_parameters() if n.startswith("bert.pooler."))
    print(f"ModernBERT-base: {total:,} parameters ({total - pooler:,} without the fine-tuning pooler)")
    assert abs(total - 149e6) / 149e6 < 0.02
    transformers = pytest.importorskip("transformers")
    if hasattr(transformers, "ModernBertForMaskedLM"):
        with torch.device("meta"):
            hf = transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(vocab_size=50368))
        assert total - pooler == sum(p.numel() for p in hf.parameters())  # the decoder weight is the tied one
