"""training/flops.py against torch.utils.flop_counter.FlopCounterMode on a real forward + backward step of every
objective's real model (small configs, a synthetic batch of full rows laid out as collate() lays them out).

FlopCounterMode counts matrix products only (mm, addmm, bmm, SDPA), which is what the formula counts too; on the
CPU the fused SDPA kernel is invisible to it, so the step runs under the MATH backend, where attention is the
plain bmm's the fused kernels also compute. Tolerance: 1 % (the formulas are exact up to XLNet's static target
slots and float rounding; what differs is named in each case).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from training import flops
from training.config import ModelConfig
from training.flops import estimate_flops, train_flops_per_token
from training.models.electra.model import ElectraSettings
from training.models.modernbert.model import ModernBertSettings
from training.models.registry import get_architecture
from training.models.spanbert.model import SpanBertSettings
from training.models.core.varlen import sliding_window_band
from training.models.transformer_xl.model import TransformerXLSettings
from training.models.xlm.model import XlmSettings
from training.models.xlnet.model import XLNetSettings
from training.objectives import get_objective_spec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB, ROWS, LEN, MASK_ID = 120, 4, 48, 3
BASE = dict(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position_embeddings=LEN)
RELATIVE = {**BASE, "max_position_embeddings": 512}
CASES = {  # id: (objective, model section)
    "bert/mlm_nsp": ("mlm_nsp", ModelConfig(**BASE)),
    "roberta/mlm": ("mlm", ModelConfig(**{**BASE, "type_vocab_size": 1})),
    "albert/mlm_sop": ("mlm_sop", ModelConfig(**BASE, embedding_size=16, share_layers="all")),
    "spanbert/mlm_sbo": ("mlm_sbo", ModelConfig(**BASE, spanbert=SpanBertSettings(position_size=24))),
    "electra/joint": ("electra", ModelConfig(**BASE, electra=ElectraSettings(generator_size=0.5))),
    "electra/factorised": ("electra", ModelConfig(**BASE, embedding_size=16, electra=ElectraSettings())),
    # relative members: max_position_embeddings is not theirs (left at its default, which they refuse to change)
    "xlnet/plm": ("plm", ModelConfig(**RELATIVE, xlnet=XLNetSettings(predict_fraction=6))),
    "transformer-xl/txl_clm": ("txl_clm", ModelConfig(**RELATIVE, transformer_xl=TransformerXLSettings(
        mem_len=16, train_segments=3))),
    "xlm/xlm_mlm": ("xlm_mlm", ModelConfig(**BASE, num_languages=2, xlm=XlmSettings(language_id=1))),
    "xlm/clm": ("clm", ModelConfig(**BASE, num_languages=2)),
    "xlm/tlm": ("tlm", ModelConfig(**BASE, num_languages=2)),
    # GeGLU FFN, rotary positions, layer 1 local with a window spanning the row (so the counter's dense attention
    # is the window's work; a window that binds: test_modernbert_local_layers_count_the_window)
    "modernbert/modernbert_mlm": ("modernbert_mlm", ModelConfig(**{**BASE, "type_vocab_size": 1},
                                                                modernbert=ModernBertSettings(local_attention=2 * LEN))),
}


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """ROWS full rows of LEN tokens ([CLS] A [SEP] B [SEP] segments), 15 % of them masked in spans of 3 that
    are bounded by unmasked tokens (so every masked token is an SBO target), labels at the masked positions."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (ROWS, LEN), generator=gen)
    positions = torch.tensor([p for start in (3, 17) for p in range(start, start + 3)] + [30])  # 7 of 48 = 14.6 %
    positions = positions.expand(ROWS, -1).contiguous()
    labels = ids.gather(1, positions)
    masked = ids.scatter(1, positions, MASK_ID)
    half = LEN // 2
    return {
        "input_ids": masked, "masked_positions": positions, "masked_labels": labels,
        "attention_mask": torch.ones(ROWS, LEN, dtype=torch.long),
        "token_type_ids": (torch.arange(LEN) >= half).long().expand(ROWS, -1).contiguous(),
        "nsp_labels": torch.randint(0, 2, (ROWS,), generator=gen),
        # tlm: languages and positions restarting at the target sentence
        "language_ids": (torch.arange(LEN) >= half).long().expand(ROWS, -1).contiguous(),
        "position_ids": torch.cat([torch.arange(half), torch.arange(LEN - half)]).expand(ROWS, -1).contiguous(),
    }


def _model(objective: str, model_cfg: ModelConfig) -> torch.nn.Module:
    arch = get_architecture(get_objective_spec(objective).architecture)
    torch.manual_seed(0)
    return arch.build(arch.from_model_config(model_cfg, VOCAB, 0)).train()


def _measured_per_token(step) -> tuple[float, dict]:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step()
    counts = counter.get_flop_counts()["Global"]
    return counter.get_total_flops() / (ROWS * LEN), {str(op): n for op, n in counts.items()}


def _objective_step(objective: str, model: torch.nn.Module, batch: dict) -> None:
    get_objective_spec(objective).loss(model, batch)["loss"].backward()


@pytest.mark.parametrize("case", list(CASES))
def test_formula_matches_the_flop_counter_on_a_real_step(case):
    objective, model_cfg = CASES[case]
    batch = _batch()
    model = _model(objective, model_cfg)
    measured, ops = _measured_per_token(lambda: _objective_step(objective, model, batch))
    mask_rate = batch["masked_positions"].shape[1] / LEN
    predicted = train_flops_per_token(model_cfg, objective, VOCAB, LEN, mask_rate, rows_per_batch=ROWS)
    assert any("bmm" in op for op in ops)  # attention was counted, not run in an invisible fused kernel
    assert measured / predicted == pytest.approx(1.0, abs=0.01), (case, measured, predicted, ops)


@pytest.mark.parametrize("local_attention", [2, 16, 64])
def test_modernbert_local_layers_count_the_window(local_attention):
    # 4 layers, global every 2nd: layers 1 and 3 attend in a window of local_attention / 2 on either side. The
    # padded step's masked SDPA computes every S x S score (what the counter sees); taking off the scores outside
    # the band the model's own local mask allows (QK^T and AV, forward + backward) leaves the window's work, which
    # is what the formula counts
    model_cfg = ModelConfig(**{**BASE, "type_vocab_size": 1, "num_layers": 4},
                            modernbert=ModernBertSettings(local_attention=local_attention,
                                                          global_attn_every_n_layers=2))
    batch = _batch()
    model = _model("modernbert_mlm", model_cfg)
    measured, _ = _measured_per_token(lambda: _objective_step("modernbert_mlm", model, batch))
    band = sliding_window_band(batch["attention_mask"].bool(), local_attention // 2)
    outside_per_row = (band.numel() - int(band.sum())) / ROWS
    local_layers, hidden = 2, BASE["hidden_size"]
    windowed = measured - local_layers * 3 * 4 * hidden * outside_per_row / LEN
    predicted = train_flops_per_token(model_cfg, "modernbert_mlm", VOCAB, LEN, 7 / LEN)
    assert windowed / predicted == pytest.approx(1.0, abs=0.01), (measured, windowed, predicted)
    terms = {t.name: t for t in estimate_flops(model_cfg, "modernbert_mlm", VOCAB, LEN, 7 / LEN).terms}
    local = terms[f"attention, 2 local layer(s) (window {local_attention})"]
    assert local.forward < terms["attention, 2 global layer(s)"].forward
    # the closed form against a count of the pairs: a token sees the tokens at most w positions away
    for length in (1, 5, 47, 48, 200):
        for w in (1, 8, 32, 64):
            pairs = sum(1 for q in range(length) for k in range(length) if abs(q - k) <= w)
            assert flops.window_pairs(float(length), w) == pairs, (length, w)


def test_two_stage_electra_counts_the_frozen_generator_forward_only():
    model_cfg = ModelConfig(**BASE, electra=ElectraSettings(generator_size=1.0, two_stage=True, generator_steps=1))
    batch = _batch()
    model = _model("electra", model_cfg)
    measured = {}
    for stage in ("generator", "discriminator"):  # generator_steps=1: the first pass trains the generator alone
        measured[stage], _ = _measured_per_token(lambda: _objective_step("electra", model, batch))
        predicted = estimate_flops(model_cfg, "electra", VOCAB, LEN, 7 / LEN, stage=stage).train
        assert measured[stage] / predicted == pytest.approx(1.0, abs=0.01), stage
    # the discriminator stage: a forward-only generator (1x) + a trained discriminator (3x) of the same size
    assert 1.2 < measured["discriminator"] / measured["generator"] < 1.5
    run = train_flops_per_token(model_cfg, "electra", VOCAB, LEN, 7 / LEN, steps=4)
    assert run == pytest.approx((measured["generator"] + 3 * measured["discriminator"]) / 4, rel=0.02)


@pytest.mark.parametrize("objective", ["plm", "txl_clm"])
def test_memory_carried_across_batches_is_counted(objective):
    # a full memory of mem_len states in the segment (what the stream loader gives every segment), on the model
    mem_len = 24
    if objective == "plm":
        model_cfg = ModelConfig(**RELATIVE, xlnet=XLNetSettings(mem_len=mem_len))
    else:
        model_cfg = ModelConfig(**RELATIVE, transformer_xl=TransformerXLSettings(mem_len=mem_len, train_segments=1))
    batch = _batch()
    model = _model(objective, model_cfg)
    mems = [torch.randn(ROWS, mem_len, BASE["hidden_size"]) for _ in range(BASE["num_layers"])]
    ids = batch["input_ids"]
    if objective == "plm":
        step = lambda: model(ids, batch["token_type_ids"], batch["attention_mask"], mems=mems)["loss"].backward()
    else:
        labels = torch.cat([ids[:, 1:], torch.full((ROWS, 1), -100)], 1)
        step = lambda: model(ids, mems=mems, labels=labels)["loss"].backward()
    measured, _ = _measured_per_token(step)
    with_memory = train_flops_per_token(model_cfg, objective, VOCAB, LEN, 0.15, rows_per_batch=ROWS,
                                        memory_across_batches=True)
    assert measured / with_memory == pytest.approx(1.0, abs=0.01)
    assert train_flops_per_token(model_cfg, objective, VOCAB, LEN, 0.15, rows_per_batch=ROWS) < 0.9 * measured


def test_sharing_saves_parameters_not_flops_and_the_sparse_head_saves_flops():
    bert_base = ModelConfig()
    albert_shared = ModelConfig(share_layers="all")
    assert (train_flops_per_token(bert_base, "mlm_sop", 30522, 128, 0.15)
            == train_flops_per_token(albert_shared, "mlm_sop", 30522, 128, 0.15))
    sparse = train_flops_per_token(bert_base, "mlm_nsp", 30522, 128, 0.15)
    dense = flops.dense_head_train_flops(bert_base, "mlm_nsp", 30522, 128)
    assert 0.15 < 1 - sparse / dense < 0.2  # BERT-base: logits only at masked positions save ~18 % of the step
    # ELECTRA-Small-like: the 1/4-size generator costs far less than the discriminator, but not nothing
    small = ModelConfig(hidden_size=256, num_heads=4, intermediate_size=1024, embedding_size=128)
    electra = estimate_flops(small, "electra", 30522, 128, 0.15)
    generator = next(t for t in electra.terms if t.name.startswith("generator"))
    assert 0.05 < (generator.forward + generator.backward) / electra.train < 0.35


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="mask_rate"):
        train_flops_per_token(ModelConfig(), "mlm", 30522, 128, 0.0)
    with pytest.raises(ValueError, match="stage 'generator' does not exist"):
        estimate_flops(ModelConfig(), "electra", 30522, 128, 0.15, stage="generator")
