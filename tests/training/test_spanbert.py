"""SpanBERT: span boundaries derived from sorted masked positions (checked by hand) or read from the shards' stored
span bounds (the same where spans are apart, right where two spans touch), the SBO head as the paper's equation,
shapes, gradient to every SBO parameter, and MLM + SBO losses falling through training.pretrain on tiny shards
re-masked with the real span masker."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from bertfactory.errors import ContractError
from flows.recipe import load_recipe
from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker
from preprocessing.shards import Instance, ShardSet, read_manifest, write_manifest, write_shard
from training.checkpoint import load_pretrained
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.describe import count_parameters, meta_model
from training.models.bert.model import IGNORE_INDEX
from training.models.registry import get_architecture
from training.data import PretrainBatches, collate
from training.models.spanbert.span_boundary import (SpanBoundaryHead, gather_span_boundaries, span_boundaries,
                                           stored_span_boundaries)
from training.models.spanbert.model import SpanBertConfig, SpanBertForPreTraining
from training.objectives import get_objective_spec
from training.objectives.sbo import mlm_sbo
from training.pretrain import pretrain

from .conftest import MASK, SPECIALS

X = IGNORE_INDEX
REPO = Path(__file__).resolve().parents[2]


def _tiny_config(**kw) -> SpanBertConfig:
    base = dict(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0,
                sbo_max_span_tokens=4, sbo_position_size=6)
    return SpanBertConfig(**{**base, **kw})


def test_span_boundaries_by_hand():
    positions = torch.tensor([[3, 4, 5, 9, 12, 13, 0, 0],
                              [1, 7, 8, 9, 10, 11, 0, 0]])
    labels = torch.tensor([[11, 12, 13, 14, 15, 16, X, X],
                           [21, 22, 23, 24, 25, 26, X, X]])
    left, right, relative = span_boundaries(positions, labels)
    assert left[0, :6].tolist() == [2, 2, 2, 8, 11, 11]
    assert right[0, :6].tolist() == [6, 6, 6, 10, 14, 14]
    assert relative[0, :6].tolist() == [0, 1, 2, 0, 0, 1]
    assert left[1, :6].tolist() == [0, 6, 6, 6, 6, 6]
    assert right[1, :6].tolist() == [2, 12, 12, 12, 12, 12]
    assert relative[1, :6].tolist() == [0, 0, 1, 2, 3, 4]


def test_a_padding_slot_never_joins_a_run():
    # real slots ..., 5 then padding slots at position 0 and 6: 6 = 5 + 1 but the slot is padding
    positions = torch.tensor([[4, 5, 6, 0]])
    labels = torch.tensor([[7, 8, X, X]])
    left, right, relative = span_boundaries(positions, labels)
    assert left[0, :2].tolist() == [3, 3] and right[0, :2].tolist() == [6, 6] and relative[0, :2].tolist() == [0, 1]


def test_gather_span_boundaries_reads_the_hidden_states_outside_the_span():
    b, t, h = 2, 12, 3
    hidden = torch.arange(b * t * h, dtype=torch.float32).reshape(b, t, h)
    positions = torch.tensor([[2, 3, 4, 5, 6, 9], [4, 5, 10, 0, 0, 0]])
    labels = torch.tensor([[30, 31, 32, 33, 34, 35], [40, 41, 42, X, X, X]])
    attention_mask = torch.ones(b, t, dtype=torch.int64)
    attention_mask[1, 11:] = 0  # row 1: the span at 10 has its right boundary on padding -> no SBO target
    left, right, rel, got = gather_span_boundaries(hidden, positions, labels, attention_mask, max_span_tokens=4)
    # row 0: span 2..6 (offsets 0..4; offset 4 >= max_span_tokens is dropped), span 9..9; row 1: span 4..5
    assert got.tolist() == [30, 31, 32, 33, 35, 40, 41]
    assert rel.tolist() == [0, 1, 2, 3, 0, 0, 1]
    expect_left = [hidden[0, 1]] * 4 + [hidden[0, 8]] + [hidden[1, 3]] * 2
    expect_right = [hidden[0, 7]] * 4 + [hidden[0, 10]] + [hidden[1, 6]] * 2
    assert torch.equal(left, torch.stack(expect_left)) and torch.equal(right, torch.stack(expect_right))


def test_sbo_head_is_the_papers_equation():
    torch.manual_seed(0)
    head = SpanBoundaryHead(hidden_size=8, vocab_size=20, max_span_tokens=5, position_size=4, layer_norm_eps=1e-12)
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.5)
    words = torch.randn(20, 8)
    left, right, relative = torch.randn(3, 8), torch.randn(3, 8), torch.tensor([0, 4, 2])
    logits = head(left, right, relative, words)
    assert logits.shape == (3, 20)
    h0 = torch.cat([left, right, head.position_embeddings.weight[relative]], dim=-1)
    h1 = F.layer_norm(F.gelu(h0 @ head.dense1.weight.T + head.dense1.bias), (8,), head.LayerNorm1.weight,
                      head.LayerNorm1.bias, 1e-12)
    y = F.layer_norm(F.gelu(h1 @ head.dense2.weight.T + head.dense2.bias), (8,), head.LayerNorm2.weight,
                     head.LayerNorm2.bias, 1e-12)
    assert torch.allclose(logits, y @ words.T + head.bias, atol=1e-5)


def _batch():
    input_ids = torch.tensor([[2, 10, 11, 4, 4, 4, 15, 3, 20, 4, 22, 3],
                              [2, 30, 4, 4, 33, 3, 34, 35, 3, 0, 0, 0]])
    attention_mask = (input_ids != 0).long()
    return {
        "input_ids": input_ids,
        "token_type_ids": torch.zeros_like(input_ids),
        "attention_mask": attention_mask,
        "masked_positions": torch.tensor([[3, 4, 5, 9], [2, 3, 0, 0]]),
        "masked_labels": torch.tensor([[12, 13, 14, 21], [31, 32, X, X]]),
    }


def test_model_outputs_and_tied_decoders():
    torch.manual_seed(1)
    model = SpanBertForPreTraining(_tiny_config())
    out = model(**_batch())
    assert out["mlm_logits"].shape == (6, 50) and out["sbo_logits"].shape == (6, 50)
    assert out["mlm_count"].item() == 6 and out["sbo_count"].item() == 6
    assert torch.allclose(out["loss"], out["mlm_loss"] + out["sbo_loss"])
    assert not hasattr(model, "nsp_head")
    # the SBO decoder is the word-embedding matrix itself: no second V x H matrix
    assert sum(p.numel() for p in model.sbo_head.parameters()) == (
        4 * 6 + (2 * 16 + 6) * 16 + 16 + 2 * 16 + 16 * 16 + 16 + 2 * 16 + 50)
    # longer spans than sbo_max_span_tokens: the tail tokens get MLM targets only
    short = SpanBertForPreTraining(_tiny_config(sbo_max_span_tokens=2))
    out = short(**_batch())
    assert out["mlm_count"].item() == 6 and out["sbo_count"].item() == 5


def test_gradient_reaches_every_sbo_parameter():
    torch.manual_seed(2)
    model = SpanBertForPreTraining(_tiny_config())
    model(**_batch())["sbo_loss"].backward()
    for name, param in model.sbo_head.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    used = model.sbo_head.position_embeddings.weight.grad.abs().sum(-1)
    assert (used[:3] > 0).all() and used[3] == 0  # offsets 0, 1, 2 occur in the batch, 3 does not
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # tied decoder


def _respan(run_dir: Path, max_predictions: int, store_spans: bool = True) -> None:
    """Replace the masks of a make_run shard set by span masks from the real masker (policy span), with the
    spans' bounds in the mask_spans column as the pipeline writes them (`store_spans` False: an older shard
    without the column)."""
    shard_dir = run_dir / "shards"
    manifest = read_manifest(shard_dir)
    cfg = MaskingConfig(policy="span", variants=manifest.mask_variants, max_predictions_per_seq=max_predictions)
    masker = Masker(cfg, seed=7, vocab_size=manifest.tokenizer.vocab_size, mask_id=MASK,
                    special_ids=frozenset(range(len(SPECIALS))))
    splits = {}
    for name, split in manifest.splits.items():
        infos = []
        for info in split.shards:
            path = shard_dir / info.path
            with pa.memory_map(str(path)) as source:
                rows = pa.ipc.open_stream(source).read_all().to_pylist()
            for row in rows:
                positions, tokens, units = masker.variants_with_units(row["input_ids"], row["doc_id"], 0)
                row["mask_positions"], row["mask_tokens"] = positions, tokens
                row["mask_spans"] = [[last - first + 1 for first, last in variant] for variant in units]
            new = write_shard(path, rows, manifest.tokenizer.vocab_size, span_bounds=store_spans)
            infos.append(new.model_copy(update={"path": info.path}))
        splits[name] = split.model_copy(update={"shards": infos})
    write_manifest(shard_dir, manifest.model_copy(update={
        "splits": splits, "masking": {**cfg.model_dump(mode="json"), "variants": cfg.variants},
        "instance_format": {**manifest.instance_format, "name": "nsp-pairs"}}))


def test_mlm_and_sbo_losses_fall_through_pretrain(run_factory):
    run = run_factory("spanbert", train_rows=192, heldout_rows=16, max_seq_len=32, min_seq_len=20)
    _respan(run, max_predictions=8)
    model_cfg = ModelConfig(hidden_size=48, num_layers=2, num_heads=2, intermediate_size=96,
                            max_position_embeddings=32, spanbert={"max_span_tokens": 10, "position_size": 16})
    cfg = PretrainConfig(objective="mlm_sbo", batch_size=16, max_steps=200, warmup_steps=20, learning_rate=5e-3,
                         log_every=25, save_every=1000, seed=4, num_threads=1)
    summary = pretrain(model_cfg, cfg, run)
    metrics = [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    first, last = metrics[0], metrics[-1]
    assert last["sbo_loss"] < first["sbo_loss"] - 1.5, (first, last)
    assert last["mlm_loss"] < first["mlm_loss"] - 1.0, (first, last)
    assert last["sbo_acc"] > 0.4 and last["mlm_acc"] > 0.2, last  # chance is 1/45
    assert summary["status"] == "trained"
    # the checkpoint names the architecture and loads back through the registry
    model, config, _ = load_pretrained(run / "pretrain" / "final")
    assert isinstance(model, SpanBertForPreTraining) and config.sbo_max_span_tokens == 10
    assert model.backbone().config.hidden_size == 48


def test_objective_spec_and_recipes():
    spec = get_objective_spec("mlm_sbo")
    assert spec.architecture == "SpanBertForPreTraining"
    spec.check_shards({"instance_format": {"name": "single-segment"}}, "m.json")
    with pytest.raises(ContractError, match="sop-pairs"):
        spec.check_shards({"instance_format": {"name": "sop-pairs"}}, "m.json")
    recipe = load_recipe(REPO / "configs" / "spanbert-base.yaml")
    assert recipe.pretrain.objective == "mlm_sbo" and recipe.preprocess.masking.policy == "span"
    model = meta_model(recipe.model, 28996, "mlm_sbo")
    backbone = sum(p.numel() for p in model.backbone().parameters())
    assert backbone == 108_310_272  # BERT-base cased (Hugging Face bert-base-cased / SpanBERT/spanbert-base-cased)
    sbo = 15 * 200 + (2 * 768 + 200) * 768 + 768 + 2 * 768 + 768 * 768 + 768 + 2 * 768 + 28996
    mlm = 768 * 768 + 768 + 2 * 768 + 28996
    total, _ = count_parameters(recipe.model, 28996, "mlm_sbo")
    assert total == backbone + mlm + sbo
    tiny = load_recipe(REPO / "configs" / "tiny-spanbert.yaml")
    config = get_architecture("SpanBertForPreTraining").from_model_config(tiny.model, 8000, 0)
    assert (config.sbo_max_span_tokens, config.sbo_position_size) == (15, 32) and tiny.pretrain.objective == "mlm_sbo"


def test_stored_bounds_equal_the_reconstruction_while_spans_are_apart(run_factory):
    run = run_factory("stored", train_rows=64, heldout_rows=16, max_seq_len=32, min_seq_len=20)
    _respan(run, max_predictions=8)
    shards = ShardSet.open(run / "shards", "train")
    batch = PretrainBatches(shards, batch_size=32, seed=3, pad_id=0).batch(0)
    positions, labels = batch["masked_positions"], batch["masked_labels"]
    stored = stored_span_boundaries(positions, batch["span_left"], batch["span_right"])
    rebuilt = span_boundaries(positions, labels)
    real = labels != X
    assert real.sum() > 100
    for got, want in zip(stored, rebuilt):
        assert torch.equal(got[real], want[real])
    torch.manual_seed(3)
    model = SpanBertForPreTraining(_tiny_config(vocab_size=shards.manifest.tokenizer.vocab_size))
    model.eval()
    with torch.no_grad():
        with_bounds = mlm_sbo(model, batch)
        without = mlm_sbo(model, {k: v for k, v in batch.items() if not k.startswith("span_")})
    assert with_bounds["sbo_count"] == without["sbo_count"] > 0
    assert torch.equal(with_bounds["sbo_loss"], without["sbo_loss"])


def test_touching_spans_keep_their_own_boundaries():
    """Two spans side by side (3..4 and 5..6), which runs of masked positions merge into one span 3..6: the stored
    bounds give each its own boundary tokens - the second span's left boundary is the first span's last token."""
    ids = np.arange(20, 32)
    ids[0], ids[-1] = 2, 3
    touching = Instance(input_ids=ids, len_a=12, nsp_label=0, mask_positions=np.array([3, 4, 5, 6, 9]),
                        mask_tokens=np.full(5, MASK), doc_id=1, mask_spans=np.array([2, 2, 1]))
    batch = collate([touching], pad_id=0, max_predictions=6)
    assert batch["span_left"][0, :5].tolist() == [2, 2, 4, 4, 8]
    assert batch["span_right"][0, :5].tolist() == [5, 5, 7, 7, 10]
    hidden = torch.randn(1, 12, 4)
    bounds = stored_span_boundaries(batch["masked_positions"], batch["span_left"], batch["span_right"])
    left, right, relative, labels = gather_span_boundaries(hidden, batch["masked_positions"], batch["masked_labels"],
                                                           batch["attention_mask"], 15, bounds)
    assert labels.tolist() == [23, 24, 25, 26, 29] and relative.tolist() == [0, 1, 0, 1, 0]
    assert torch.equal(left, hidden[0, [2, 2, 4, 4, 8]]) and torch.equal(right, hidden[0, [5, 5, 7, 7, 10]])
    # the reconstruction sees one span 3..6: wrong boundaries and offsets for the second span
    _, _, rel_runs, _ = gather_span_boundaries(hidden, batch["masked_positions"], batch["masked_labels"],
                                               batch["attention_mask"], 15)
    assert rel_runs.tolist() == [0, 1, 2, 3, 0]
    # the model reads the stored bounds: its SBO loss is the one of these targets, not of the merged span
    torch.manual_seed(4)
    model = SpanBertForPreTraining(_tiny_config(vocab_size=40, sbo_max_span_tokens=15))
    model.eval()
    with torch.no_grad():
        out = mlm_sbo(model, batch)
        merged = mlm_sbo(model, {k: v for k, v in batch.items() if not k.startswith("span_")})
        hidden = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        words = model.bert.embeddings.word_embeddings.weight
        logits = model.sbo_head(hidden[0, [2, 2, 4, 4, 8]], hidden[0, [5, 5, 7, 7, 10]],
                                torch.tensor([0, 1, 0, 1, 0]), words)
        expect = F.cross_entropy(logits, torch.tensor([23, 24, 25, 26, 29]))
    assert torch.allclose(out["sbo_loss"], expect, atol=1e-6)
    assert not torch.allclose(merged["sbo_loss"], expect, atol=1e-3)


def test_bounds_that_do_not_cover_the_masks_are_refused():
    inst = Instance(input_ids=np.arange(20, 30), len_a=10, nsp_label=0, mask_positions=np.array([3, 4]),
                    mask_tokens=np.full(2, MASK), doc_id=9, mask_spans=np.array([3]))
    with pytest.raises(ContractError, match="document 9: mask_spans"):
        collate([inst], pad_id=0, max_predictions=4)


def test_shards_without_bounds_fall_back_to_runs_with_a_log_line(run_factory, caplog, monkeypatch):
    run = run_factory("old", train_rows=64, heldout_rows=16, max_seq_len=32, min_seq_len=20)
    _respan(run, max_predictions=8, store_spans=False)
    shards = ShardSet.open(run / "shards", "train")
    assert not shards.span_bounds
    batch = PretrainBatches(shards, batch_size=32, seed=3, pad_id=0).batch(0)
    assert "span_left" not in batch
    monkeypatch.setattr("training.objectives.sbo._said_fallback", False)
    model = SpanBertForPreTraining(_tiny_config(vocab_size=shards.manifest.tokenizer.vocab_size))
    with caplog.at_level(logging.WARNING, logger="training.objectives.sbo"):
        out = mlm_sbo(model, batch)
        mlm_sbo(model, batch)
    said = [r for r in caplog.records if "reconstructs the spans" in r.getMessage()]
    assert len(said) == 1 and out["sbo_count"] > 0
