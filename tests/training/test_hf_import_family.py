"""Import of transformers RoBERTa and ALBERT checkpoints (training/hf/layouts.py via training.hf.import_from_hf),
checked against models that transformers builds offline from a config (no hub): our model computes the same
logits to 1e-5 (fp32, eval mode), and both round trips are exact (HF -> ours -> HF and ours -> HF -> ours give
bit-equal state dicts)."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from bertfactory.errors import ContractError
from flows.cli import main
from training.checkpoint import load_pretrained
from training.hf import export_to_hf, import_from_hf
from training.models.bert.model import BertConfig

from .conftest import write_tokenizer

transformers = pytest.importorskip("transformers")

VOCAB = 45
HAS_SENTENCE_HEAD_FIELD = "sentence_head" in {f.name for f in dataclasses.fields(BertConfig)}


def randomised(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter moved off its initialisation (biases and LayerNorms are 0 / 1 when fresh)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def save_hf(model, directory, pad_id: int = 0):
    """save_pretrained (safetensors) plus the tokenizer.json our model directories need."""
    model.save_pretrained(directory)
    write_tokenizer(directory / "tokenizer.json", VOCAB - 5 - (1 if pad_id else 0))
    return directory


def batch(pad_id: int = 0, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (3, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = pad_id
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    types[mask == 0] = 0
    return ids, types, mask


def our_mlm_logits(model, ids, types, mask):
    with torch.no_grad():
        hidden = model.bert(ids, types, mask)
        return model.mlm_head(hidden, model.bert.embeddings.word_embeddings.weight)


def max_diff(a, b, mask):
    return (a - b)[mask.bool()].abs().max().item()  # padded positions are unused by design


def assert_same_state(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    unequal = [k for k in a if not torch.equal(a[k], b[k])]
    assert not unequal, unequal


def hf_state(directory):
    return load_file(str(directory / "model.safetensors"))


# ----------------------------------------------------------------------------------------------------- RoBERTa


def _roberta(pad_id: int):
    config = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=20 + pad_id + 1,
                                        type_vocab_size=1, pad_token_id=pad_id, bos_token_id=2, eos_token_id=3)
    torch.manual_seed(0)
    return randomised(transformers.RobertaForMaskedLM(config))


@pytest.mark.parametrize("pad_id", [1, 0])
def test_roberta_import_parity_and_round_trips(tmp_path, pad_id):
    hf = _roberta(pad_id)
    hf_dir = save_hf(hf, tmp_path / "hf", pad_id)
    result = import_from_hf(hf_dir, tmp_path / "ours")
    ours, config, _ = load_pretrained(result.path)
    assert config.max_position_embeddings == 20 and config.type_vocab_size == 1
    if HAS_SENTENCE_HEAD_FIELD:
        assert config.sentence_head is False and not hasattr(ours, "nsp_head")
    assert "pooler" in result.initialised  # RobertaForMaskedLM has no pooler

    ids, types, mask = batch(pad_id)
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    diff = max_diff(our_mlm_logits(ours, ids, types, mask), theirs, mask)
    print(f"RoBERTa import (pad {pad_id}): max |ours - transformers| MLM logits {diff:.2e}")
    assert theirs.abs().max() > 1 and diff < 1e-5

    # HF -> ours -> HF: every tensor the HF model has comes back bit-equal (the position rows before pad + 1,
    # which only padding reads, are written as zeros)
    back = export_to_hf(result.path, tmp_path / "back", layout="roberta")
    original = {k: v for k, v in hf.state_dict().items() if not k.endswith("position_ids")}
    original["roberta.embeddings.position_embeddings.weight"][: pad_id + 1] = 0
    exported = hf_state(back)
    exported.pop("roberta.pooler.dense.weight"), exported.pop("roberta.pooler.dense.bias")
    original.pop("lm_head.decoder.weight"), original.pop("lm_head.decoder.bias", None)  # tied, not stored
    assert_same_state(original, exported)

    # ours -> HF -> ours: bit-equal state dicts (pooler included: the RoBERTa layout keeps it)
    again = import_from_hf(back, tmp_path / "again")
    assert_same_state(ours.state_dict(), load_pretrained(again.path)[0].state_dict())
    assert again.initialised == ()


# ------------------------------------------------------------------------------------------------------ ALBERT


def _albert(cls: str, embedding: int, groups: int):
    config = transformers.AlbertConfig(vocab_size=VOCAB, embedding_size=embedding, hidden_size=32,
                                       num_hidden_layers=4, num_hidden_groups=groups, num_attention_heads=4,
                                       intermediate_size=64, max_position_embeddings=20, hidden_act="gelu",
                                       pad_token_id=0)
    torch.manual_seed(0)
    return randomised(getattr(transformers, cls)(config))


@pytest.mark.parametrize("embedding, groups", [(16, 1), (16, 2), (16, 4), (32, 1)])
def test_albert_for_pretraining_import_parity_and_round_trips(tmp_path, embedding, groups):
    hf = _albert("AlbertForPreTraining", embedding, groups)
    if embedding == 32:  # E = H: our encoder has no projection, so HF's must be the identity
        with torch.no_grad():
            hf.albert.encoder.embedding_hidden_mapping_in.weight.copy_(torch.eye(32))
            hf.albert.encoder.embedding_hidden_mapping_in.bias.zero_()
    hf_dir = save_hf(hf, tmp_path / "hf")
    result = import_from_hf(hf_dir, tmp_path / "ours")
    assert result.initialised == ()
    ours, config, _ = load_pretrained(result.path)
    assert (config.embedding_size, config.share_layers, config.num_layer_groups) == (
        None if embedding == 32 else 16, "none" if groups == 4 else "all", 1 if groups == 4 else groups)

    ids, types, mask = batch()
    with torch.no_grad():
        out = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        mlm = our_mlm_logits(ours, ids, types, mask)
        sop = ours.nsp_head(ours.bert.pooler(ours.bert(ids, types, mask)))
    diffs = {"MLM": max_diff(mlm, out.prediction_logits, mask), "SOP": (sop - out.sop_logits).abs().max().item()}
    print(f"ALBERT import (E {embedding}, {groups} group(s)): max |ours - transformers|",
          {k: f"{v:.2e}" for k, v in diffs.items()})
    assert out.prediction_logits.abs().max() > 0.5 and all(d < 1e-5 for d in diffs.values()), diffs

    back = export_to_hf(result.path, tmp_path / "back")  # auto: factorised or shared -> albert; else by groups
    if embedding == 32 and groups == 4:
        back = export_to_hf(result.path, tmp_path / "back2", layout="albert")
    original = {k: v for k, v in hf.state_dict().items() if not k.endswith(("position_ids", "token_type_ids"))}
    original.pop("predictions.decoder.weight"), original.pop("predictions.decoder.bias")
    assert_same_state(original, hf_state(back))
    again = import_from_hf(back, tmp_path / "again")
    assert_same_state(ours.state_dict(), load_pretrained(again.path)[0].state_dict())


def test_albert_masked_lm_and_base_model_import_with_initialised_heads(tmp_path):
    mlm = _albert("AlbertForMaskedLM", 16, 1)
    result = import_from_hf(save_hf(mlm, tmp_path / "mlm"), tmp_path / "ours-mlm")
    assert set(result.initialised) == {"pooler", "NSP head"}
    ours = load_pretrained(result.path)[0]
    ids, types, mask = batch()
    with torch.no_grad():
        theirs = mlm(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    assert max_diff(our_mlm_logits(ours, ids, types, mask), theirs, mask) < 1e-5

    base = _albert("AlbertModel", 16, 2)
    result = main(["import-hf", str(save_hf(base, tmp_path / "base")), str(tmp_path / "ours-base")])
    assert result == 0
    ours = load_pretrained(tmp_path / "ours-base")[0]
    with torch.no_grad():
        theirs = base(input_ids=ids, token_type_ids=types, attention_mask=mask)
        hidden = ours.bert(ids, types, mask)
    assert max_diff(hidden, theirs.last_hidden_state, mask) < 1e-5
    torch.testing.assert_close(ours.bert.pooler(hidden), theirs.pooler_output, rtol=0, atol=1e-5)


def test_what_our_encoder_cannot_compute_is_refused(tmp_path):
    hf_dir = save_hf(_albert("AlbertForPreTraining", 16, 1), tmp_path / "hf")
    doc = json.loads((hf_dir / "config.json").read_text())
    for key, value, message in [("hidden_act", "gelu_new", "hidden_act 'gelu_new'"),
                                ("inner_group_num", 2, "inner_group_num 2"),
                                ("model_type", "deberta", "model_type 'deberta' cannot be imported")]:
        (hf_dir / "config.json").write_text(json.dumps({**doc, key: value}))
        with pytest.raises(ContractError, match=message):
            import_from_hf(hf_dir, tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_a_tokenizer_without_its_vocabulary_is_refused(tmp_path, capsys):
    """transformers 5's BertTokenizerFast(vocab_file=...) ignores vocab_file (the argument is `vocab` now) and saves a
    tokenizer.json of the 5 special tokens. Was: imported without a word, and every word of a task was [UNK] in the
    evaluation. A few padded rows (a published model's matrix) still import."""
    model = randomised(transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=24)))
    model.save_pretrained(tmp_path / "hf")
    write_tokenizer(tmp_path / "hf" / "tokenizer.json", 10)  # 15 tokens for 45 rows
    capsys.readouterr()  # save_pretrained's progress bar
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'hf' / 'tokenizer.json'} has 15 tokens for the model's 45 embedding "
                          "rows") and "30 rows can never be read" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "ours").exists()
    write_tokenizer(tmp_path / "hf" / "tokenizer.json", VOCAB - 5 - 3)  # 42 tokens, 3 padded rows: imported
    assert main(["import-hf", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0


def test_the_normaliser_is_the_one_transformers_applies(tmp_path):
    """tokenizer_config.json naming a BERT tokenizer class sets lowercasing over tokenizer.json's BertNormalizer in
    transformers (`do_lower_case: true` over `lowercase: false`). Was: tokenizer.json copied as it was, so our model
    read `Quiet FILM` as [UNK] [UNK] where transformers' read `quiet film`."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    from evaluation.encode import TextEncoder

    model = randomised(transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=24)))
    hf = tmp_path / "hf"
    model.save_pretrained(hf)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "quiet", "film", "cafe", *[f"w{i}" for i in range(VOCAB - 8)]]
    tok = Tokenizer(WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(hf / "tokenizer.json"))
    special = {f"{role}_token": f"[{role.upper()}]" for role in ("pad", "unk", "cls", "sep", "mask")}
    (hf / "tokenizer_config.json").write_text(json.dumps({**special, "tokenizer_class": "BertTokenizer",
                                                          "do_lower_case": True}))
    import_from_hf(hf, tmp_path / "ours")
    theirs = transformers.AutoTokenizer.from_pretrained(hf)
    ours = TextEncoder.from_file(tmp_path / "ours" / "tokenizer.json")
    for text in ("Quiet FILM", "Café quiet"):
        assert ours.tokenize([text])[0] == theirs(text, add_special_tokens=False)["input_ids"], text
    assert ours.tokenize(["Quiet FILM"])[0] == [5, 6]


@pytest.mark.parametrize("prefix_space", [True, False])
def test_the_prefix_space_is_the_one_transformers_applies(tmp_path, prefix_space):
    """tokenizer_config.json naming RobertaTokenizer sets the byte-level step's add_prefix_space (default false) over
    tokenizer.json's in transformers. Was: tokenizer.json copied as it was: `add_prefix_space: true` in the config
    over a file without it, our model read `the film` as `t he Ġfilm` where transformers read `Ġthe Ġfilm`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from evaluation.encode import TextEncoder

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=not prefix_space)  # the other way round
    tok.train_from_iterator([f"the film {i} is quiet and the cast is good" for i in range(200)], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    model = randomised(transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=26, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
        eos_token_id=2)))
    hf = tmp_path / "hf"
    model.save_pretrained(hf)
    tok.save(str(hf / "tokenizer.json"))
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "RobertaTokenizer", "add_prefix_space": prefix_space, "bos_token": "<s>",
        "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}))
    import_from_hf(hf, tmp_path / "ours")
    theirs = transformers.AutoTokenizer.from_pretrained(hf)
    ours = TextEncoder.from_file(tmp_path / "ours" / "tokenizer.json")
    for text in ("the film is quiet", "cast"):
        assert ours.tokenize([text])[0] == theirs(text, add_special_tokens=False)["input_ids"], text
