"""ALBERT as a member of the BERT family: BertForPreTraining under a BertConfig with factorised embeddings and
cross-layer sharing, trained with objective mlm_sop. Published sizes, what each sharing mode stores and computes,
exact save/load with shared tensors, gradients everywhere, a falling loss through the real pretraining stage on
sop-pairs shards, and the refusal of shards of another instance format."""

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from bertfactory.errors import ContractError
from flows.recipe import load_recipe
from preprocessing.config import MaskingConfig
from preprocessing.masking import Masker
from preprocessing.shards import read_manifest, write_manifest, write_shard
from training.checkpoint import load_pretrained, save_pretrained
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.describe import count_parameters, meta_model
from training.models.core.attention import padding_mask
from training.models.bert.model import BertConfig, BertForPreTraining, BertModel
from training.objectives import get_objective
from training.pretrain import pretrain

REPO = Path(__file__).resolve().parents[2]


def _tiny(share: str = "all", groups: int = 1, layers: int = 4, embedding: int | None = 8) -> BertConfig:
    return BertConfig(vocab_size=45, hidden_size=16, num_layers=layers, num_heads=2, intermediate_size=32,
                      max_position_embeddings=32, embedding_size=embedding, share_layers=share,
                      num_layer_groups=groups, hidden_dropout=0.0, attention_dropout=0.0)


# ------------------------------------------------------------------------------------------------ sizes


@pytest.mark.parametrize("recipe, published", [("albert-base.yaml", 12e6), ("albert-large.yaml", 18e6)])
def test_recipes_have_the_published_parameter_counts(recipe, published):
    transformers = pytest.importorskip("transformers")
    r = load_recipe(REPO / "configs" / recipe)
    assert r.pretrain.objective == "mlm_sop" and r.preprocess.instances.format == "sop-pairs"
    assert r.preprocess.masking.policy == "ngram" and r.model.share_layers == "all"
    total, embedding = count_parameters(r.model, r.preprocess.tokenizer.vocab_size, "mlm_sop")
    print(recipe, f"{total:,} parameters ({embedding:,} in the embeddings)")
    assert abs(total - published) / published < 0.02
    assert embedding == 30000 * 128 + 512 * 128 + 2 * 128 + 2 * 128
    # the same model as transformers' AlbertForPreTraining, parameter for parameter
    m = r.model
    hf_config = transformers.AlbertConfig(
        vocab_size=30000, embedding_size=m.embedding_size, hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size, num_hidden_groups=1)
    with torch.device("meta"):
        hf = transformers.AlbertForPreTraining(hf_config)
    assert total == sum(p.numel() for p in hf.parameters())


def test_tiny_albert_recipe_is_the_tiny_twin_with_albert_choices():
    tiny, local = load_recipe(REPO / "configs" / "tiny-albert.yaml"), load_recipe(REPO / "configs" / "local.yaml")
    m = tiny.model
    assert tiny.pretrain.objective == "mlm_sop" and tiny.preprocess.instances.format == "sop-pairs"
    assert tiny.preprocess.masking.policy == "ngram" and m.share_layers == "all" and m.embedding_size < m.hidden_size
    assert tiny.corpus == local.corpus and m.hidden_size == local.model.hidden_size
    assert m.hidden_dropout == m.attention_dropout == 0.0


def _block_sizes(c: BertConfig) -> tuple[int, int]:
    h, i = c.hidden_size, c.intermediate_size
    attention = 4 * (h * h + h) + 2 * h  # q, k, v, output projection + LayerNorm
    ffn = (h * i + i) + (i * h + h) + 2 * h  # intermediate, output + LayerNorm
    return attention, ffn


@pytest.mark.parametrize("share, groups", [("none", 1), ("all", 1), ("all", 2), ("attention", 1), ("attention", 2),
                                           ("ffn", 1), ("ffn", 4)])
def test_each_sharing_mode_stores_each_shared_block_once(share, groups):
    config = _tiny(share, groups)
    torch.manual_seed(0)
    model = BertModel(config)
    attention, ffn = _block_sizes(config)
    layers = config.num_layers
    expected = {"none": layers * (attention + ffn), "all": groups * (attention + ffn),
                "attention": groups * attention + layers * ffn, "ffn": layers * attention + groups * ffn}[share]
    assert sum(p.numel() for p in model.encoder.parameters()) == expected
    # no tensor is stored twice (safetensors refuses aliased tensors) and every stored tensor is a parameter
    state = model.state_dict()
    assert len({t.data_ptr() for t in state.values()}) == len(state) == len(list(model.named_parameters()))


def _reference_encoder(model: BertModel, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ALBERT's definition written out: layer i of group g = i // (L / G) uses the group's attention block (share
    all/attention) or its own, and the group's FFN block (share all/ffn) or its own."""
    c = model.config
    per_group = c.num_layers // c.num_layer_groups
    layers = model.encoder.layer
    for i in range(c.num_layers):
        first = (i // per_group) * per_group
        if c.share_layers == "all":
            owner = layers[i // per_group]
            attention_owner = ffn_owner = owner
        else:
            attention_owner = layers[first] if c.share_layers == "attention" else layers[i]
            ffn_owner = layers[first] if c.share_layers == "ffn" else layers[i]
        attended = attention_owner.attention(hidden, mask)
        hidden = ffn_owner.output(ffn_owner.intermediate(attended), attended)
    return hidden


@pytest.mark.parametrize("share, groups", [("all", 1), ("all", 2), ("attention", 2), ("ffn", 2), ("none", 1)])
def test_forward_is_alberts_definition_of_sharing(share, groups):
    config = _tiny(share, groups)
    torch.manual_seed(1)
    model = BertModel(config).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 45, (3, 12), generator=g)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 9:] = 0
    with torch.no_grad():
        ours = model(ids, types, attention_mask)
        embedded = model.embeddings_project(model.embeddings(ids, types))
        reference = _reference_encoder(model, embedded, padding_mask(attention_mask))
    torch.testing.assert_close(ours, reference, rtol=0, atol=0)
    if share == "all" and groups == 1:  # one TransformerLayer applied L times
        layer, hidden = model.encoder.layer[0], embedded
        with torch.no_grad():
            for _ in range(config.num_layers):
                hidden = layer(hidden, padding_mask(attention_mask))
        torch.testing.assert_close(ours, hidden, rtol=0, atol=0)
        assert len(model.encoder.layer) == 1


def test_shared_weights_change_every_layer_that_uses_them():
    model = BertModel(_tiny("attention", 1)).eval()
    ids = torch.randint(5, 45, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, before = model(ids, output_hidden_states=True)
        model.encoder.layer[0].attention.self.query.weight.add_(0.5)
        _, after = model(ids, output_hidden_states=True)
    # layer 0 owns the attention block that layers 1..3 borrow: every layer's output moves
    assert all(not torch.allclose(b, a) for b, a in zip(before[1:], after[1:]))
    assert not hasattr(model.encoder.layer[1], "attention") and hasattr(model.encoder.layer[1], "intermediate")


@pytest.mark.parametrize("share, groups", [("all", 1), ("all", 2), ("attention", 2), ("ffn", 1)])
def test_save_and_load_round_trip_is_exact_with_sharing(share, groups, tmp_path):
    config = _tiny(share, groups)
    torch.manual_seed(4)
    model = BertForPreTraining(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    tokenizer = _word_level_tokenizer(tmp_path / "tok" / "tokenizer.json", 40)
    directory = save_pretrained(model, config, tokenizer, tmp_path / "model")
    loaded, loaded_config, _ = load_pretrained(directory)
    assert loaded_config == config
    before, after = model.state_dict(), loaded.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert len({t.data_ptr() for t in after.values()}) == len(after)  # nothing aliased after loading either
    batch = _batch(45)
    model.eval()
    with torch.no_grad():
        a, b = model(**batch), loaded(**batch)
    assert torch.equal(a["mlm_logits"], b["mlm_logits"]) and torch.equal(a["nsp_logits"], b["nsp_logits"])


def _word_level_tokenizer(path, words):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(words)])}
    path.parent.mkdir(parents=True, exist_ok=True)
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    return path


def _batch(vocab: int, b: int = 4, t: int = 16) -> dict:
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(5, vocab, (b, t), generator=g)
    ids[:, 0], ids[:, 7], ids[:, -1] = 2, 3, 3
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    positions = torch.stack([torch.randperm(t - 2, generator=g)[:3] + 1 for _ in range(b)]).sort(dim=1).values
    labels = ids.gather(1, positions)
    return {"input_ids": ids.scatter(1, positions, 4), "token_type_ids": types, "attention_mask": torch.ones_like(ids),
            "masked_positions": positions, "masked_labels": labels, "nsp_labels": torch.tensor([0, 1, 1, 0])}


def test_mlm_sop_reaches_every_parameter_and_reports_sop_metrics():
    torch.manual_seed(6)
    model = BertForPreTraining(_tiny("all", 2))
    batch = _batch(45)
    out = get_objective("mlm_sop")(model, batch)
    assert {"loss", "mlm_loss", "sop_loss", "sop_correct", "sop_count", "mlm_correct", "mlm_count"} <= set(out)
    assert "nsp_loss" not in out
    assert torch.allclose(out["loss"], out["mlm_loss"] + out["sop_loss"])
    assert torch.allclose(out["sop_loss"], torch.nn.functional.cross_entropy(out["sop_logits"], batch["nsp_labels"]))
    assert out["sop_count"] == 4 and out["sop_correct"] == (out["sop_logits"].argmax(-1) == batch["nsp_labels"]).sum()
    out["loss"].backward()
    without = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert without == []


# ---------------------------------------------------------------------------------------- pretraining


def _rewrite_as_sop(run, seed: int = 0):
    """Turn a conftest counting run into sop-pairs shards: segment B becomes the words that follow A, and with
    probability 0.5 the pair is written swapped ([CLS] B [SEP] A [SEP], nsp_label 1); masks by the real Masker."""
    shard_dir = run / "shards"
    manifest = read_manifest(shard_dir)
    vocab = manifest.tokenizer.vocab_size
    words = vocab - 5
    masker = Masker(MaskingConfig(policy="ngram", variants=manifest.mask_variants), seed=seed, vocab_size=vocab,
                    mask_id=4, special_ids=frozenset(range(5)))
    rng = random.Random(seed)
    splits = {}
    for split, info in manifest.splits.items():
        shards = []
        for shard in info.shards:
            path = shard_dir / shard.path
            rows = pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_pylist()
            out = []
            for index, row in enumerate(rows):
                ids, len_a = row["input_ids"], row["len_a"]
                a = ids[1:len_a - 1]
                b_len = len(ids) - len_a - 1
                b = [5 + (a[-1] - 5 + 1 + k) % words for k in range(b_len)]
                swapped = int(rng.random() < 0.5)
                first, second = (b, a) if swapped else (a, b)
                new_ids = [2, *first, 3, *second, 3]
                positions, tokens = masker.variants(new_ids, row["doc_id"], index)
                out.append({"input_ids": new_ids, "len_a": len(first) + 2, "nsp_label": swapped,
                            "mask_positions": positions, "mask_tokens": tokens, "doc_id": row["doc_id"]})
            written = write_shard(path, out, vocab)
            shards.append(shard.model_copy(update={"sha256": written.sha256, "rows": written.rows}))
        splits[split] = info.model_copy(update={"shards": shards})
    instance_format = {**manifest.instance_format, "name": "sop-pairs"}
    write_manifest(shard_dir, manifest.model_copy(update={"splits": splits, "instance_format": instance_format}))
    return run


TINY_ALBERT = ModelConfig(hidden_size=64, num_layers=4, num_heads=2, intermediate_size=128, max_position_embeddings=32,
                          embedding_size=32, share_layers="all", hidden_dropout=0.0, attention_dropout=0.0)


def test_mlm_sop_loss_falls_through_the_pretraining_stage(run_factory):
    run = _rewrite_as_sop(run_factory("sop", train_rows=512))
    # one thread: on the shared 2-core box two threads per process spend most of their time waiting
    cfg = PretrainConfig(objective="mlm_sop", batch_size=32, max_steps=250, warmup_steps=20, learning_rate=3e-3,
                         log_every=50, save_every=1000, seed=1, num_threads=1)
    threads = torch.get_num_threads()
    try:
        summary = pretrain(TINY_ALBERT, cfg, run)
    finally:
        torch.set_num_threads(threads)
    metrics = [json.loads(line) for line in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    first, last = metrics[0], metrics[-1]
    print("mlm_sop on sop-pairs:", {k: round(first[k], 3) for k in ("mlm_loss", "sop_loss", "sop_acc")}, "->",
          {k: round(last[k], 3) for k in ("mlm_loss", "sop_loss", "sop_acc", "mlm_acc")})
    assert summary["status"] == "trained"
    assert last["mlm_loss"] < first["mlm_loss"] - 0.5
    assert first["sop_acc"] < 0.6 and last["sop_loss"] < 0.3 and last["sop_acc"] > 0.9  # visible at the junction
    model, config, _ = load_pretrained(run / "pretrain" / "final")
    assert config.share_layers == "all" and len(model.bert.encoder.layer) == 1


def test_mlm_sop_refuses_nsp_pairs_shards(tiny_run):
    cfg = PretrainConfig(objective="mlm_sop", batch_size=8, max_steps=2, warmup_steps=0)
    with pytest.raises(ContractError, match=r"'nsp-pairs' \(field instance_format.name\).*sop-pairs"):
        pretrain(TINY_ALBERT, cfg, tiny_run)
    assert not (tiny_run / "pretrain").exists()


def test_describe_counts_a_shared_model_once():
    cfg = ModelConfig(hidden_size=64, num_layers=12, num_heads=2, intermediate_size=128, embedding_size=16,
                      share_layers="all")
    total, _ = count_parameters(cfg, 100, "mlm_sop")
    unshared, _ = count_parameters(cfg.model_copy(update={"share_layers": "none"}), 100, "mlm_sop")
    h, i = 64, 128
    per_layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    assert unshared - total == 11 * per_layer
    assert all(p.is_meta for p in meta_model(cfg, 100, "mlm_sop").parameters())
