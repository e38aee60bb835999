"""XLNet: permutation masks (as matrices and behaviourally), partial-prediction targets, agreement with the
Hugging Face reference implementation, gradients, the fine-tuning encoder, memory, learning and determinism."""

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import torch

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from training.data import PretrainBatches
from training.models.bert.model import IGNORE_INDEX
from training.models.xlnet.model import (
    XLNetConfig, XLNetForPreTraining, permutation_masks, prediction_targets, sample_factorisation_order,
)
from training.objectives.original_ids import original_ids
from training.objectives.plm import permutation_lm

CONFIG = XLNetConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                     predict_fraction=3)


def _inputs(seed: int = 0, batch: int = 3, length: int = 12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG.vocab_size, (batch, length), generator=g)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    mask = torch.ones_like(ids)
    for row, pads in zip(range(1, batch), (3, 5)):  # row 0 full, then shorter rows
        mask[row, length - pads:] = 0
    ids = ids.masked_fill(mask == 0, CONFIG.pad_token_id)
    types = types.masked_fill(mask == 0, 0)
    return ids, types, mask


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batches(run_dir: Path, batch_size: int = 16, seed: int = 0) -> PretrainBatches:
    return PretrainBatches.open(run_dir / "shards", sha256_file(run_dir / "tokenizer" / "tokenizer.json"),
                                batch_size=batch_size, seed=seed)


# ------------------------------------------------------------------------------------------------- masks


def test_masks_follow_the_sampled_order_and_exclude_padding():
    ids, _, mask = _inputs()
    rank = sample_factorisation_order(mask, torch.Generator().manual_seed(3))
    content, query = permutation_masks(rank, mask)
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        real = list(range(n))
        order = sorted(range(ids.shape[1]), key=lambda i: int(rank[b, i]))  # positions, first in order first
        assert sorted(order[:n]) == real, "padding must come after every real token in the order"
        step = {pos: k for k, pos in enumerate(order)}
        for i in range(ids.shape[1]):
            for j in range(ids.shape[1]):
                key_real = j < n
                assert bool(content[b, i, j]) == (key_real and step[j] <= step[i]), (b, i, j)
                assert bool(query[b, i, j]) == (key_real and step[j] < step[i]), (b, i, j)
        assert not query[b].diagonal().any()  # the query stream never sees its own content
        assert content[b].diagonal()[:n].all()


def test_orders_are_uniform_permutations_and_seeded():
    mask = torch.ones(4800, 4, dtype=torch.long)
    rank = sample_factorisation_order(mask, torch.Generator().manual_seed(0))
    counts = {}
    for row in rank.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert set(counts) == set(itertools.permutations(range(4)))  # every order, nothing else
    expected = 4800 / 24
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 60, f"orders far from uniform (chi2 {chi2:.1f}, 23 dof)"
    again = sample_factorisation_order(mask[:8], torch.Generator().manual_seed(0))
    other = sample_factorisation_order(mask[:8], torch.Generator().manual_seed(1))
    assert torch.equal(again, rank[:8]) and not torch.equal(other, rank[:8])


def test_targets_are_the_last_fraction_of_each_order():
    ids, _, mask = _inputs(length=13)
    rank = sample_factorisation_order(mask, torch.Generator().manual_seed(5))
    positions, labels = prediction_targets(ids, rank, mask, predict_fraction=3)
    assert positions.shape == (3, 13 // 3)
    for b in range(3):
        n = int(mask[b].sum())
        want = sorted(i for i in range(n) if int(rank[b, i]) >= n - max(1, n // 3))
        got = [int(p) for p, l in zip(positions[b], labels[b]) if l != IGNORE_INDEX]
        assert got == want and len(want) == max(1, n // 3)
        assert [int(l) for l in labels[b] if l != IGNORE_INDEX] == [int(ids[b, p]) for p in want]


def test_later_tokens_in_the_order_never_reach_earlier_positions():
    torch.manual_seed(0)
    model = XLNetForPreTraining(CONFIG).eval()  # dropout off
    ids, types, mask = _inputs(batch=2, length=10)
    rank = sample_factorisation_order(mask, torch.Generator().manual_seed(7))
    everywhere = torch.arange(10).expand(2, 10)  # query stream at every position, to watch all of them
    with torch.no_grad():
        h, g, _ = model.transformer.two_stream(ids, types, mask, rank, everywhere)
        changed_later = 0
        for b, p in itertools.product(range(2), range(10)):
            perturbed = ids.clone()
            perturbed[b, p] = 5 + (int(ids[b, p]) - 5 + 17) % (CONFIG.vocab_size - 5)  # another word here
            h2, g2, _ = model.transformer.two_stream(perturbed, types, mask, rank, everywhere)
            if not mask[b, p]:  # padding: invisible to every real position in both streams
                assert torch.allclose(h2[b][mask[b] == 1], h[b][mask[b] == 1], atol=1e-6)
                assert torch.allclose(g2[b][mask[b] == 1], g[b][mask[b] == 1], atol=1e-6)
                continue
            for i in range(int(mask[b].sum())):
                same_h = torch.allclose(h2[b, i], h[b, i], atol=1e-6)
                same_g = torch.allclose(g2[b, i], g[b, i], atol=1e-6)
                if rank[b, i] < rank[b, p]:
                    assert same_h and same_g, f"row {b}: position {i} saw position {p}, later in the order"
                elif i == p:
                    assert same_g, f"row {b}: the query stream at {p} saw its own content"
                    assert not same_h  # the content stream does see itself
                else:
                    changed_later += int(not same_h) + int(not same_g)
            assert torch.equal(h2[1 - b], h[1 - b])  # and nothing crosses rows
        assert changed_later > 50  # the perturbations do travel forward in the order


# ----------------------------------------------------------------------------- reference implementation


def _copy_into_hf(ours: XLNetForPreTraining, hf, config: XLNetConfig) -> None:
    h, n = config.hidden_size, config.num_heads
    hf.word_embedding.weight.data.copy_(ours.transformer.word_embeddings.weight)
    hf.mask_emb.data.copy_(ours.transformer.mask_emb.view(1, 1, h))
    for mine, theirs in zip(ours.transformer.layer, hf.layer):
        a, ra = mine.attention, theirs.rel_attn
        for name, linear in (("q", a.query), ("k", a.key), ("v", a.value), ("r", a.position)):
            getattr(ra, name).data.copy_(linear.weight.t().reshape(h, n, h // n))
        ra.o.data.copy_(mine.attention_output.dense.weight.reshape(h, n, h // n))
        ra.r_w_bias.data.copy_(a.content_bias)
        ra.r_r_bias.data.copy_(a.position_bias)
        ra.r_s_bias.data.copy_(a.segment_bias)
        ra.seg_embed.data.copy_(a.segment_embeddings)
        ra.layer_norm.load_state_dict(mine.attention_output.LayerNorm.state_dict())
        theirs.ff.layer_1.load_state_dict(mine.intermediate.dense.state_dict())
        theirs.ff.layer_2.load_state_dict(mine.output.dense.state_dict())
        theirs.ff.layer_norm.load_state_dict(mine.output.LayerNorm.state_dict())


def test_both_streams_match_the_hugging_face_xlnet():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ours = XLNetForPreTraining(CONFIG).eval()
    for p in ours.parameters():  # larger weights than the init, so that every term matters
        p.data.add_(torch.randn_like(p) * 0.05)
    assert all(layer.attention_output.dense.bias is None for layer in ours.transformer.layer)  # as XLNet's `o`
    hf = transformers.XLNetModel(transformers.XLNetConfig(
        vocab_size=CONFIG.vocab_size, d_model=CONFIG.hidden_size, n_layer=CONFIG.num_layers, n_head=CONFIG.num_heads,
        d_inner=CONFIG.intermediate_size, ff_activation="gelu", untie_r=True, attn_type="bi", dropout=0.0,
        layer_norm_eps=CONFIG.layer_norm_eps, mem_len=None)).eval()
    _copy_into_hf(ours, hf, CONFIG)
    ids, types, mask = _inputs()
    real = mask.bool()
    with torch.no_grad():
        mine = ours.encode(ids, types, mask)
        theirs = hf(input_ids=ids, token_type_ids=types, attention_mask=mask.float()).last_hidden_state
        assert (mine - theirs)[real].abs().max() < 1e-5
        rank = sample_factorisation_order(mask, torch.Generator().manual_seed(1))
        positions, labels = prediction_targets(ids, rank, mask, CONFIG.predict_fraction)
        _, g, _ = ours.transformer.two_stream(ids, types, mask, rank, positions)
        cannot_see = ~(rank[:, None, :] < rank[:, :, None])  # HF perm_mask: 1 = may not attend
        target_mapping = torch.nn.functional.one_hot(positions, ids.shape[1]).float()
        theirs_g = hf(input_ids=ids, token_type_ids=types, attention_mask=mask.float(), perm_mask=cannot_see.float(),
                      target_mapping=target_mapping).last_hidden_state
    targets = labels != IGNORE_INDEX
    assert int(targets.sum()) >= 6
    assert (g - theirs_g)[targets].abs().max() < 1e-5


# ------------------------------------------------------------------------------------- gradients, encoder


def test_every_pretraining_parameter_gets_a_gradient():
    torch.manual_seed(0)
    model = XLNetForPreTraining(dataclasses.replace(CONFIG, mem_len=4)).train()
    ids, types, mask = _inputs()
    out = model(ids, types, mask, perm_seed=0)
    out["loss"].backward()
    assert out["loss"].dim() == 0 and torch.isfinite(out["loss"])
    assert int(out["plm_count"]) >= 6 and 0 <= int(out["plm_correct"]) <= int(out["plm_count"])
    for name, p in model.named_parameters():
        if name.startswith("transformer.pooler."):  # documented: trained by fine-tuning only
            assert p.grad is None, name
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name} got no gradient"


def test_encoder_path_has_no_query_stream_and_ignores_padding():
    torch.manual_seed(0)
    model = XLNetForPreTraining(CONFIG).eval()
    ids, types, mask = _inputs(batch=1, length=8)
    reference = model.encode(ids, types, mask)
    assert reference.shape == (1, 8, CONFIG.hidden_size)
    assert model.backbone()(ids, types, mask).shape == (1, 8, CONFIG.hidden_size)
    for extra in (1, 6):
        pad = torch.zeros(1, extra, dtype=torch.long)
        out = model.encode(torch.cat([ids, pad], 1), torch.cat([types, pad], 1), torch.cat([mask, pad], 1))
        assert torch.allclose(out[:, :8], reference, atol=1e-5), f"real positions changed with {extra} pads"
    unmasked = model.encode(torch.cat([ids, pad], 1), torch.cat([types, pad], 1), torch.ones(1, 8 + extra).long())
    assert not torch.allclose(unmasked[:, :8], reference, atol=1e-3)  # the padding mask is what protects them
    # no query stream: its initial state w neither changes the output nor receives a gradient
    with torch.no_grad():
        model.transformer.mask_emb.add_(1.0)
    assert torch.equal(model.encode(ids, types, mask), reference)
    model.train()
    model.encode(ids, types, mask).sum().backward()
    assert model.transformer.mask_emb.grad is None
    assert model.transformer.layer[0].attention.segment_embeddings.grad.abs().sum() > 0


def test_memory_is_used_detached_and_bounded():
    torch.manual_seed(0)
    model = XLNetForPreTraining(dataclasses.replace(CONFIG, mem_len=5)).eval()
    ids, types, mask = _inputs()
    first = model(ids, types, mask, perm_seed=0)
    mems = first["new_mems"]
    assert len(mems) == CONFIG.num_layers
    assert all(m.shape == (3, 5, CONFIG.hidden_size) and not m.requires_grad for m in mems)
    with_mems = model(ids, types, mask, mems=mems, perm_seed=1)
    without = model(ids, types, mask, perm_seed=1)
    assert torch.equal(with_mems["plm_labels"], without["plm_labels"])
    assert not torch.allclose(with_mems["plm_logits"], without["plm_logits"], atol=1e-4)
    assert with_mems["new_mems"][0].shape == (3, 5, CONFIG.hidden_size)


# ---------------------------------------------------------------------------------------------- config


def test_config_round_trip_and_errors():
    config = dataclasses.replace(CONFIG, mem_len=8, dropout=0.0)
    assert XLNetConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ContractError, match="predict_fraction"):
        XLNetConfig.from_dict({**config.to_dict(), "predict_fraction": 0}, "cfg.json")
    with pytest.raises(ContractError, match="cfg.json.*unknown.*max_position_embeddings"):
        XLNetConfig.from_dict({**config.to_dict(), "max_position_embeddings": 512}, "cfg.json")
    with pytest.raises(ContractError, match="'mem_len' must be int"):
        XLNetConfig.from_dict({**config.to_dict(), "mem_len": 1.5}, "cfg.json")
    with pytest.raises(ContractError, match="even"):
        XLNetConfig.from_dict({**config.to_dict(), "hidden_size": 33, "num_heads": 3}, "cfg.json")


# ------------------------------------------------------------------------------------- objective, training


def test_original_ids_undo_the_masks(shared_tiny_run):
    batch = _batches(shared_tiny_run).batch(0)
    ids = original_ids(batch)
    real = batch["masked_labels"] != IGNORE_INDEX
    rows = torch.arange(ids.shape[0])[:, None].expand_as(real)
    assert torch.equal(ids[rows[real], batch["masked_positions"][real]], batch["masked_labels"][real])
    untouched = torch.ones_like(ids, dtype=torch.bool)
    untouched[rows[real], batch["masked_positions"][real]] = False
    assert torch.equal(ids[untouched], batch["input_ids"][untouched])
    assert not (ids == 4).any() and (batch["input_ids"] == 4).any()  # [MASK] gone (the corpus has none)


def _train_plm(batches: PretrainBatches, steps: int, init_seed: int, order_seed: int,
               row_seeds: bool = True) -> list[float]:
    torch.manual_seed(init_seed)
    model = XLNetForPreTraining(XLNetConfig(vocab_size=45, hidden_size=64, num_layers=2, num_heads=4,
                                            intermediate_size=128, dropout=0.0, attention_dropout=0.0,
                                            predict_fraction=4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(order_seed)  # without the loader's row_seeds the objective draws its orders from the global RNG
    losses = []
    for step in range(steps):
        batch = batches.batch(step)
        if not row_seeds:
            del batch["row_seeds"]
        out = permutation_lm(model, batch)
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(out["loss"].detach()))
    return losses


def test_plm_loss_falls_on_the_counting_corpus(shared_tiny_run):
    losses = _train_plm(_batches(shared_tiny_run), steps=250, init_seed=0, order_seed=1)
    start, end = sum(losses[:10]) / 10, sum(losses[-20:]) / 20
    assert start > math.log(45) - 0.5  # untrained: about chance
    assert end < 0.25 * start, f"PLM loss went from {start:.3f} to {end:.3f}"


def test_plm_training_is_deterministic(shared_tiny_run):
    batches = _batches(shared_tiny_run)
    first = _train_plm(batches, steps=6, init_seed=0, order_seed=1)
    assert first == _train_plm(batches, steps=6, init_seed=0, order_seed=1)
    # the orders are the rows' own (row_seeds): the global RNG does not change them ...
    assert first == _train_plm(batches, steps=6, init_seed=0, order_seed=2)
    # ... and come from it for a batch without row_seeds
    drawn = _train_plm(batches, steps=6, init_seed=0, order_seed=1, row_seeds=False)
    assert drawn == _train_plm(batches, steps=6, init_seed=0, order_seed=1, row_seeds=False)
    assert drawn != _train_plm(batches, steps=6, init_seed=0, order_seed=2, row_seeds=False)
    # another loader seed = other orders (and another data order)
    assert first != _train_plm(_batches(shared_tiny_run, seed=1), steps=6, init_seed=0, order_seed=1)
