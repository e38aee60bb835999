"""BERT model: shapes, padding masking, tied MLM decoder, initialisation, config round trip."""

import dataclasses

import pytest
import torch

from bertfactory.errors import ContractError
from training.models.bert.model import BertConfig, BertForPreTraining, BertModel, gather_masked

CONFIG = BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                    max_position_embeddings=24)


def _inputs(batch=3, length=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG.vocab_size, (batch, length), generator=g)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    return ids, types, torch.ones_like(ids)


def test_encoder_shapes_and_hidden_states():
    torch.manual_seed(0)
    model = BertModel(CONFIG).eval()
    ids, types, mask = _inputs()
    last = model(ids, types, mask)
    assert last.shape == (3, 10, 32)
    last2, states = model(ids, types, mask, output_hidden_states=True)
    assert len(states) == CONFIG.num_layers + 1  # embeddings + every layer
    assert all(s.shape == (3, 10, 32) for s in states)
    assert torch.equal(states[-1], last2) and torch.allclose(last, last2)


def test_real_positions_do_not_depend_on_padding_amount():
    torch.manual_seed(0)
    model = BertModel(CONFIG).eval()
    ids, types, mask = _inputs(batch=1, length=8)
    reference = model(ids, types, mask)
    for extra in (1, 5, 12):
        padded_ids = torch.cat([ids, torch.full((1, extra), 0)], dim=1)
        padded_types = torch.cat([types, torch.zeros(1, extra, dtype=torch.long)], dim=1)
        padded_mask = torch.cat([mask, torch.zeros(1, extra, dtype=torch.long)], dim=1)
        out = model(padded_ids, padded_types, padded_mask)
        assert torch.allclose(out[:, :8], reference, atol=1e-5), f"real positions changed with {extra} pads"
    # and the mask matters: the same pads left unmasked change the real positions
    unmasked = model(padded_ids, padded_types, torch.ones_like(padded_ids))
    assert not torch.allclose(unmasked[:, :8], reference, atol=1e-3)


def test_pretraining_outputs_at_masked_positions_only():
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG).eval()  # no dropout: the same forward twice gives the same hidden states
    ids, types, mask = _inputs()
    positions = torch.tensor([[1, 3, 0], [2, 0, 0], [0, 0, 0]])
    labels = torch.tensor([[7, 8, -100], [9, -100, -100], [-100, -100, -100]])
    out = model(ids, types, mask, positions, labels, torch.tensor([0, 1, 0]))
    assert out["mlm_logits"].shape == (3, CONFIG.vocab_size)  # N = 3 real masked positions
    assert out["nsp_logits"].shape == (3, 2)
    assert int(out["mlm_count"]) == 3
    assert torch.allclose(out["loss"], out["mlm_loss"] + out["nsp_loss"])
    # the logits rows are the head applied to exactly the gathered positions, in batch-major order
    hidden = model.bert(ids, types, mask)
    gathered, got_labels = gather_masked(hidden, positions, labels)
    assert torch.equal(got_labels, torch.tensor([7, 8, 9]))
    assert torch.allclose(gathered, torch.stack([hidden[0, 1], hidden[0, 3], hidden[1, 2]]))
    expected = model.mlm_head(gathered, model.bert.embeddings.word_embeddings.weight)
    assert torch.allclose(out["mlm_logits"], expected, atol=1e-6)
    # without NSP labels the loss is the MLM loss alone
    out2 = model(ids, types, mask, positions, labels, None)
    assert out2["nsp_loss"] is None and torch.allclose(out2["loss"], out2["mlm_loss"])
    # mlm_correct counts argmax hits
    assert int(out["mlm_correct"]) == int((out["mlm_logits"].argmax(-1) == torch.tensor([7, 8, 9])).sum())


def test_mlm_decoder_is_tied_to_word_embeddings():
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG)
    names = [n for n, _ in model.named_parameters()]
    vocab_matrices = [n for n, p in model.named_parameters() if p.shape == (CONFIG.vocab_size, CONFIG.hidden_size)]
    assert vocab_matrices == ["bert.embeddings.word_embeddings.weight"], names
    ids, types, mask = _inputs()
    positions = torch.tensor([[1], [2], [3]])
    labels = torch.tensor([[7], [8], [9]])
    # gradient of the MLM loss reaches rows of the embedding that no input token used (only via the decoder)
    ids = ids.clamp(max=CONFIG.vocab_size - 11)  # tokens >= vocab-10 never appear in the input
    out = model(ids, types, mask, positions, labels, None)
    out["loss"].backward()
    grad = model.bert.embeddings.word_embeddings.weight.grad
    assert grad[-10:].abs().sum() > 0
    # and editing an embedding row changes the logit of that token
    with torch.no_grad():
        before = model(ids, types, mask, positions, labels, None)["mlm_logits"][:, -1].clone()
        model.bert.embeddings.word_embeddings.weight[-1] += 1.0
        after = model(ids, types, mask, positions, labels, None)["mlm_logits"][:, -1]
    assert not torch.allclose(before, after)


def test_bert_initialisation():
    torch.manual_seed(0)
    model = BertForPreTraining(dataclasses.replace(CONFIG, hidden_size=64, intermediate_size=256))
    for name, p in model.named_parameters():
        if "LayerNorm.weight" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        elif name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
        else:
            assert abs(float(p.detach().std()) - 0.02) < 0.004, (name, float(p.detach().std()))


def test_config_round_trip_and_errors():
    assert BertConfig.from_dict(CONFIG.to_dict()) == CONFIG
    with pytest.raises(ContractError, match="unknown model config field.*hidden_sise"):
        BertConfig.from_dict({**CONFIG.to_dict(), "hidden_sise": 3}, source="x/config.json")
    with pytest.raises(ContractError, match="x/config.json: missing model config field.*num_layers"):
        BertConfig.from_dict({k: v for k, v in CONFIG.to_dict().items() if k != "num_layers"}, source="x/config.json")
    with pytest.raises(ContractError, match="'hidden_size' must be int"):
        BertConfig.from_dict({**CONFIG.to_dict(), "hidden_size": "32"})
    with pytest.raises(ContractError, match="not divisible"):
        BertConfig.from_dict({**CONFIG.to_dict(), "num_heads": 5})


def test_sequence_longer_than_positions_is_refused():
    model = BertModel(CONFIG)
    ids = torch.ones(1, CONFIG.max_position_embeddings + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings"):
        model(ids)


def test_static_shape_prediction_gives_the_same_loss_and_gradients():
    """pretrain.static_shapes: logits at all B x P slots (padding slots ignored) — same loss, accuracy counts and
    gradients as gathering only the real masked positions, with shapes fixed by [B, P]."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                        max_position_embeddings=24, hidden_dropout=0.0, attention_dropout=0.0)
    model = BertForPreTraining(config)
    ids = torch.randint(5, 50, (3, 20))
    positions = torch.tensor([[1, 4, 7, 0], [2, 3, 0, 0], [5, 6, 8, 9]])
    labels = torch.where(torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]).bool(),
                         torch.gather(ids, 1, positions), torch.full_like(positions, -100))
    args = (ids, torch.zeros_like(ids), torch.ones_like(ids), positions, labels, torch.tensor([0, 1, 0]))
    results = {}
    for static in (False, True):
        model.zero_grad()
        model.static_shapes = static
        out = model(*args)
        out["loss"].backward()
        results[static] = (out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (dynamic, grads_d), (static, grads_s) = results[False], results[True]
    assert static["mlm_logits"].shape == (12, 50) and dynamic["mlm_logits"].shape == (9, 50)
    assert torch.allclose(static["mlm_loss"], dynamic["mlm_loss"], atol=1e-6)
    assert int(static["mlm_count"]) == int(dynamic["mlm_count"]) == 9
    assert int(static["mlm_correct"]) == int(dynamic["mlm_correct"])
    assert grads_s.keys() == grads_d.keys()
    for name in grads_d:
        assert torch.allclose(grads_s[name], grads_d[name], atol=1e-6), name
    # a batch without any masked token: loss 0, no NaN
    empty = model(*args[:4], torch.full_like(labels, -100), args[5])
    assert float(empty["mlm_loss"]) == 0.0 and int(empty["mlm_count"]) == 0
