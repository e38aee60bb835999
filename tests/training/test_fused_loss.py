"""The fused MLM decoder + cross-entropy (training/models/core/fused_loss.py, `pretrain.fused_mlm_loss`): equal to
the logits path's loss, correct count and gradients up to rounding for any chunking, with ignored rows, without a
bias, for an empty batch and under bf16 autocast; BertForPreTraining and ModernBertForMaskedLM train the same with it
(padded, static-shape and unpadded paths) and keep the logits in evaluation; the option follows the architectures'
declared capability and refuses compile and XLA; and two gloo ranks pretraining fused follow one process unfused."""

import json

import pytest
import torch
import torch.nn.functional as F

from bertfactory.errors import ConfigError
from training.config import ModelConfig
from training.models.bert.model import BertConfig, BertForPreTraining
from training.models.core.fused_loss import fused_linear_cross_entropy
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM
from training.pretrain import pretrain
from training.pretrain_config import PretrainConfig
from training.recipe_checks import check_model_and_pretrain

from .ranks import launch_ranks

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _inputs(n=37, e=16, v=50, ignored=(3, 4, 20), bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, e, generator=g)
    w = torch.randn(v, e, generator=g) * 0.3
    b = torch.randn(v, generator=g) * 0.1 if bias else None
    labels = torch.randint(0, v, (n,), generator=g)
    labels[list(i for i in ignored if i < n)] = -100
    return x, w, b, labels


def _reference(x, w, b, labels):
    logits = F.linear(x, w, b)
    real = labels != -100
    loss = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum") / real.sum().clamp(min=1)
    return loss, ((logits.argmax(-1) == labels) & real).sum(), real.sum()


def _grads(fn, x, w, b, labels):
    leaves = [t.clone().requires_grad_() for t in (x, w) + ((b,) if b is not None else ())]
    loss, correct, count = fn(leaves[0], leaves[1], leaves[2] if b is not None else None, labels)
    loss.backward()
    return loss.detach(), correct, count, [t.grad for t in leaves]


@pytest.mark.parametrize("chunk", [1, 5, 128, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_equal_to_the_logits_path_for_any_chunking(chunk, bias):
    x, w, b, labels = _inputs(bias=bias)
    ref = _grads(_reference, x, w, b, labels)
    fused = _grads(lambda *a: fused_linear_cross_entropy(*a, ignore_index=-100, chunk_rows=chunk), x, w, b, labels)
    assert torch.allclose(fused[0], ref[0], rtol=1e-6, atol=1e-6)
    assert int(fused[1]) == int(ref[1]) and int(fused[2]) == int(ref[2]) == 34
    for got, want in zip(fused[3], ref[3]):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-7)
    assert fused[3][0][[3, 4, 20]].abs().max() == 0  # ignored rows get no gradient


def test_no_labelled_row_gives_zero_loss_and_zero_gradients():
    x, w, b, labels = _inputs(n=6, ignored=range(6))
    loss, correct, count, grads = _grads(fused_linear_cross_entropy, x, w, b, labels)
    assert float(loss) == 0.0 and int(correct) == 0 and int(count) == 0
    assert all(float(g.abs().max()) == 0.0 for g in grads)
    loss, _, count, grads = _grads(fused_linear_cross_entropy, x[:0], w, b, labels[:0])
    assert float(loss) == 0.0 and int(count) == 0 and grads[0].shape == (0, 16)


def test_bf16_autocast_computes_in_float32_and_returns_gradients_in_the_inputs_dtypes():
    x, w, b, labels = _inputs()
    ref = _grads(_reference, x, w, b, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _, grads = _grads(fused_linear_cross_entropy, x, w, b, labels)
    assert loss.dtype == torch.float32 and torch.allclose(loss, ref[0], rtol=1e-6)
    assert [g.dtype for g in grads] == [torch.float32] * 3


def test_bad_shapes_are_refused():
    x, w, b, labels = _inputs()
    with pytest.raises(ValueError, match="x must be"):
        fused_linear_cross_entropy(x[None], w, b, labels)
    with pytest.raises(ValueError, match="chunk_rows"):
        fused_linear_cross_entropy(x, w, b, labels, chunk_rows=0)


def _batch(vocab, lengths=(30, 12, 25, 7), predictions=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    mask = (torch.arange(t)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(5, vocab, (b, t), generator=g) * mask
    positions = torch.stack([torch.randperm(n, generator=g)[:predictions].sort().values
                             if n >= predictions else torch.arange(predictions) % n for n in lengths])
    labels = torch.randint(5, vocab, (b, predictions), generator=g)
    labels[3, 3:] = -100  # a short row with padding slots
    return ids, torch.zeros_like(ids), mask, positions, labels


def _models():
    torch.manual_seed(0)
    bert = BertForPreTraining(BertConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=48,
                                         max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0))
    torch.manual_seed(0)
    modern = ModernBertForMaskedLM(ModernBertConfig(vocab_size=60, hidden_size=32, num_layers=2, num_heads=2,
                                                    intermediate_size=48, max_position_embeddings=64,
                                                    global_attn_every_n_layers=2, local_attention=16))
    return {"bert": bert, "modernbert": modern}


@pytest.mark.parametrize("path", ["padded", "static_shapes", "unpad"])
@pytest.mark.parametrize("name", ["bert", "modernbert"])
def test_a_training_step_is_the_logits_paths_and_evaluation_keeps_the_logits(name, path):
    model = _models()[name].train()
    model.static_shapes = path == "static_shapes"
    model.unpad_by_default = path == "unpad"
    batch = _batch(60)
    results = {}
    for fused in (False, True):
        model.fused_mlm_loss = fused
        model.zero_grad()
        out = model(*batch)
        out["loss"].backward()
        results[fused] = (out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (plain, plain_grads), (fused, fused_grads) = results[False], results[True]
    assert fused["mlm_logits"] is None and plain["mlm_logits"] is not None
    assert torch.allclose(fused["loss"], plain["loss"], rtol=1e-6, atol=1e-6)
    assert int(fused["mlm_correct"]) == int(plain["mlm_correct"]) and int(fused["mlm_count"]) == int(plain["mlm_count"])
    assert plain_grads.keys() == fused_grads.keys()
    for key, grad in plain_grads.items():
        assert torch.allclose(fused_grads[key], grad, rtol=1e-4, atol=1e-6), key
    model.eval()
    with torch.no_grad():
        scored = model(*batch)
    assert scored["mlm_logits"] is not None and torch.allclose(scored["loss"], plain["loss"], rtol=1e-6, atol=1e-6)


def test_the_option_follows_the_declared_capability_and_refuses_compile_and_xla():
    for objective in ("mlm", "mlm_nsp", "modernbert_mlm"):
        check_model_and_pretrain(ModelConfig(), PretrainConfig(objective=objective, fused_mlm_loss=True))
    with pytest.raises(ConfigError, match="pretrain.fused_mlm_loss is only implemented for BertForPreTraining, "
                                          "ModernBertForMaskedLM"):
        check_model_and_pretrain(ModelConfig(), PretrainConfig(objective="electra", fused_mlm_loss=True))
    with pytest.raises(ValueError, match="not with pretrain.compile"):
        PretrainConfig(fused_mlm_loss=True, compile=True)
    with pytest.raises(ValueError, match="fused_mlm_loss"):
        PretrainConfig(fused_mlm_loss=True, device="xla", static_shapes=True)


def _metrics(run):
    return [json.loads(x) for x in (run / "pretrain" / "metrics.jsonl").read_text().splitlines()]


def test_two_gloo_ranks_pretraining_fused_follow_one_process_unfused(run_factory):
    """The real stage under DDP: 2 ranks x 16 rows with the fused loss against 1 process x 32 rows with the logits
    path (fixed-length rows, no dropout: the two are the same training up to rounding)."""
    model_cfg = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                            hidden_dropout=0.0, attention_dropout=0.0)
    one_run, two_run = (run_factory(name, min_seq_len=32, max_seq_len=32) for name in ("unfused", "fused"))
    settings = dict(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=2e-3, log_every=1, save_every=8, seed=11,
                    num_threads=1, device="cpu")
    pretrain(model_cfg, PretrainConfig(**settings), one_run)
    summaries = launch_ranks(model_cfg, PretrainConfig(**settings, fused_mlm_loss=True), two_run, world=2, timeout=600)
    assert [s["world_size"] for s in summaries] == [2, 2]
    one, two = _metrics(one_run), _metrics(two_run)
    assert len(one) == len(two) == 8
    for a, b in zip(one, two):
        assert b["tokens"] == a["tokens"] and b["mlm_acc"] == a["mlm_acc"]
        for key in ("loss", "mlm_loss", "nsp_loss"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (key, a, b)
    assert two[-1]["loss"] < two[0]["loss"]
