"""XLM export to transformers (training/hf/xlm.py): our XLM encoder loads as transformers XLMModel with nothing
missing and computes the same hidden states to 1e-5 (fp32, eval mode), with one and with several languages; the
masked-LM head (BERT's transform, which XLMPredLayer has no place for) and what HF XLM cannot express are
refused, naming the part."""

import json

import pytest
import torch

from bertfactory.errors import ContractError
from flows.cli import main
from training.checkpoint import save_pretrained
from training.hf import export_to_hf
from training.models.xlm.model import XlmConfig, XlmForPreTraining

from .conftest import write_tokenizer
from .test_hf_import_family import VOCAB, batch, randomised

transformers = pytest.importorskip("transformers")


def _checkpoint(tmp_path, name="ours", **overrides):
    config = XlmConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=128,
                                 max_position_embeddings=24, type_vocab_size=1, num_languages=2, language_id=1),
                          **overrides})
    torch.manual_seed(0)
    model = randomised(XlmForPreTraining(config), seed=2)
    tokenizer = write_tokenizer(tmp_path / "tok" / "tokenizer.json", VOCAB - 5)
    return save_pretrained(model, config, tokenizer, tmp_path / name), model


@pytest.mark.parametrize("languages", [2, 1])
def test_xlm_encoder_export_gives_transformers_the_same_hidden_states(tmp_path, languages):
    directory, ours = _checkpoint(tmp_path, num_languages=languages, language_id=languages - 1)
    assert main(["export", str(directory), "--to", "hf", "--layout", "xlm-encoder", str(tmp_path / "hf")]) == 0
    hf, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert type(hf).__name__ == "XLMModel" and not any(info.values()), info
    ids, _, mask = batch()
    lang = torch.full_like(ids, languages - 1)
    lang[0, 8:] = 0  # per-token languages (TLM-style pairs) map too
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, attention_mask=mask, langs=lang).last_hidden_state
        mine = ours.bert(ids, None, mask, language_ids=lang)
        default = (hf(input_ids=ids, attention_mask=mask, langs=torch.full_like(ids, hf.config.lang_id))
                   .last_hidden_state - ours.bert(ids, None, mask))[mask.bool()].abs().max().item()
    diff = (theirs - mine)[mask.bool()].abs().max().item()
    print(f"XLM encoder export ({languages} language(s)): max |ours - transformers| hidden states {diff:.2e}")
    assert mine.abs().max() > 1 and diff < 1e-5 and default < 1e-5


def test_what_transformers_xlm_cannot_hold_is_refused(tmp_path):
    directory, _ = _checkpoint(tmp_path)
    for layout in (None, "xlm"):
        with pytest.raises(ContractError, match="mlm_head.dense and mlm_head.LayerNorm .* layout 'xlm-encoder'"):
            export_to_hf(directory, tmp_path / "hf", layout=layout)
    assert not (tmp_path / "hf").exists()
    for name, overrides, message in [("types", {"type_vocab_size": 2}, "model.type_vocab_size=2"),
                                     ("ffn", {"intermediate_size": 64}, "model.intermediate_size=64"),
                                     ("factorised", {"embedding_size": 16}, "model.embedding_size=16")]:
        directory, _ = _checkpoint(tmp_path, name=name, **overrides)
        with pytest.raises(ContractError, match=message):
            export_to_hf(directory, tmp_path / "hf", layout="xlm-encoder")
    doc = json.loads((directory / "config.json").read_text())
    assert doc["architecture"] == "XlmForPreTraining"


# ------------------------------------------------------------------------------------------------------ import

from safetensors.torch import load_file  # noqa: E402

from training.checkpoint import load_pretrained  # noqa: E402
from training.hf import import_from_hf  # noqa: E402

from .test_hf_import_family import assert_same_state, save_hf  # noqa: E402


@pytest.mark.parametrize("cls, languages, sinusoidal", [("XLMWithLMHeadModel", 2, False), ("XLMModel", 1, True)])
def test_import_of_a_transformers_xlm_encoder_parity_and_round_trip(tmp_path, cls, languages, sinusoidal):
    config = transformers.XLMConfig(vocab_size=VOCAB, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=24,
                                    n_langs=languages, sinusoidal_embeddings=sinusoidal, pad_token_id=0,
                                    bos_token_id=2, eos_token_id=3, lang_id=languages - 1)
    torch.manual_seed(0)
    hf = randomised(getattr(transformers, cls)(config))
    result = import_from_hf(save_hf(hf, tmp_path / "hf"), tmp_path / "ours")
    assert set(result.initialised) == {"pooler", "MLM head"}
    assert bool(result.dropped) == (cls == "XLMWithLMHeadModel")  # the tied prediction layer
    ours, ours_config, _ = load_pretrained(result.path)
    assert (ours_config.num_languages, ours_config.language_id, ours_config.intermediate_size) == (languages,
                                                                                                   languages - 1, 128)
    encoder = hf.transformer if cls == "XLMWithLMHeadModel" else hf
    ids, _, mask = batch()
    lang = torch.full_like(ids, languages - 1)
    lang[0, 8:] = 0
    with torch.no_grad():
        theirs = encoder(input_ids=ids, attention_mask=mask, langs=lang).last_hidden_state
        diff = (theirs - ours.bert(ids, None, mask, language_ids=lang))[mask.bool()].abs().max().item()
    print(f"XLM import ({cls}, {languages} language(s), sinusoidal {sinusoidal}): max |ours - transformers| hidden "
          f"states {diff:.2e}")
    assert theirs.abs().max() > 1 and diff < 1e-5

    # HF encoder -> ours -> HF XLMModel: bit-equal (the folded token-type and language rows are zeros)
    back = export_to_hf(result.path, tmp_path / "back", layout="xlm-encoder")
    original = {k: v for k, v in encoder.state_dict().items() if not k.endswith("position_ids")}
    assert_same_state(original, load_file(str(back / "model.safetensors")))
