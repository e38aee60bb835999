"""Transformer-XL: segment recurrence equals one pass under the same visibility, memory is stop-gradient,
long-text evaluation reuses the cache, gradients, the recurrent CLM objective's labels, learning, determinism."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file
from training.data import PretrainBatches
from training.models.transformer_xl.model import TransformerXLConfig, TransformerXLLM
from training.objectives.original_ids import original_ids
from training.objectives.txl import next_token_labels, recurrent_clm

CONFIG = TransformerXLConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                             mem_len=4, dropout=0.0, attention_dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int = 0, **changes) -> TransformerXLLM:
    torch.manual_seed(seed)
    model = TransformerXLLM(dataclasses.replace(CONFIG, **changes))
    with torch.no_grad():  # larger weights than the init, so that every term matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def _windowed_causal(total: int, seg_len: int, mem_len: int) -> torch.Tensor:
    """[1, T, T]: what position t of segment s sees under recurrence, laid out over the whole text: itself and
    earlier tokens, back to the mem_len tokens before its segment (deeper layers included: the memory of
    segment s holds states computed under this same rule in segment s-1)."""
    t = torch.arange(total)
    start = (t // seg_len * seg_len - mem_len).clamp(min=0)
    return ((t[None, :] <= t[:, None]) & (t[None, :] >= start[:, None]))[None]


@pytest.mark.parametrize("mem_len", [4, 6])
def test_recurrence_equals_one_pass_under_the_same_mask(mem_len):
    model = _model(mem_len=mem_len)
    seg_len, segments = 6, 3
    ids = torch.randint(1, CONFIG.vocab_size, (2, seg_len * segments), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole = model(ids, allowed=_windowed_causal(seg_len * segments, seg_len, mem_len))["logits"]
        mems = None
        for s in range(segments):
            out = model(ids[:, s * seg_len:(s + 1) * seg_len], mems=mems)
            assert torch.allclose(out["logits"], whole[:, s * seg_len:(s + 1) * seg_len], atol=1e-5), f"segment {s}"
            mems = out["new_mems"]
            assert len(mems) == CONFIG.num_layers
            assert all(m.shape == (2, min(mem_len, seg_len), CONFIG.hidden_size) for m in mems)
        # and the memory matters: segment 3 without it is different
        alone = model(ids[:, 2 * seg_len:])["logits"]
        assert not torch.allclose(alone, whole[:, 2 * seg_len:], atol=1e-3)


def test_memory_is_stop_gradient():
    model = _model()
    model.train()  # dropout is 0 in CONFIG, so train mode is still deterministic
    ids = torch.randint(1, CONFIG.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    labels = torch.randint(1, CONFIG.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    captured = []
    hook = model.word_embeddings.register_forward_hook(lambda module, args, output: captured.append(output))
    first = model(ids[:, :6], labels=labels[:, :6])
    second = model(ids[:, 6:], mems=first["new_mems"], labels=labels[:, 6:])
    hook.remove()
    segment_1_embeddings = captured[0]
    assert all(not m.requires_grad and m.grad_fn is None for m in first["new_mems"])
    (from_second,) = torch.autograd.grad(second["loss"], segment_1_embeddings, retain_graph=True, allow_unused=True)
    assert from_second is None, "segment 2's loss reached segment 1 through the memory"
    (from_first,) = torch.autograd.grad(first["loss"], segment_1_embeddings, retain_graph=True)
    assert from_first.abs().sum() > 0  # the check above can fail: the embeddings are in segment 1's own graph
    # whole-model view: a joint backward is exactly the sum of the two segments' separate ones
    params = [p for p in model.parameters()]
    joint = torch.autograd.grad(first["loss"] + second["loss"], params, retain_graph=True)
    g1 = torch.autograd.grad(first["loss"], params, retain_graph=True)
    g2 = torch.autograd.grad(second["loss"], params, allow_unused=True)
    for j, a, b in zip(joint, g1, g2):
        assert torch.allclose(j, a + (b if b is not None else 0), atol=1e-6)


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    model = TransformerXLLM(dataclasses.replace(CONFIG, dropout=0.1, attention_dropout=0.1)).train()
    ids = torch.randint(1, CONFIG.vocab_size, (3, 8), generator=torch.Generator().manual_seed(0))
    first = model(ids, labels=ids)
    second = model(ids.flip(1), mems=first["new_mems"], labels=ids)
    (first["loss"] + second["loss"]).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name} got no gradient"


def test_evaluate_long_reuses_the_cache():
    text = torch.randint(1, CONFIG.vocab_size, (40,), generator=torch.Generator().manual_seed(3))
    full_context = _model(mem_len=64)
    single_pass = full_context.evaluate_long(text, segment_len=40)
    walked = full_context.evaluate_long(text, segment_len=7)
    assert single_pass["tokens"] == walked["tokens"] == 39
    assert math.isclose(walked["nll"], single_pass["nll"], rel_tol=1e-6)  # cache covers all: same as one pass
    with torch.no_grad():  # and one pass is the plain causal LM loss
        out = full_context(text[None, :-1], labels=text[None, 1:])
    assert math.isclose(single_pass["nll"], float(out["clm_loss"]), rel_tol=1e-6)
    assert math.isclose(walked["perplexity"], math.exp(walked["nll"]), rel_tol=1e-9)
    no_memory = TransformerXLLM(dataclasses.replace(CONFIG, mem_len=0))
    no_memory.load_state_dict(full_context.state_dict())
    assert abs(no_memory.evaluate_long(text, segment_len=7)["nll"] - walked["nll"]) > 1e-4  # the memory is read
    full_context.train()
    full_context.evaluate_long(text, segment_len=7)
    assert full_context.training  # mode restored


def test_config_round_trip_and_errors():
    assert TransformerXLConfig.from_dict(CONFIG.to_dict()) == CONFIG
    with pytest.raises(ContractError, match="cfg.json.*mem_len must be >= 0"):
        TransformerXLConfig.from_dict({**CONFIG.to_dict(), "mem_len": -1}, "cfg.json")
    with pytest.raises(ContractError, match="missing.*vocab_size"):
        TransformerXLConfig.from_dict({k: v for k, v in CONFIG.to_dict().items() if k != "vocab_size"}, "cfg.json")


# ------------------------------------------------------------------------------------- objective, training


def _batches(run_dir: Path, batch_size: int = 16, seed: int = 0) -> PretrainBatches:
    return PretrainBatches.open(run_dir / "shards", sha256_file(run_dir / "tokenizer" / "tokenizer.json"),
                                batch_size=batch_size, seed=seed)


def test_next_token_labels_skip_padding_and_notnext_junctions(shared_tiny_run):
    batch = _batches(shared_tiny_run).batch(0)
    ids = original_ids(batch)
    mask, types, nsp = batch["attention_mask"], batch["token_type_ids"], batch["nsp_labels"]
    labels = next_token_labels(ids, mask, types, nsp)
    assert (nsp == 1).any() and (nsp == 0).any()
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        len_a = int(((types[b] == 0) & (mask[b] == 1)).sum())
        want = [int(ids[b, t + 1]) if t + 1 < n else -100 for t in range(ids.shape[1])]
        if nsp[b] == 1:
            want[len_a - 1] = -100  # [SEP] of A does not predict a random B's first word
        assert labels[b].tolist() == want
    model = TransformerXLLM(dataclasses.replace(CONFIG, vocab_size=45, train_segments=3))
    out = recurrent_clm(model, batch)
    assert int(out["clm_count"]) == int((labels != -100).sum())
    assert 0 <= int(out["clm_correct"]) <= int(out["clm_count"])


def _train_clm(batches: PretrainBatches, steps: int, seed: int) -> list[float]:
    torch.manual_seed(seed)
    model = TransformerXLLM(TransformerXLConfig(vocab_size=45, hidden_size=64, num_layers=2, num_heads=4,
                                                intermediate_size=128, mem_len=16, train_segments=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(steps):
        out = recurrent_clm(model, batches.batch(step))
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(out["loss"].detach()))
    return losses


def test_recurrent_clm_loss_falls_on_the_counting_corpus(shared_tiny_run):
    losses = _train_clm(_batches(shared_tiny_run), steps=150, seed=0)
    start, end = sum(losses[:5]) / 5, sum(losses[-20:]) / 20
    assert start > math.log(45) - 0.7  # untrained: about chance
    assert end < 0.3 * start, f"recurrent CLM loss went from {start:.3f} to {end:.3f}"


def test_recurrent_clm_training_is_deterministic(shared_tiny_run):
    batches = _batches(shared_tiny_run)
    first = _train_clm(batches, steps=5, seed=0)  # dropout on: the global RNG drives it
    assert first == _train_clm(batches, steps=5, seed=0)
    assert first != _train_clm(batches, steps=5, seed=1)
