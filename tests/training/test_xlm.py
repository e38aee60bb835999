"""XLM: CLM is causal (a later token never changes an earlier output) and predicts the next token; clm and
xlm_mlm losses fall through training.pretrain on tiny shards, tlm's in an AdamW loop over batches made as the
pipeline and the loader make them (preprocessing.segments.tlm_pair rows, masked at read time, collated with
training.data.translation_inputs);
the language embeddings get gradient; monolingual MLM takes each row's language from the batch; the joint
MLM + TLM loader alternates two shard sets step by step, maps languages by code and refuses what it cannot train;
the recipes (xlm-base, tiny-xlm, tiny-xlm-tlm, mbert-base, tiny-mbert) hold the papers' values.

The TLM pairs of the loss test are generated here (two synthetic vocabularies and a word-for-word translation,
so that only the translation gives a masked word away); real UDHR pairs and multilingual rows go through the
pipeline in tests/preprocessing/test_xlm_languages.py."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertfactory.errors import ConfigError, ContractError
from flows.recipe import load_recipe
from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker
from preprocessing.segments import tlm_pair
from preprocessing.shards import Instance
from training.checkpoint import load_pretrained
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.models.bert.model import IGNORE_INDEX
from training.describe import meta_model
from training.models.registry import get_architecture
from training.models.xlm.model import XlmConfig, XlmForPreTraining
from training.objectives import get_objective_spec
from training.data import PretrainBatches, collate, masked_at_read_time, translation_inputs
from training.objectives.xlm import clm, next_token_targets, tlm, xlm_mlm, xlm_mlm_tlm
from training.pretrain import pretrain
from training.trainer import Window
from training.xlm_data import AlternatingBatches, language_map, prepare_batches

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIALS = frozenset(range(5))
WORDS = 30  # per language: language 0 has ids 5..34, language 1 ids 35..64
VOCAB = 5 + 2 * WORDS
REPO = Path(__file__).resolve().parents[2]
TRANSLATION = random.Random(0).sample(range(WORDS), WORDS)  # word k of language 0 -> word TRANSLATION[k] of 1


def _pair(rng: random.Random, flip: bool) -> tuple[list[int], int, list[int], int]:
    """(source ids, source language, target ids, target language): a sentence and its word-for-word translation."""
    words = [rng.randrange(WORDS) for _ in range(rng.randrange(3, 9))]
    en = [5 + w for w in words]
    fr = [5 + WORDS + TRANSLATION[w] for w in words]
    return (fr, 1, en, 0) if flip else (en, 0, fr, 1)


def _masker(seed: int = 5, **masking) -> Masker:
    cfg = MaskingConfig(**{"variants": 1, "max_predictions_per_seq": 20, **masking})
    return Masker(cfg, seed=seed, vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIALS)


def _tlm_batch(masker: Masker, pairs, pair_ids, epoch: int) -> dict[str, torch.Tensor]:
    """The pairs as the pipeline lays them out (tlm-pairs rows) and the loader serves them under dynamic masking."""
    instances = []
    for pair_id, (source, source_language, target, target_language) in zip(pair_ids, pairs):
        row = tlm_pair(pair_id, source, target, source_language, target_language, 32, CLS, SEP)
        unmasked = Instance(input_ids=np.asarray(row.input_ids, np.int64), len_a=row.len_a, nsp_label=0,
                            mask_positions=np.zeros(0, np.int64), mask_tokens=np.zeros(0, np.int64),
                            doc_id=pair_id, lang_a=row.lang_a, lang_b=row.lang_b)
        instances.append(masked_at_read_time(masker, unmasked, epoch, pair_id))
    batch = collate(instances, PAD, masker.cfg.max_predictions_per_seq)
    batch.update(translation_inputs(instances, batch["input_ids"].shape[1]))
    return batch


def _xlm(**kw) -> XlmForPreTraining:
    cfg = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
               max_position_embeddings=32, num_languages=2, hidden_dropout=0.0, attention_dropout=0.0)
    return XlmForPreTraining(XlmConfig(**{**cfg, **kw}))


def test_clm_never_attends_to_later_tokens():
    torch.manual_seed(3)
    model = _xlm().eval()
    ids = torch.randint(5, VOCAB, (2, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    with torch.no_grad():
        before = model.bert(ids, torch.zeros_like(ids), mask, causal=True)
        for k in (1, 5, 8, 11):
            changed = ids.clone()
            changed[:, k] = (changed[:, k] + 7 - 5) % (VOCAB - 5) + 5
            after = model.bert(changed, torch.zeros_like(ids), mask, causal=True)
            assert torch.allclose(after[:, :k], before[:, :k], atol=1e-6), k
            assert not torch.allclose(after[0, k:], before[0, k:], atol=1e-4), k
        # without the causal mask an earlier output does change
        full_before = model.bert(ids, torch.zeros_like(ids), mask)
        changed = ids.clone()
        changed[:, 11] = 5 if ids[0, 11] != 5 else 6
        assert not torch.allclose(model.bert(changed, torch.zeros_like(ids), mask)[0, :3], full_before[0, :3])


def test_next_token_targets_by_hand():
    ids = torch.tensor([[2, 10, 11, 3, 12, 3], [2, 20, 3, 0, 0, 0]])
    positions, labels = next_token_targets(ids, (ids != 0).long())
    assert positions.tolist() == [[0, 1, 2, 3, 4]] * 2
    assert labels.tolist() == [[10, 11, 3, 12, 3], [20, 3, -100, -100, -100]]


def test_clm_undoes_the_masks_before_predicting():
    torch.manual_seed(4)
    model = _xlm()
    batch = {"input_ids": torch.tensor([[2, 10, MASK, 12, 3]]), "token_type_ids": torch.zeros(1, 5, dtype=torch.long),
             "attention_mask": torch.ones(1, 5, dtype=torch.long), "masked_positions": torch.tensor([[2, 0]]),
             "masked_labels": torch.tensor([[11, IGNORE_INDEX]]), "nsp_labels": torch.zeros(1, dtype=torch.long)}
    out = clm(model, batch)
    assert out["clm_count"].item() == 4
    clean = dict(batch, input_ids=torch.tensor([[2, 10, 11, 12, 3]]))
    assert torch.equal(clm(model, clean)["clm_loss"], out["clm_loss"])


def _metrics(run):
    return [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


# CLM on the counting text is nearly deterministic (the next word follows from the current one); MLM's targets
# are 15 % of the tokens and learn slower in 150 steps (the same margins as BERT's test_pretrain)
@pytest.mark.parametrize("objective,name,drop,acc", [("clm", "clm", 1.0, 0.25), ("xlm_mlm", "mlm", 0.5, 5 / 45)])
def test_clm_and_monolingual_mlm_losses_fall_through_pretrain(run_factory, objective, name, drop, acc):
    run = run_factory(objective, train_rows=128, heldout_rows=16)
    model_cfg = ModelConfig(hidden_size=48, num_layers=2, num_heads=2, intermediate_size=96,
                            max_position_embeddings=32, num_languages=3, xlm={"language_id": 2})
    cfg = PretrainConfig(objective=objective, batch_size=16, max_steps=150, warmup_steps=10, learning_rate=5e-3,
                         log_every=25, save_every=1000, seed=6, num_threads=1)
    pretrain(model_cfg, cfg, run)
    metrics = _metrics(run)
    first, last = metrics[0], metrics[-1]
    assert last[f"{name}_loss"] < first[f"{name}_loss"] - drop, (first, last)
    assert last[f"{name}_acc"] > acc, last  # chance is 1/45
    model, config, _ = load_pretrained(run / "pretrain" / "final")
    assert isinstance(model, XlmForPreTraining) and config.language_id == 2 and config.num_languages == 3
    # only language 2 was ever seen: its embedding moved away from the initialisation, the others did not get
    # gradient (AdamW's weight decay alone shrinks them by at most (1 - lr * 0.01) per step)
    torch.manual_seed(cfg.seed)
    init = XlmForPreTraining(config).bert.embeddings.language_embeddings.weight
    trained = model.bert.embeddings.language_embeddings.weight
    moved = (trained - init).norm(dim=-1)
    assert moved[2] > 10 * max(moved[0], moved[1]), moved
    # the fine-tuning encoder fills in language 2 itself (BertModel's calling convention)
    ids = torch.tensor([[2, 10, 11, 3]])
    with torch.no_grad():
        implicit = model.backbone()(ids, torch.zeros_like(ids), torch.ones_like(ids))
        explicit = model.backbone()(ids, torch.zeros_like(ids), torch.ones_like(ids), language_ids=torch.full_like(ids, 2))
    assert torch.equal(implicit, explicit)


def test_tlm_loss_falls_and_both_language_embeddings_learn():
    torch.manual_seed(7)
    masker = _masker(seed=8)
    model = _xlm(hidden_size=64, intermediate_size=128)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    rng = random.Random(9)
    pairs = [_pair(rng, flip=i % 2 == 1) for i in range(512)]
    losses, grads = [], []
    for step in range(500):
        start = (step * 16) % len(pairs)
        batch = _tlm_batch(masker, pairs[start:start + 16], range(start, start + 16), epoch=step * 16 // len(pairs))
        out = tlm(model, batch)
        out["loss"].backward()
        if step == 0:
            grads = model.bert.embeddings.language_embeddings.weight.grad.abs().sum(-1).tolist()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out["tlm_loss"].item())
    assert all(g > 0 for g in grads), grads  # both languages' embeddings get gradient
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    # a masked word is one of 30 of its language (log 30 = 3.4 nats without context); only its translation on the
    # other side gives it away (the words of a sentence are independent). The model finds that alignment after
    # ~300 steps (seeds 7, 11, 13: loss ~0.65 at step 500)
    assert first > math.log(WORDS) and last < 0.4 * math.log(WORDS), (first, last)


def test_config_and_objective_contracts():
    arch = get_architecture("XlmForPreTraining")
    with pytest.raises(ConfigError, match="model.xlm.language_id=2"):
        arch.from_model_config(ModelConfig(num_languages=2, xlm={"language_id": 2}), 100, 0)
    with pytest.raises(ConfigError, match="num_languages must be >= 1"):
        arch.from_model_config(ModelConfig(), 100, 0)
    assert {get_objective_spec(name).architecture for name in ("clm", "tlm", "xlm_mlm")} == {"XlmForPreTraining"}
    with pytest.raises(ContractError, match="tlm-pairs"):
        get_objective_spec("tlm").check_shards({"instance_format": {"name": "nsp-pairs"}}, "m.json")
    with pytest.raises(ValueError, match="language_id 3"):
        XlmConfig(vocab_size=10, hidden_size=4, num_layers=1, num_heads=1, intermediate_size=4,
                  max_position_embeddings=8, num_languages=2, language_id=3)


def test_recipes_validate():
    recipe = load_recipe(REPO / "configs" / "xlm-base.yaml")
    config = get_architecture("XlmForPreTraining").from_model_config(recipe.model, 95000, 0)
    # the 15-language XNLI model: 12 x 1024, 8 heads, FFN 4096, 15 language embeddings, no segments, MLM + TLM
    assert (config.num_layers, config.hidden_size, config.num_heads, config.intermediate_size) == (12, 1024, 8, 4096)
    assert (config.num_languages, config.type_vocab_size) == (15, 1) and recipe.model.xlm.languages[4] == "en"
    assert recipe.pretrain.objective == "xlm_mlm_tlm" and recipe.pretrain.tlm_shards == "tlm/shards"
    assert (recipe.pretrain.batch_size, recipe.pretrain.learning_rate, recipe.preprocess.instances.max_seq_len) == \
        (64, 1e-4, 256)
    assert recipe.preprocess.tokenizer.vocab_size == 95000 and recipe.preprocess.language_sampling.alpha == 0.5
    model = meta_model(recipe.model, 95000, recipe.pretrain.objective)
    assert model.bert.embeddings.language_embeddings.weight.shape == (15, 1024)
    assert not hasattr(model, "nsp_head")
    tiny = load_recipe(REPO / "configs" / "tiny-xlm.yaml")
    assert tiny.pretrain.objective == "xlm_mlm" and tiny.preprocess.language_sampling.enabled
    get_architecture("XlmForPreTraining").from_model_config(tiny.model, 6000, 0)
    pairs = load_recipe(REPO / "configs" / "tiny-xlm-tlm.yaml")
    assert pairs.corpus.format == "parallel" and pairs.preprocess.instances.format == "tlm-pairs"
    # mBERT: one BERT (no language embedding), cased multilingual WordPiece, smoothing 0.7 for data and vocabulary
    mbert = load_recipe(REPO / "configs" / "mbert-base.yaml")
    assert mbert.pretrain.objective == "mlm_nsp" and mbert.model.num_languages == 0 and mbert.model.xlm is None
    tok = mbert.preprocess.tokenizer
    assert (tok.kind, tok.vocab_size, tok.lowercase, tok.sample_alpha) == ("wordpiece", 119547, False, 0.7)
    assert mbert.preprocess.language_sampling.enabled and mbert.preprocess.language_sampling.alpha == 0.7
    assert (mbert.model.num_layers, mbert.model.hidden_size, mbert.model.num_heads) == (12, 768, 12)
    tiny_mbert = load_recipe(REPO / "configs" / "tiny-mbert.yaml")
    assert tiny_mbert.pretrain.objective == "mlm_nsp" and tiny_mbert.model.num_languages == 0


def test_language_map_by_code_and_its_refusals():
    assert language_map(["de", "en", "fr"], ["fr", "en", "de"], "m.json").tolist() == [2, 1, 0]
    with pytest.raises(ConfigError, match="m.json holds rows in language\\(s\\) sw"):
        language_map(["en", "sw"], ["en", "fr"], "m.json")
    with pytest.raises(ValueError, match="lists en more than once"):
        ModelConfig(num_languages=2, xlm={"languages": ["en", "en"]})
    with pytest.raises(ConfigError, match="names 3 languages"):
        get_architecture("XlmForPreTraining").from_model_config(
            ModelConfig(num_languages=2, xlm={"languages": ["en", "fr", "de"]}), 100, 0)


def test_joint_objective_needs_its_pair_shards(shared_tiny_run):
    batches = PretrainBatches.open(shared_tiny_run / "shards", None, batch_size=8, seed=1)
    model_cfg = ModelConfig(num_languages=2)
    with pytest.raises(ConfigError, match="set pretrain.tlm_shards"):
        prepare_batches(batches, model_cfg, PretrainConfig(objective="xlm_mlm_tlm", warmup_steps=0), shared_tiny_run)
    with pytest.raises(ConfigError, match="read by objective xlm_mlm_tlm only"):
        prepare_batches(batches, model_cfg, PretrainConfig(objective="xlm_mlm", tlm_shards="x", warmup_steps=0),
                        shared_tiny_run)
    with pytest.raises(ConfigError, match="no shard set at"):
        prepare_batches(batches, model_cfg, PretrainConfig(objective="xlm_mlm_tlm", tlm_shards="nowhere",
                                                           warmup_steps=0), shared_tiny_run)
    # a v1-style shard set without languages per row: nothing to map, the model's language_id for every token
    assert prepare_batches(batches, model_cfg, PretrainConfig(objective="xlm_mlm", warmup_steps=0),
                           shared_tiny_run) is batches
    assert "language_ids" not in batches.batch(0)


def test_alternating_batches_read_each_set_in_its_own_order(run_factory):
    one = PretrainBatches.open(run_factory("a", train_rows=64) / "shards", None, batch_size=8, seed=1)
    two = PretrainBatches.open(run_factory("b", train_rows=48, seed=9) / "shards", None, batch_size=8, seed=1)
    both = AlternatingBatches(one, two)
    assert both.steps_per_epoch == 2 * one.steps_per_epoch == 16
    for step in range(20):
        own, index = (two, step // 2) if step % 2 else (one, step // 2)
        assert both.source(step) == (own, index)
        assert all(torch.equal(v, own.batch(index)[k]) for k, v in both.batch(step).items())
    # step 13 is TLM batch 6: epoch 1 of the 48-row set (6 batches per epoch), its first batch
    pos = both.position(13)
    assert (pos.step, pos.epoch, pos.batch_in_epoch) == (13, 1, 0)


def test_a_loss_reported_every_other_step_is_averaged_over_those_steps():
    window = Window()
    for step in range(4):
        name = "tlm_loss" if step % 2 else "mlm_loss"
        window.add({"loss": float(step), name: float(step)}, tokens=10, seconds=1.0)
    means = window.means()
    assert means["loss"] == 1.5 and means["mlm_loss"] == 1.0 and means["tlm_loss"] == 2.0
    restored = Window.from_state(json.loads(json.dumps(window.to_state())))
    assert restored.means() == means
    old = window.to_state()
    del old["loss_steps"]  # a checkpoint written before loss_steps: every loss counted over every step
    assert Window.from_state(old).means()["mlm_loss"] == 0.5


def test_monolingual_mlm_takes_each_rows_language_from_the_batch():
    torch.manual_seed(0)
    model = _xlm(num_languages=3)
    ids = torch.tensor([[CLS, 10, MASK, 12, SEP], [CLS, 40, 41, MASK, SEP]])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "masked_positions": torch.tensor([[2], [3]]), "masked_labels": torch.tensor([[11], [42]]),
             "language_ids": torch.tensor([[2] * 5, [1] * 5])}
    xlm_mlm(model, batch)["loss"].backward()
    grads = model.bert.embeddings.language_embeddings.weight.grad.abs().sum(-1)
    assert grads[0] == 0 and grads[1] > 0 and grads[2] > 0  # languages 1 and 2, not the default 0
    model.zero_grad()
    del batch["language_ids"]  # shards of one language: the config's language_id (0) at every token
    xlm_mlm_tlm(model, batch)["loss"].backward()
    grads = model.bert.embeddings.language_embeddings.weight.grad.abs().sum(-1)
    assert grads[0] > 0 and grads[1] == 0 and grads[2] == 0


def test_static_width_padding_keeps_languages_and_positions_aligned():
    from training.xla import pad_to_width

    ids = torch.tensor([[CLS, 10, SEP]])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "language_ids": torch.tensor([[2, 2, 2]]), "position_ids": torch.tensor([[0, 1, 1]])}
    out = pad_to_width(batch, 5, PAD)
    assert out["language_ids"].tolist() == [[2, 2, 2, 0, 0]] and out["position_ids"].tolist() == [[0, 1, 1, 0, 0]]
    assert out["input_ids"].tolist() == [[CLS, 10, SEP, PAD, PAD]]
    assert "language_ids" not in pad_to_width({k: batch[k] for k in ("input_ids", "token_type_ids",
                                                                     "attention_mask")}, 5, PAD)
