"""ModernBERT <-> transformers (training/hf/modernbert.py), against models transformers builds offline from a config
(no hub): our export loads as ModernBertForMaskedLM with nothing missing and computes the same MLM logits to 1e-5
(fp32, eval mode, eager and SDPA attention), a transformers model imported computes the same logits in ours, and
the round trip HF -> ours -> HF is bit-equal. The sequences (16 tokens, padded rows) are longer than the sliding
window (local_attention 6: 3 on each side), so the local layers' window is exercised, with both rotary bases."""

import json

import pytest
import torch
from safetensors.torch import load_file

from bertfactory.errors import ContractError
from flows.cli import main
from training.checkpoint import load_pretrained, save_pretrained
from training.hf import export_to_hf, import_from_hf
from training.models.modernbert.model import ModernBertConfig, ModernBertForMaskedLM

from .conftest import write_tokenizer
from .test_hf_import_family import VOCAB, assert_same_state, batch, max_diff, our_mlm_logits, randomised, save_hf

# transformers is pinned (constraints.txt) to a version with ModernBERT: a missing class is a failure, not a skip
transformers = pytest.importorskip("transformers")
assert hasattr(transformers, "ModernBertForMaskedLM"), f"transformers {transformers.__version__} has no ModernBERT"

SIZES = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_hidden_layers=4,
             max_position_embeddings=64, local_attention=6)


def _ours(tmp_path, **overrides):
    config = ModernBertConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, num_layers=4, num_heads=4,
                                        intermediate_size=48, max_position_embeddings=64, local_attention=6,
                                        global_attn_every_n_layers=2, global_rope_theta=1000.0,
                                        local_rope_theta=50.0), **overrides})
    torch.manual_seed(0)
    model = randomised(ModernBertForMaskedLM(config), seed=3)
    tokenizer = write_tokenizer(tmp_path / "tok" / "tokenizer.json", VOCAB - 5)
    return save_pretrained(model, config, tokenizer, tmp_path / "ours"), model


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_export_gives_transformers_the_same_logits(tmp_path, attn):
    directory, ours = _ours(tmp_path)
    assert main(["export", str(directory), "--to", "hf", str(tmp_path / "hf")]) == 0
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", output_loading_info=True,
                                                                  attn_implementation=attn)
    assert type(hf).__name__ == "ModernBertForMaskedLM" and not any(info.values()), info
    assert hf.config.layer_types == ["full_attention", "sliding_attention"] * 2
    assert hf.config.sliding_window == 3
    ids, _, mask = batch()
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, attention_mask=mask).logits
    mine = our_mlm_logits(ours, ids, None, mask)
    diff = max_diff(theirs, mine, mask)
    print(f"ModernBERT export ({attn}): max |ours - transformers| MLM logits {diff:.2e}")
    assert mine.abs().max() > 1 and diff < 1e-5
    assert "pooler" not in json.dumps(sorted(load_file(str(tmp_path / "hf" / "model.safetensors"))))


@pytest.mark.parametrize("cls", ["ModernBertForMaskedLM", "ModernBertModel"])
def test_import_parity_and_round_trip(tmp_path, cls):
    config = transformers.ModernBertConfig(vocab_size=VOCAB, pad_token_id=0, bos_token_id=2, eos_token_id=3,
                                           cls_token_id=2, sep_token_id=3, global_attn_every_n_layers=3,
                                           global_rope_theta=2000.0, local_rope_theta=100.0, **SIZES)
    torch.manual_seed(0)
    hf = randomised(getattr(transformers, cls)(config))
    result = import_from_hf(save_hf(hf, tmp_path / "hf"), tmp_path / "ours")
    assert set(result.initialised) == ({"pooler"} if cls == "ModernBertForMaskedLM" else {"pooler", "MLM head"})
    ours, ours_config, _ = load_pretrained(result.path)
    assert type(ours) is ModernBertForMaskedLM
    assert (ours_config.global_attn_every_n_layers, ours_config.global_rope_theta, ours_config.local_rope_theta,
            ours_config.local_attention) == (3, 2000.0, 100.0, 6)
    ids, _, mask = batch()
    with torch.no_grad():
        if cls == "ModernBertForMaskedLM":
            theirs, mine = hf(input_ids=ids, attention_mask=mask).logits, our_mlm_logits(ours, ids, None, mask)
        else:
            theirs, mine = hf(input_ids=ids, attention_mask=mask).last_hidden_state, ours.bert(ids, None, mask)
    diff = max_diff(theirs, mine, mask)
    print(f"ModernBERT import ({cls}): max |ours - transformers| {diff:.2e}")
    assert theirs.abs().max() > 0.5 and diff < 1e-5  # not a comparison of near-zero outputs
    if cls == "ModernBertForMaskedLM":  # HF -> ours -> HF: bit-equal
        back = export_to_hf(result.path, tmp_path / "back")
        original = {k: v for k, v in hf.state_dict().items() if k != "decoder.weight"}
        assert_same_state(original, load_file(str(back / "model.safetensors")))


def test_what_ours_does_not_compute_is_refused_naming_the_key(tmp_path):
    base = transformers.ModernBertConfig(vocab_size=VOCAB, pad_token_id=0, **SIZES).to_dict()
    base["architectures"] = ["ModernBertForMaskedLM"]
    from training.hf.modernbert import modernbert_config_from_hf

    for key, value in [("attention_bias", True), ("norm_bias", True), ("hidden_activation", "silu"),
                       ("tie_word_embeddings", False)]:
        with pytest.raises(ContractError, match=f"x/config.json: cannot import as ModernBERT: {key} "):
            modernbert_config_from_hf({**base, key: value}, "x/config.json")
    odd = {**base, "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]}
    with pytest.raises(ContractError, match="layer_types"):
        modernbert_config_from_hf(odd, "x/config.json")
    directory, _ = _ours(tmp_path)
    with pytest.raises(ContractError, match="exports only as layout 'modernbert'"):
        export_to_hf(directory, tmp_path / "hf", layout="bert")
    assert not (tmp_path / "hf").exists()
