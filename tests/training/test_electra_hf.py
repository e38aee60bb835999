"""ELECTRA export to `transformers`: the discriminator loads as ElectraForPreTraining / ElectraModel and the generator
(out/generator) as ElectraForMaskedLM, with logits equal to ours; through `bertfactory export --to hf` too."""

import json

import pytest
import torch

from flows.cli import main as cli_main
from training.checkpoint import save_pretrained
from training.hf import export_to_hf
from training.models.electra import ElectraConfig, ElectraForPreTraining

from .conftest import write_tokenizer

transformers = pytest.importorskip("transformers")

VOCAB = 45


def _checkpoint(tmp_path, **overrides):
    config = ElectraConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                     max_position_embeddings=32, embedding_size=16, generator_size=0.5), **overrides})
    torch.manual_seed(0)
    model = ElectraForPreTraining(config)
    with torch.no_grad():  # non-trivial heads and biases (a fresh model has zero biases)
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    tokenizer = write_tokenizer(tmp_path / "tok" / "tokenizer.json", VOCAB - 5)
    return save_pretrained(model, config, tokenizer, tmp_path / "ours"), model.eval()


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 10:] = 1
    return ids, types, mask


@pytest.mark.parametrize("two_stage", [False, True])
def test_export_loads_in_transformers_with_equal_logits(tmp_path, two_stage):
    overrides = {"generator_size": 1.0, "two_stage": True, "generator_steps": 5} if two_stage else {}
    directory, ours = _checkpoint(tmp_path, **overrides)
    out = export_to_hf(directory, tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    ids, types, mask = _inputs()
    real = mask.bool()
    with torch.no_grad():
        disc, info = transformers.AutoModelForPreTraining.from_pretrained(out, output_loading_info=True)
        assert type(disc).__name__ == "ElectraForPreTraining" and not any(info.values()), info
        theirs = disc.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        mine = ours.discriminator_head(ours.discriminator(ids, types, mask))
        disc_diff = (theirs - mine)[real].abs().max().item()

        encoder = transformers.AutoModel.from_pretrained(out).eval()
        hidden_diff = (encoder(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
                       - ours.backbone()(ids, types, mask))[real].abs().max().item()

        gen, info = transformers.AutoModelForMaskedLM.from_pretrained(out / "generator", output_loading_info=True)
        assert type(gen).__name__ == "ElectraForMaskedLM" and not any(info.values()), info
        theirs = gen.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits[real]
        hidden = ours.generator(ids, types, mask)[real]
        mine = ours.generator_head(hidden, ours.generator.embeddings.word_embeddings.weight)
        gen_diff = (theirs - mine).abs().max().item()
        assert gen.generator_lm_head.weight.data_ptr() == gen.electra.embeddings.word_embeddings.weight.data_ptr()
    print(f"two_stage={two_stage}: max |ours - transformers| discriminator logits {disc_diff:.2e}, encoder "
          f"{hidden_diff:.2e}, generator logits {gen_diff:.2e}")
    assert disc_diff < 1e-5 and hidden_diff < 1e-5 and gen_diff < 1e-5
    assert transformers.AutoTokenizer.from_pretrained(out / "generator").mask_token == "[MASK]"


def test_cli_export_dispatches_on_the_architecture(tmp_path, capsys):
    directory, _ = _checkpoint(tmp_path)
    assert cli_main(["export", str(directory), "--to", "hf", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "generator" / "model.safetensors").is_file()
    generator = json.loads((tmp_path / "cli" / "generator" / "config.json").read_text())
    shape = (generator["architectures"], generator["hidden_size"], generator["embedding_size"])
    assert shape == (["ElectraForMaskedLM"], 16, 16)


def test_export_refuses_what_transformers_electra_cannot_hold(tmp_path):
    from bertfactory.errors import ContractError

    directory, _ = _checkpoint(tmp_path, share_layers="all")
    with pytest.raises(ContractError, match="share_layers='all'"):
        export_to_hf(directory, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
