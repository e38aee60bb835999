"""ELECTRA export to `transformers`: the discriminator loads as ElectraForPreTraining / ElectraModel and the generator
(out/generator) as ElectraForMaskedLM, with logits equal to ours; through `bertfactory export --to hf` too."""

import json

import pytest
import torch

from flows.cli import main as cli_main
from training.checkpoint import save_pretrained
from training.hf import export_to_hf
from training.models.electra.model import ElectraConfig, ElectraForPreTraining

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


# ------------------------------------------------------------------------------------------------------ import

from safetensors.torch import load_file  # noqa: E402

from training.checkpoint import load_pretrained  # noqa: E402
from training.hf import import_from_hf  # noqa: E402


def _hf_pair(tmp_path):
    """A transformers discriminator (H 32, E 16) + generator (H 16) built offline, every weight random, the
    generator's embeddings those of the discriminator (ELECTRA shares them), saved as our export lays them out."""
    common = dict(vocab_size=VOCAB, embedding_size=16, num_hidden_layers=2, max_position_embeddings=32)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        **common, hidden_size=32, num_attention_heads=4, intermediate_size=64))
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        **common, hidden_size=16, num_attention_heads=2, intermediate_size=32))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for model in (disc, gen):
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    disc.save_pretrained(tmp_path / "hf")
    gen.save_pretrained(tmp_path / "hf" / "generator")
    write_tokenizer(tmp_path / "hf" / "tokenizer.json", VOCAB - 5)
    return disc.eval(), gen.eval(), tmp_path / "hf"


def _diffs(ours, disc, gen):
    ids, types, mask = _inputs(seed=4)
    real = mask.bool()
    with torch.no_grad():
        d = (disc(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
             - ours.discriminator_head(ours.discriminator(ids, types, mask)))[real].abs().max().item()
        mine = ours.generator_head(ours.generator(ids, types, mask)[real],
                                   ours.generator.embeddings.word_embeddings.weight)
        g = (gen(input_ids=ids, token_type_ids=types, attention_mask=mask).logits[real] - mine).abs().max().item()
    return d, g


def test_import_of_a_transformers_pair_parity_and_round_trips(tmp_path):
    disc, gen, hf_dir = _hf_pair(tmp_path)
    result = import_from_hf(hf_dir, tmp_path / "ours")
    assert result.initialised == ("discriminator pooler",)
    ours, config, _ = load_pretrained(result.path)
    assert config.generator_size == 0.5 and config.embedding_size == 16 and not config.two_stage
    disc_diff, gen_diff = _diffs(ours, disc, gen)
    print(f"ELECTRA import: max |ours - transformers| discriminator logits {disc_diff:.2e}, generator logits "
          f"{gen_diff:.2e}")
    assert disc_diff < 1e-5 and gen_diff < 1e-5

    back = export_to_hf(result.path, tmp_path / "back")  # HF -> ours -> HF: both directories bit-equal
    for model, directory in ((disc, back), (gen, back / "generator")):
        original = {k: v for k, v in model.state_dict().items()
                    if not k.endswith(("position_ids", "token_type_ids", "generator_lm_head.weight"))}
        stored = load_file(str(directory / "model.safetensors"))
        assert sorted(original) == sorted(stored) and all(torch.equal(original[k], stored[k]) for k in stored)


def test_ours_to_transformers_and_back_is_exact_but_the_untrained_pooler(tmp_path):
    directory, ours = _checkpoint(tmp_path)
    export_to_hf(directory, tmp_path / "hf")
    again = import_from_hf(tmp_path / "hf", tmp_path / "again")
    assert again.initialised == ("discriminator pooler",)  # HF ELECTRA has no pooler
    before = {k: v for k, v in ours.state_dict().items() if not k.startswith("discriminator.pooler.")}
    after = {k: v for k, v in load_pretrained(again.path)[0].state_dict().items()
             if not k.startswith("discriminator.pooler.")}
    assert sorted(before) == sorted(after) and all(torch.equal(before[k], after[k]) for k in before)


def test_a_discriminator_or_a_generator_alone(tmp_path):
    disc, gen, hf_dir = _hf_pair(tmp_path)
    alone = tmp_path / "disc"
    disc.save_pretrained(alone)
    (alone / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    assert cli_main(["import-hf", str(alone), str(tmp_path / "ours-disc")]) == 0
    ours, config, _ = load_pretrained(tmp_path / "ours-disc")
    assert config.generator_size == 0.25  # our default; the generator is initialised
    ids, types, mask = _inputs(seed=4)
    with torch.no_grad():
        diff = (disc(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
                - ours.discriminator_head(ours.discriminator(ids, types, mask)))[mask.bool()].abs().max().item()
    assert diff < 1e-5

    (hf_dir / "generator" / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    result = import_from_hf(hf_dir / "generator", tmp_path / "ours-gen")  # a generator alone: a masked LM
    assert result.architecture == "ElectraForMaskedLM"
    model, config, _ = load_pretrained(result.path)
    assert type(model).__name__ == "BertForPreTraining" and (config.hidden_size, config.embedding_size) == (16, None)
    assert not config.sentence_head and result.initialised == ("pooler",)
    with torch.no_grad():
        hidden = model.bert(ids, types, mask)
        mine = model.mlm_head(hidden, model.bert.embeddings.word_embeddings.weight)
        diff = (gen(input_ids=ids, token_type_ids=types, attention_mask=mask).logits - mine)[mask.bool()].abs().max()
    assert diff.item() < 1e-5


def test_a_pair_that_does_not_share_embeddings_is_refused(tmp_path):
    from bertfactory.errors import ContractError

    _, gen, hf_dir = _hf_pair(tmp_path)
    with torch.no_grad():
        gen.electra.embeddings.LayerNorm.bias.add_(0.01)
    gen.save_pretrained(hf_dir / "generator")
    with pytest.raises(ContractError, match="embeddings.LayerNorm.bias differs from the discriminator's"):
        import_from_hf(hf_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()
