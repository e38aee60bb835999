"""The unpadded (varlen) encoder path: the packed layout is right, its attention equals an independent
block-diagonal attention over the packed tokens, and BertModel / BertForPreTraining give the padded path's
outputs and gradients (within 1e-5) on batches of very different lengths, with sharing and factorised embeddings.
The fixed layout (pretrain.unpad_layout fixed: every slot kept, each row's padding a sequence of its own) gives
the packed layout's results, is built from the mask without a host read, and is traced by torch.compile as one
graph with no data-dependent operation, where the packed layout's has them."""

import pytest
import torch

from training.data import PretrainBatches
from training.models.bert.model import BertConfig, BertForPreTraining, BertModel
from training.models.core.varlen import PackedSequences, _use_varlen_kernel, reference_attention
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM
from training.trainer import check_real_tokens_first

from bertfactory.io import sha256_file

TOL = 1e-5
LENGTHS = [1, 48, 5, 23, 2]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(**overrides) -> BertConfig:
    base = dict(vocab_size=60, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=48,
                max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
    return BertConfig(**{**base, **overrides})


def _batch(lengths=LENGTHS, vocab=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    mask = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, vocab, (b, t), generator=g) * mask
    types = (torch.arange(t)[None] >= torch.tensor(lengths)[:, None] // 2).long() * mask
    return ids, types, mask


def _grads(model, loss):
    """Gradients by parameter name (a parameter the loss does not use, as ModernBERT's pooler, is left out)."""
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return {n: g for (n, _), g in zip(model.named_parameters(), grads) if g is not None}


def _assert_close_grads(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=TOL, rtol=0), (name, (a[name] - b[name]).abs().max())


def test_layout_packs_the_real_tokens_in_order_wherever_the_padding_sits():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    layout = PackedSequences.from_attention_mask(mask)
    grid = torch.arange(20).view(4, 5) * 10
    real = [(b, t) for b in range(4) for t in range(5) if mask[b, t]]
    assert layout.pack(grid).tolist() == [int(grid[b, t]) for b, t in real]
    assert layout.cu_seqlens.tolist() == [0, 3, 6, 11, 11] and layout.max_seqlen == 5
    assert torch.equal(layout.unpack(layout.pack(grid)), grid * mask)
    positions = torch.tensor([[0, 2], [2, 3], [4, 0], [0, 0]])
    expected = [[real.index((b, int(p))) if mask[b, p] else -1 for p in row] for b, row in enumerate(positions)]
    assert layout.packed_index(positions).tolist() == expected
    first_three = PackedSequences.from_attention_mask(mask[:3])
    packed = torch.randn(first_three.num_tokens, 3)
    assert torch.equal(first_three.gather(packed, positions[:3]),
                       first_three.unpack(packed)[torch.arange(3)[:, None], positions[:3]])
    with pytest.raises((IndexError, RuntimeError)):  # a padding position is an error, never a wrong row
        first_three.gather(packed, torch.tensor([[0], [1], [0]]))


@pytest.mark.parametrize("causal", [False, True])
def test_reference_attention_equals_block_diagonal_attention_over_the_packed_tokens(causal):
    ids, _, mask = _batch()
    layout = PackedSequences.from_attention_mask(mask, causal=causal)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(layout.num_tokens, 4, 8, generator=g) for _ in range(3))
    sequence_of = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.tensor(LENGTHS))
    allowed = sequence_of[:, None] == sequence_of[None, :]
    if causal:
        allowed &= torch.ones_like(allowed).tril()
    scores = torch.einsum("qhd,khd->hqk", q, k) / 8 ** 0.5
    expected = torch.einsum("hqk,khd->qhd", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)
    assert torch.allclose(reference_attention(q, k, v, layout, 0.0), expected, atol=TOL, rtol=0)
    assert not _use_varlen_kernel(q, 0.0)  # CPU: the reference runs


@pytest.mark.parametrize("overrides, causal", [
    ({}, False),
    ({}, True),
    ({"share_layers": "all", "num_layer_groups": 2}, False),
    ({"share_layers": "attention"}, False),
    ({"embedding_size": 16}, False),
    ({"embedding_size": 16, "share_layers": "ffn", "num_layer_groups": 2, "num_languages": 3}, False),
])
def test_unpadded_encoder_equals_the_padded_one_in_outputs_and_gradients(overrides, causal):
    torch.manual_seed(0)
    model = BertModel(_config(**overrides)).train()  # train mode (dropout 0): the path training takes
    ids, types, mask = _batch()
    languages = (ids % 3) if overrides.get("num_languages") else None
    readout = torch.randn(ids.shape[1], 32, generator=torch.Generator().manual_seed(2))

    results = []
    for unpad in (False, True):
        last, states = model(ids, types, mask, output_hidden_states=True, language_ids=languages, causal=causal,
                             unpad=unpad)
        real = mask.bool()
        loss = (last * readout).sum(-1)[real].mean() + model.pooler(last).square().mean()  # gradients O(1)
        results.append(([s[real] for s in states], _grads(model, loss)))
    (padded_states, padded_grads), (unpadded_states, unpadded_grads) = results
    assert len(padded_states) == len(unpadded_states) == 5
    for a, b in zip(padded_states, unpadded_states):
        assert torch.allclose(a, b, atol=TOL, rtol=0), (a - b).abs().max()
    _assert_close_grads(padded_grads, unpadded_grads)
    # the re-padded output is zero on padding (the padded path leaves values there that nobody reads)
    assert model(ids, types, mask, language_ids=languages, unpad=True)[~mask.bool()].abs().max() == 0


def _masks(lengths, per_row=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    positions = torch.zeros(len(lengths), per_row, dtype=torch.long)
    labels = torch.full((len(lengths), per_row), -100)
    for row, length in enumerate(lengths):
        n = min(per_row, length - 1)  # position 0 ([CLS]) is never masked; a 1-token row has none
        if n > 0:
            positions[row, :n] = 1 + torch.randperm(length - 1, generator=g)[:n]
            labels[row, :n] = torch.randint(5, 60, (n,), generator=g)
    return positions, labels


@pytest.mark.parametrize("overrides", [{}, {"embedding_size": 16, "share_layers": "all", "num_layer_groups": 2}])
def test_pretraining_unpadded_equals_padded_loss_logits_and_gradients(overrides):
    torch.manual_seed(0)
    model = BertForPreTraining(_config(**overrides)).train()
    ids, types, mask = _batch()
    positions, labels = _masks(LENGTHS)
    nsp = torch.tensor([0, 1, 1, 0, 1])
    padded = model(ids, types, mask, positions, labels, nsp)
    unpadded = model(ids, types, mask, positions, labels, nsp, unpad=True)
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_logits", "nsp_logits"):
        assert torch.allclose(padded[key], unpadded[key], atol=TOL, rtol=0), key
    assert padded["mlm_count"] == unpadded["mlm_count"] == int((labels != -100).sum())
    _assert_close_grads(_grads(model, padded["loss"]), _grads(model, unpadded["loss"]))


def test_static_shapes_unpadded_gathers_every_slot_with_the_same_loss_and_gradients():
    # pretrain.static_shapes with pretrain.unpad (the compiled GPU step of configs/modernbert-base.yaml): logits at
    # all B * P prediction slots, no boolean indexing, the loss of the real slots alone
    torch.manual_seed(0)
    model = BertForPreTraining(_config()).train()
    ids, types, mask = _batch()
    positions, labels = _masks(LENGTHS)
    positions[0, 2] = 3  # an ignored slot whose position is padding (row 0 has one token): reads packed row 0
    nsp = torch.tensor([0, 1, 1, 0, 1])
    sparse = model(ids, types, mask, positions, labels, nsp, unpad=True)
    model.static_shapes = True
    fixed = model(ids, types, mask, positions, labels, nsp, unpad=True)
    padded_fixed = model(ids, types, mask, positions, labels, nsp)
    assert fixed["mlm_logits"].shape == (labels.numel(), 60)
    assert torch.allclose(fixed["mlm_logits"][labels.reshape(-1) != -100], sparse["mlm_logits"], atol=TOL, rtol=0)
    for other in (sparse, padded_fixed):
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert torch.allclose(fixed[key], other[key], atol=TOL, rtol=0), key
        assert int(fixed["mlm_count"]) == int(other["mlm_count"]) == int((labels != -100).sum())
        assert int(fixed["mlm_correct"]) == int(other["mlm_correct"])
    _assert_close_grads(_grads(model, fixed["loss"]), _grads(model, padded_fixed["loss"]))


def test_masked_positions_map_to_the_packed_rows_of_the_same_tokens():
    ids, _, mask = _batch()
    positions, labels = _masks(LENGTHS)
    layout = PackedSequences.from_attention_mask(mask)
    rows = layout.packed_index(positions)[labels != -100]
    assert (rows >= 0).all()
    assert torch.equal(layout.pack(ids)[rows], ids.gather(1, positions)[labels != -100])


def test_collated_shard_batches_give_equal_losses_unpadded(run_factory):
    run = run_factory("varlen", max_seq_len=60, min_seq_len=10, train_rows=64, heldout_rows=8)
    batches = PretrainBatches.open(run / "shards", sha256_file(run / "tokenizer" / "tokenizer.json"), 16, seed=0)
    torch.manual_seed(0)
    model = BertForPreTraining(_config(vocab_size=45, num_layers=2)).train()
    for step in range(3):
        batch = {k: v for k, v in batches.batch(step).items() if k != "row_seeds"}  # BERT's inputs
        lengths = batch["attention_mask"].sum(1)
        assert lengths.max() - lengths.min() >= 20  # very different lengths in one batch
        with torch.no_grad():
            padded, unpadded = model(**batch), model(**batch, unpad=True)
        assert abs(float(padded["loss"]) - float(unpadded["loss"])) < TOL


def test_attention_dropout_acts_on_the_unpadded_path():
    torch.manual_seed(0)
    model = BertModel(_config(attention_dropout=0.5)).train()
    ids, types, mask = _batch()
    real = mask.bool()
    first, second = model(ids, types, mask, unpad=True)[real], model(ids, types, mask, unpad=True)[real]
    assert not torch.allclose(first, second)
    model.eval()
    assert torch.allclose(model(ids, types, mask, unpad=True)[real], model(ids, types, mask)[real], atol=TOL, rtol=0)


def test_pretrain_unpad_follows_the_padded_loss_curve_without_dropout(run_factory):
    """pretrain.unpad through the real stage: with dropout off the unpadded run is the padded run up to rounding
    (with dropout on, masks are drawn over the packed tokens, another sample path)."""
    import json

    from training.config import ModelConfig
    from training.pretrain_config import PretrainConfig
    from training.pretrain import pretrain

    model_cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                            max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
    curves = {}
    for unpad in (False, True):
        run = run_factory(f"unpad-{unpad}", min_seq_len=12, max_seq_len=60)  # very different lengths: much padding
        cfg = PretrainConfig(batch_size=16, max_steps=30, warmup_steps=5, learning_rate=2e-3, log_every=5,
                             save_every=100, unpad=unpad)
        pretrain(model_cfg, cfg, run)
        curves[unpad] = [json.loads(x)["loss"] for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    assert len(curves[True]) == 6
    assert curves[True] == pytest.approx(curves[False], abs=2e-4), curves


def test_pretrain_unpad_is_refused_for_other_architectures(run_factory):
    from bertfactory.errors import ConfigError
    from training.config import ModelConfig
    from training.pretrain_config import PretrainConfig
    from training.pretrain import pretrain

    cfg = PretrainConfig(objective="plm", batch_size=8, max_steps=2, warmup_steps=0, unpad=True)
    with pytest.raises(ConfigError, match="pretrain.unpad is only implemented for BertForPreTraining"):
        pretrain(ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), cfg,
                 run_factory("refused"))


# ------------------------------------------------------------------------------------------ the fixed layout


def test_fixed_layout_keeps_every_slot_and_gives_each_rows_padding_a_sequence_of_its_own():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    layout = PackedSequences.from_attention_mask(mask, fixed=True)
    assert layout.fixed and layout.num_tokens == 15 and layout.max_seqlen == 5
    # row 0's 3 real tokens, its 2 padding slots, row 1 (full: an empty padding sequence), row 2's 1 and 4
    assert layout.cu_seqlens.dtype == torch.int32
    assert layout.cu_seqlens.tolist() == [0, 3, 5, 10, 10, 11, 15]
    grid = torch.arange(15).view(3, 5) * 10
    assert torch.equal(layout.pack(grid), grid.reshape(-1))
    assert torch.equal(layout.unpack(layout.pack(grid)), grid * mask)
    positions = torch.tensor([[1, 2], [0, 4], [0, 3]])
    assert layout.packed_index(positions).tolist() == [[1, 2], [5, 9], [10, 13]]  # a padding slot has its own row
    packed = PackedSequences.from_attention_mask(mask)
    states = torch.randn(15, 3)
    real = mask.bool()
    assert torch.equal(layout.unpack(states)[real], states[real.reshape(-1)])
    assert torch.equal(packed.unpack(packed.pack(layout.unpack(states))), layout.unpack(states))


@pytest.mark.parametrize("causal", [False, True])
def test_fixed_layout_attention_equals_the_packed_one_on_the_real_tokens(causal):
    _, _, mask = _batch()
    fixed, packed = (PackedSequences.from_attention_mask(mask, causal=causal, fixed=f) for f in (True, False))
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(fixed.num_tokens, 4, 8, generator=g) for _ in range(3))
    real = mask.bool().reshape(-1)
    expected = reference_attention(q[real], k[real], v[real], packed, 0.0)
    context = reference_attention(q, k, v, fixed, 0.0)
    assert torch.isfinite(context).all()  # padding rows: values no loss reads, but finite (no NaN in gradients)
    assert torch.allclose(context[real], expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("static_shapes", [False, True])
@pytest.mark.parametrize("overrides", [{}, {"embedding_size": 16, "share_layers": "all", "num_layer_groups": 2}])
def test_pretraining_in_the_fixed_layout_equals_the_packed_one(overrides, static_shapes):
    torch.manual_seed(0)
    model = BertForPreTraining(_config(**overrides)).train()
    model.static_shapes = static_shapes
    ids, types, mask = _batch()
    positions, labels = _masks(LENGTHS)
    nsp = torch.tensor([0, 1, 1, 0, 1])
    results = []
    for layout in ("packed", "fixed"):
        model.unpad_layout = layout
        out = model(ids, types, mask, positions, labels, nsp, unpad=True)
        results.append((out, _grads(model, out["loss"])))
    (packed, packed_grads), (fixed, fixed_grads) = results
    for key in ("loss", "mlm_loss", "nsp_loss", "mlm_logits", "nsp_logits"):
        assert torch.allclose(packed[key], fixed[key], atol=TOL, rtol=0), key
    for key in ("mlm_count", "mlm_correct"):
        assert int(packed[key]) == int(fixed[key]), key
    _assert_close_grads(packed_grads, fixed_grads)


def test_modernbert_in_the_fixed_layout_equals_the_padded_path_with_its_local_window():
    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=60, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
                              max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=3)
    model = ModernBertForMaskedLM(config).train()
    model.static_shapes = True
    ids, _, mask = _batch()  # rows of 1 to 48 tokens: the window (4 each side) cuts the long ones
    positions, labels = _masks(LENGTHS)
    padded = model(ids, None, mask, positions, labels)
    padded_grads = _grads(model, padded["loss"])
    model.unpad_layout = "fixed"
    fixed = model(ids, None, mask, positions, labels, unpad=True)
    assert torch.allclose(padded["loss"], fixed["loss"], atol=TOL, rtol=0)
    assert int(padded["mlm_correct"]) == int(fixed["mlm_correct"])
    _assert_close_grads(padded_grads, _grads(model, fixed["loss"]))
    with torch.no_grad():
        states, layout = model.bert(ids, None, mask, unpad="fixed")
        last = model.bert(ids, None, mask)
    assert layout.fixed and states[-1].shape == (ids.numel(), 32)
    assert torch.allclose(layout.unpack(states[-1])[mask.bool()], last[mask.bool()], atol=TOL, rtol=0)


class _Traced:
    """A torch.compile backend that records the operations dynamo traced and runs the graphs eagerly."""

    def __init__(self):
        self.graphs: list[list[str]] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append([str(getattr(n.target, "__name__", n.target)) for n in gm.graph.nodes])
        return gm.forward


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_the_fixed_layout_compiles_to_one_graph_that_reads_nothing_from_the_device():
    """What makes the fixed layout fit CUDA graphs: the forward and loss trace as one graph (fullgraph), with no
    data-dependent operation (nonzero, a tensor read as a Python number), and batches of other row lengths reuse
    it. The packed layout, traced the same way, has them (nonzero; so the check can fail): on CUDA each is a wait
    for the device inside the step."""
    import torch._dynamo

    config = ModernBertConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48,
                              max_position_embeddings=32, local_attention=8, global_attn_every_n_layers=2)
    data_dependent = {"nonzero", "item", "_local_scalar_dense", "tolist"}
    traced = {}
    for layout in ("fixed", "packed"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = ModernBertForMaskedLM(config).train()
        model.static_shapes, model.unpad_by_default, model.unpad_layout = True, True, layout
        backend = _Traced()
        step = torch.compile(model, backend=backend, fullgraph=True)
        for seed, lengths in enumerate(([24, 10, 17, 24], [12, 24, 24, 9], [20, 20, 11, 24])):
            ids, _, mask = _batch(lengths, seed=seed)
            positions, labels = _masks(lengths, seed=seed)
            batch = dict(input_ids=ids, token_type_ids=None, attention_mask=mask, masked_positions=positions,
                         masked_labels=labels)
            out = step(**batch)
            assert torch.allclose(out["loss"], model(**batch)["loss"], atol=TOL, rtol=0)
            out["loss"].backward()
        traced[layout] = backend.graphs
    assert len(traced["fixed"]) == 1, traced["fixed"]
    assert not data_dependent & set(traced["fixed"][0])
    assert data_dependent & {op for graph in traced["packed"] for op in graph}


def test_the_trainer_refuses_a_batch_with_real_tokens_after_padding_for_the_fixed_layout():
    _, _, mask = _batch()
    batch = {"attention_mask": mask}
    assert check_real_tokens_first(batch, 0) is batch
    left_padded = mask.flip(1)
    with pytest.raises(ValueError, match="^step 8: row 0 of the batch has a real token after padding; "
                                         "pretrain.unpad_layout fixed needs the real tokens first"):
        check_real_tokens_first({"attention_mask": left_padded}, 7)
