"""A real BERT *with* its MLM head — AntiBERTy (the `antiberty` sample: a BertForMaskedLM subclass with extra
species/chain/graft classifiers, 8 layers, hidden 512, weights in pytorch_model.bin) — imported into our model
gives the same MLM logits as `transformers`' BertForMaskedLM on the same weights."""

import shutil

import pytest
import torch

from bertfactory.errors import ContractError
from bertfactory.samples import sample_path
from training.checkpoint import load_pretrained
from training.hf import import_from_hf

EXTRA_HEADS = ("cls.species.", "cls.chain.", "cls.graft.")
# heavy-chain fragments (one-letter amino acids), as AntiBERTy's runner feeds them: space-separated residues
SEQUENCES = ["EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMS", "QVQLQQWGAGLLKPSETLSLTCAVYGGSFSGYYWSWIRQ", "DIQMTQSPSSLSAS"]


@pytest.fixture(scope="module")
def antiberty_dir(tmp_path_factory):
    """The sample plus the tokenizer.json our model directories need, built from its vocab.txt exactly as
    AntiBERTy's runner configures its tokenizer (BertTokenizer, do_lower_case=False)."""
    from tokenizers import BertWordPieceTokenizer

    directory = tmp_path_factory.mktemp("antiberty")
    for name in ("config.json", "pytorch_model.bin", "vocab.txt"):
        (directory / name).symlink_to(sample_path("antiberty", name))
    tok = BertWordPieceTokenizer(str(sample_path("antiberty", "vocab.txt")), lowercase=False, strip_accents=False)
    tok.save(str(directory / "tokenizer.json"))
    return directory


def _batch(tokenizer_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    encodings = [tok.encode(" ".join(seq)) for seq in SEQUENCES]
    width = max(len(e.ids) for e in encodings)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings])
    return ids, mask


def test_antiberty_is_refused_without_naming_what_to_do(antiberty_dir, tmp_path):
    with pytest.raises(ContractError, match="'AntiBERTy'.*--treat-as BertForMaskedLM"):
        import_from_hf(antiberty_dir, tmp_path / "out")


def test_antiberty_mlm_logits_equal_transformers(antiberty_dir, tmp_path):
    from transformers import BertForMaskedLM

    result = import_from_hf(antiberty_dir, tmp_path / "ours", treat_as="BertForMaskedLM", drop=EXTRA_HEADS)
    assert set(result.dropped) == {f"{p}{kind}" for p in EXTRA_HEADS for kind in ("weight", "bias")}
    assert result.initialised == ("NSP head",)  # BertForMaskedLM has no NSP head; the pooler is in the file
    ours, config, tokenizer_path = load_pretrained(tmp_path / "ours")
    assert (config.num_layers, config.hidden_size, config.num_heads, config.vocab_size) == (8, 512, 8, 25)
    ids, mask = _batch(tokenizer_path)
    assert int(ids.max()) < 25 and (ids[mask.bool()] != 1).all(), "every residue is in the vocabulary (no [UNK])"

    hf = BertForMaskedLM.from_pretrained(str(antiberty_dir), attn_implementation="eager").eval()
    b, t = ids.shape
    positions = torch.arange(t).repeat(b, 1)
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    with torch.no_grad():
        reference = hf(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).logits
        out = ours(ids, torch.zeros_like(ids), mask, positions, labels)
    # our head computes logits only at the requested (here: every real) position, in row-major order
    expected = reference[mask.bool()]
    assert out["mlm_logits"].shape == expected.shape == (int(mask.sum()), 25)
    assert torch.allclose(out["mlm_logits"], expected, atol=5e-5, rtol=0), (out["mlm_logits"] - expected).abs().max()
    print("max |ours - transformers|:", float((out["mlm_logits"] - expected).abs().max()))

    # and it is a trained MLM: with every 4th residue replaced by [MASK], it recovers them far above chance (1/20)
    chosen = (torch.arange(t)[None] % 4 == 1) & mask.bool() & (ids != 3)  # 3 = [SEP]
    masked_ids = torch.where(chosen, torch.full_like(ids, 4), ids)  # 4 = [MASK]
    with torch.no_grad():
        out = ours(masked_ids, torch.zeros_like(ids), mask, positions, torch.where(chosen, ids, torch.full_like(ids, -100)))
    accuracy = float(out["mlm_correct"]) / float(out["mlm_count"])
    assert accuracy > 0.3, accuracy


def test_corrupt_pytorch_bin_is_refused_naming_the_file(antiberty_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(antiberty_dir, broken, symlinks=False)
    (broken / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(ContractError, match="pytorch_model.bin is not a readable weights-only PyTorch state dict"):
        import_from_hf(broken, tmp_path / "out", treat_as="BertForMaskedLM", drop=EXTRA_HEADS)
