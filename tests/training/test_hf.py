"""Our encoder reproduces a real published BERT: all-MiniLM-L6-v2 (the real sample `minilm`) loaded through
training.hf gives the sentence similarities published on its model card, so embeddings, attention (with padding
mask), post-LN layers and GELU match BERT's definition to float precision."""

import json

import pytest
import torch
from tokenizers import Tokenizer

from bertfactory.errors import ContractError
from bertfactory.samples import sample_path
from training.hf.bert import bert_config_from_hf, load_hf_bert_encoder

# sentence-transformers model card of all-MiniLM-L6-v2: model.similarity(embeddings, embeddings)
SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
PUBLISHED = [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]


def test_minilm_reproduces_published_similarities():
    directory = sample_path("minilm")
    encoder, config = load_hf_bert_encoder(directory)
    assert (config.num_layers, config.hidden_size, config.num_heads, config.vocab_size) == (6, 384, 12, 30522)
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.no_padding()
    encodings = [tok.encode(s) for s in SENTENCES]
    width = max(len(e.ids) for e in encodings)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings])
    with torch.no_grad():
        hidden = encoder(ids, torch.zeros_like(ids), mask)
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # mean pooling over real tokens
    pooled = torch.nn.functional.normalize(pooled, dim=-1)
    similarity = pooled @ pooled.T
    assert torch.allclose(similarity, torch.tensor(PUBLISHED), atol=6e-5), similarity


def test_unsupported_hf_configs_are_refused():
    hf = json.loads((sample_path("minilm") / "config.json").read_text())
    with pytest.raises(ContractError, match="hidden_act 'relu'"):
        bert_config_from_hf({**hf, "hidden_act": "relu"})
    with pytest.raises(ContractError, match="model_type is 'roberta'"):
        bert_config_from_hf({**hf, "model_type": "roberta"})
    with pytest.raises(ContractError, match="expected a JSON object"):
        bert_config_from_hf([hf])


def test_invalid_hf_config_json_names_the_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ContractError, match="config.json is not valid JSON"):
        load_hf_bert_encoder(tmp_path)


# ------------------------------------------------------------------ parity with transformers, export and import

transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402

from bertfactory.errors import InputError  # noqa: E402
from training.checkpoint import load_pretrained, save_pretrained  # noqa: E402
from training.hf import export_to_hf, import_from_hf  # noqa: E402
from training.models.bert.model import BertConfig, BertForPreTraining  # noqa: E402

PARITY_SENTENCES = SENTENCES + ["A man is playing a guitar on a small wooden stage in front of a quiet crowd.", "Hi"]
TINY = BertConfig(vocab_size=48, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                  max_position_embeddings=24)  # vocab padded past the tokenizer's 45 tokens


def _minilm_batch():
    tok = Tokenizer.from_file(str(sample_path("minilm") / "tokenizer.json"))
    tok.no_padding()
    enc = [tok.encode(s) for s in PARITY_SENTENCES]
    width = max(len(e.ids) for e in enc)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in enc])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in enc])
    assert (mask == 0).any(), "the batch must contain padding"
    return ids, torch.zeros_like(ids), mask


def _max_diff(a, b, mask):
    """Largest |a - b| over real (non-padding) positions."""
    return (a - b).abs()[mask.bool()].max().item()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_minilm_last_hidden_state_equals_transformers(attn):
    directory = sample_path("minilm")
    ids, types, mask = _minilm_batch()
    theirs_model = transformers.BertModel.from_pretrained(directory, attn_implementation=attn).eval()
    ours_model, _ = load_hf_bert_encoder(directory)
    with torch.no_grad():
        theirs = theirs_model(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
        ours = ours_model(ids, types, mask)
    diff = _max_diff(ours, theirs, mask)
    print(f"MiniLM ({attn}) max |ours - transformers| over real tokens: {diff:.2e}")
    assert diff < 1e-5


def test_minilm_import_initialises_the_missing_heads(tmp_path, caplog):
    directory = sample_path("minilm")
    with caplog.at_level("WARNING", logger="training.hf"):
        result = import_from_hf(directory, tmp_path / "minilm", seed=3)
    assert result.architecture == "BertModel" and result.initialised == ("MLM head", "NSP head")
    assert "has no MLM head, NSP head" in caplog.text
    model, config, tokenizer_path = load_pretrained(tmp_path / "minilm")
    assert tokenizer_path.read_bytes() == (directory / "tokenizer.json").read_bytes()
    encoder, _ = load_hf_bert_encoder(directory)
    for name, tensor in encoder.state_dict().items():  # the encoder is the published one, bit for bit
        assert torch.equal(model.bert.state_dict()[name], tensor), name
    fresh = BertForPreTraining(config)  # the heads are initialised as ours are: LayerNorm 1/0, bias 0, N(0, 0.02)
    assert torch.equal(model.mlm_head.LayerNorm.weight, fresh.mlm_head.LayerNorm.weight)
    assert torch.equal(model.mlm_head.bias, torch.zeros(config.vocab_size))
    assert abs(model.mlm_head.dense.weight.std().item() - config.initializer_range) < 2e-3
    again = import_from_hf(directory, tmp_path / "again", seed=3)  # seeded: reproducible
    assert load_file(str(again.path / "model.safetensors"))["nsp_head.classifier.weight"].equal(
        model.nsp_head.classifier.weight)


def _tiny_tokenizer(path):
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


@pytest.fixture
def tiny_checkpoint(tmp_path):
    """A small model of ours with every parameter random (heads included), saved with save_pretrained."""
    torch.manual_seed(0)
    model = BertForPreTraining(TINY)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return save_pretrained(model, TINY, _tiny_tokenizer(tmp_path / "tok" / "tokenizer.json"), tmp_path / "ours",
                           training={"step": 5, "tokens_seen": 100})


def _tiny_batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 45, (3, 20), generator=g)
    ids[:, 0] = 2
    ids[:, 9] = 3
    types = torch.zeros_like(ids)
    types[:, 10:] = 1
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    mask[2, 6:] = 0
    ids[mask == 0] = 0
    types[mask == 0] = 0
    return ids, types, mask


def test_export_loads_in_transformers_with_equal_mlm_and_nsp_logits(tiny_checkpoint, tmp_path):
    out = export_to_hf(tiny_checkpoint, tmp_path / "hf")
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "bert" and hf_config["architectures"] == ["BertForPreTraining"]
    assert (out / "tokenizer.json").read_bytes() == (tiny_checkpoint / "tokenizer.json").read_bytes()
    names = set(load_file(str(out / "model.safetensors")))
    assert {"cls.predictions.bias", "cls.seq_relationship.weight", "cls.predictions.transform.dense.weight",
            "bert.pooler.dense.weight"} <= names and not any(n.startswith(("mlm_head", "nsp_head")) for n in names)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir()), "staging directory left behind"

    ours, _, _ = load_pretrained(tiny_checkpoint)
    ids, types, mask = _tiny_batch()
    with torch.no_grad():
        hidden = ours.bert(ids, types, mask)
        our_mlm = ours.mlm_head(hidden.reshape(-1, TINY.hidden_size), ours.bert.embeddings.word_embeddings.weight)
        our_mlm = our_mlm.reshape(*ids.shape, TINY.vocab_size)
        our_nsp = ours.nsp_head(ours.bert.pooler(hidden))
        pre, info = transformers.AutoModelForPreTraining.from_pretrained(out, output_loading_info=True)
        assert type(pre).__name__ == "BertForPreTraining" and not any(info.values()), info
        pre_out = pre.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask)
        mlm, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
        assert type(mlm).__name__ == "BertForMaskedLM" and not info["missing_keys"], info
        mlm_logits = mlm.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    diffs = {"pretraining MLM": _max_diff(our_mlm, pre_out.prediction_logits, mask),
             "masked-LM MLM": _max_diff(our_mlm, mlm_logits, mask),
             "NSP": (our_nsp - pre_out.seq_relationship_logits).abs().max().item()}
    print("tiny export max |ours - transformers|:", {k: f"{v:.2e}" for k, v in diffs.items()})
    assert our_mlm.abs().max() > 1 and our_nsp.abs().max() > 0.1  # logits of substance, not ~0
    assert all(d < 1e-5 for d in diffs.values()), diffs
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.mask_token_id == 4 and tok.pad_token_id == 0 and tok("w3 w7")["input_ids"] == [8, 12]


def test_round_trip_ours_hf_ours_is_exact(tiny_checkpoint, tmp_path):
    hf = export_to_hf(tiny_checkpoint, tmp_path / "hf")
    result = import_from_hf(hf, tmp_path / "back")
    assert result.architecture == "BertForPreTraining" and result.initialised == ()
    before, after = load_file(str(tiny_checkpoint / "model.safetensors")), load_file(str(result.path / "model.safetensors"))
    assert before.keys() == after.keys()
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype and torch.equal(after[name], tensor), name
    doc, back = (json.loads((d / "config.json").read_text()) for d in (tiny_checkpoint, result.path))
    assert back == {k: v for k, v in doc.items() if k != "training"}  # training provenance is not carried
    assert (result.path / "tokenizer.json").read_bytes() == (tiny_checkpoint / "tokenizer.json").read_bytes()
    load_pretrained(result.path)


def test_import_of_a_transformers_masked_lm_keeps_encoder_and_mlm_head(tiny_checkpoint, tmp_path):
    hf = export_to_hf(tiny_checkpoint, tmp_path / "hf")
    masked_lm = transformers.AutoModelForMaskedLM.from_pretrained(hf)  # no pooler, no NSP head
    masked_lm.save_pretrained(tmp_path / "mlm")
    (tmp_path / "mlm" / "tokenizer.json").write_bytes((hf / "tokenizer.json").read_bytes())
    result = import_from_hf(tmp_path / "mlm", tmp_path / "imported")
    assert result.architecture == "BertForMaskedLM" and result.initialised == ("pooler", "NSP head")
    before, after = load_file(str(tiny_checkpoint / "model.safetensors")), load_file(str(result.path / "model.safetensors"))
    kept = [n for n in before if not n.startswith(("bert.pooler", "nsp_head"))]
    assert all(torch.equal(before[n], after[n]) for n in kept)
    assert not torch.equal(before["nsp_head.classifier.weight"], after["nsp_head.classifier.weight"])


def test_import_of_a_sharded_transformers_save(tiny_checkpoint, tmp_path):
    pre = transformers.AutoModelForPreTraining.from_pretrained(export_to_hf(tiny_checkpoint, tmp_path / "hf"))
    pre.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    (tmp_path / "sharded" / "tokenizer.json").write_bytes((tiny_checkpoint / "tokenizer.json").read_bytes())
    result = import_from_hf(tmp_path / "sharded", tmp_path / "imported")
    assert result.initialised == ()
    before, after = load_file(str(tiny_checkpoint / "model.safetensors")), load_file(str(result.path / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def _hf_dir(tmp_path, tiny_checkpoint, **changes):
    hf = export_to_hf(tiny_checkpoint, tmp_path / "hf", overwrite=True)
    doc = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**doc, **changes}))
    return hf


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "deberta"}, "model_type 'deberta' cannot be imported"),
    ({"hidden_act": "relu"}, "hidden_act 'relu' is not supported"),
    ({"architectures": ["BertForSequenceClassification"]}, "architectures \\['BertForSequenceClassification'\\]"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
])
def test_unsupported_hf_architectures_are_refused_listing_the_supported(tiny_checkpoint, tmp_path, changes, message):
    hf = _hf_dir(tmp_path, tiny_checkpoint, **changes)
    with pytest.raises(ContractError, match=message) as err:
        import_from_hf(hf, tmp_path / "out")
    assert "config.json" in str(err.value)
    assert "Supported: model_type 'bert', architectures BertModel, BertForPreTraining, BertForMaskedLM" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_foreign_or_untied_weights_are_refused(tiny_checkpoint, tmp_path):
    hf = _hf_dir(tmp_path, tiny_checkpoint)
    state = load_file(str(hf / "model.safetensors"))
    save_file({**state, "classifier.weight": torch.zeros(2, 32)}, str(hf / "model.safetensors"))
    with pytest.raises(ContractError, match="classifier.weight belong to no supported architecture"):
        import_from_hf(hf, tmp_path / "out")
    untied = {**state, "cls.predictions.decoder.weight": torch.zeros(48, 32)}
    save_file(untied, str(hf / "model.safetensors"))
    with pytest.raises(ContractError, match="untied MLM decoder"):
        import_from_hf(hf, tmp_path / "out")
    tied = {**state, "cls.predictions.decoder.weight": state["bert.embeddings.word_embeddings.weight"].clone()}
    save_file(tied, str(hf / "model.safetensors"))  # a stored but tied decoder (older transformers) is accepted
    assert import_from_hf(hf, tmp_path / "out").initialised == ()
    (hf / "tokenizer.json").unlink()
    with pytest.raises(ContractError, match="no tokenizer.json in"):
        import_from_hf(hf, tmp_path / "out", overwrite=True)


def test_export_refuses_to_replace_a_non_empty_directory(tiny_checkpoint, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="busy exists and is not empty"):
        export_to_hf(tiny_checkpoint, tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "keep me"
    with pytest.raises(InputError, match="must not be, contain or lie inside the source"):
        export_to_hf(tiny_checkpoint, tiny_checkpoint.parent, overwrite=True)
    export_to_hf(tiny_checkpoint, tmp_path / "busy", overwrite=True)
    assert not (tmp_path / "busy" / "notes.txt").exists()


def test_each_direction_given_the_other_kind_of_directory_says_which_it_is(tiny_checkpoint, tmp_path, capsys):
    """`export` of a transformers directory and `import-hf` of one of ours: one line saying what the directory
    already is and which command fits, not a field error about the other format."""
    from flows.cli import main

    hf = export_to_hf(tiny_checkpoint, tmp_path / "hf")
    capsys.readouterr()
    assert main(["export", str(hf), str(tmp_path / "again"), "--to", "hf"]) != 0
    err = capsys.readouterr().err.strip()
    assert "is a Hugging Face transformers directory already" in err and "import-hf" in err and "\n" not in err
    assert main(["import-hf", str(tiny_checkpoint), str(tmp_path / "mine")]) != 0
    err = capsys.readouterr().err.strip()
    assert "is one of our model directories already" in err and "bertfactory export" in err and "\n" not in err
    assert not (tmp_path / "again").exists() and not (tmp_path / "mine").exists()
