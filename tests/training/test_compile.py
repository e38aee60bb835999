"""pretrain.compile: a torch.compile'd model trains to the eager model's losses (within 1e-5, dropout off) and
writes the same checkpoint layout; compile is part of the resume fingerprint (with dropout on, inductor draws its
own dropout masks, so a compiled run follows another sample path than an eager one).

Slow: inductor compiles the forward and backward graphs with the C++ compiler (about 75 s cold on the shared
2-core machine, under 10 s with a warm inductor cache)."""

import json

import pytest
import torch

from bertfactory.errors import ContractError
from training.checkpoint import load_pretrained
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.pretrain import pretrain

# importing torch._dynamo (model.compile) makes torch.jit warn about its own deprecated internals
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

# dropout off: eager and compiled then compute the same function and differ only in rounding
TINY = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32,
                   hidden_dropout=0.0, attention_dropout=0.0)


def _losses(run):
    lines = (run / "pretrain" / "metrics.jsonl").read_text().splitlines()
    return [(m["step"], m["loss"], m["mlm_loss"], m["nsp_loss"]) for m in map(json.loads, lines)]


@pytest.mark.slow
def test_compiled_model_trains_to_the_eager_losses(run_factory):
    # every row of the same length: one batch shape, so inductor compiles once
    eager_run, compiled_run = (run_factory(name, max_seq_len=24, min_seq_len=24, train_rows=64, heldout_rows=8)
                               for name in ("eager", "compiled"))
    cfg = PretrainConfig(batch_size=16, max_steps=4, warmup_steps=1, learning_rate=2e-3, log_every=1,
                         save_every=2, seed=5)
    pretrain(TINY, cfg, eager_run)
    pretrain(TINY, cfg.model_copy(update={"compile": True}), compiled_run)

    eager, compiled = _losses(eager_run), _losses(compiled_run)
    assert [e[0] for e in eager] == [c[0] for c in compiled] == [1, 2, 3, 4]
    for e, c in zip(eager, compiled):
        assert all(abs(a - b) < 1e-5 for a, b in zip(e[1:], c[1:])), (e, c)
    assert eager[-1][1] < eager[0][1]  # the steps did train
    model, _, _ = load_pretrained(compiled_run / "pretrain" / "final")  # plain parameter names, loadable eagerly
    assert not any("_orig_mod" in name for name in model.state_dict())
    torch.compiler.reset()


def test_compile_is_part_of_the_resume_fingerprint(tiny_run):
    cfg = PretrainConfig(batch_size=16, max_steps=4, warmup_steps=1, log_every=1, save_every=1)
    assert "compile" not in PretrainConfig.RESUME_NEUTRAL
    pretrain(TINY, cfg, tiny_run, stop_after=1)
    with pytest.raises(ContractError, match="pretrain.compile \\(checkpoint False, now True\\)"):
        pretrain(TINY, cfg.model_copy(update={"compile": True}), tiny_run)
