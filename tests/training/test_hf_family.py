"""Export of RoBERTa- and ALBERT-style checkpoints to transformers (training/hf/layouts.py via
training.hf.export_to_hf): transformers loads them with nothing missing and computes the same MLM (and SOP)
logits as ours to 1e-5; the layout is chosen from the checkpoint; what transformers cannot express is refused."""

import json

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from bertfactory.errors import ContractError
from flows.cli import main
from training.checkpoint import load_pretrained, save_pretrained
from training.hf import export_to_hf
from training.hf.layouts import choose_layout
from training.models.bert.model import BertConfig, BertForPreTraining

transformers = pytest.importorskip("transformers")

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _tokenizer(path, pad_id: int = 0):
    tokens = list(SPECIALS)
    tokens[0], tokens[pad_id] = tokens[pad_id], tokens[0]  # RoBERTa's <pad> is id 1
    vocab = {t: i for i, t in enumerate(tokens + [f"w{i}" for i in range(40)])}
    path.parent.mkdir(parents=True, exist_ok=True)
    Tokenizer(WordLevel(vocab, unk_token="[UNK]")).save(str(path))
    return path


def _checkpoint(tmp_path, config: BertConfig, objective: str | None, name: str = "ours"):
    """A model of ours with every parameter random (heads included), saved as pretraining saves it (with the
    objective recorded in the provenance) or, objective None, without provenance."""
    torch.manual_seed(0)
    model = BertForPreTraining(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    training = None if objective is None else {"step": 5, "fingerprint": {"pretrain": {"objective": objective}}}
    tokenizer = _tokenizer(tmp_path / "tok" / "tokenizer.json", config.pad_token_id)
    return save_pretrained(model, config, tokenizer, tmp_path / name, training=training)


def _batch(pad_id: int, types: bool):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 45, (3, 20), generator=g)  # never the pad id at a real position
    ids[:, 0], ids[:, 9] = 2, 3
    token_types = torch.zeros_like(ids)
    if types:
        token_types[:, 10:] = 1
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    mask[2, 6:] = 0
    ids[mask == 0] = pad_id
    token_types[mask == 0] = 0
    return ids, token_types, mask


def _ours(directory, ids, types, mask):
    model, config, _ = load_pretrained(directory)
    with torch.no_grad():
        hidden = model.bert(ids, types, mask)
        mlm = model.mlm_head(hidden.reshape(-1, config.hidden_size), model.bert.embeddings.word_embeddings.weight)
        sentence = model.nsp_head(model.bert.pooler(hidden))
    return mlm.reshape(*ids.shape, -1), sentence


def _max_diff(a, b, mask):
    return (a - b).abs()[mask.bool()].max().item()  # padded positions differ by design (their outputs are unused)


ROBERTA = dict(vocab_size=45, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
               max_position_embeddings=24, type_vocab_size=1, layer_norm_eps=1e-5)


@pytest.mark.parametrize("pad_id", [0, 1])
def test_roberta_export_gives_transformers_the_same_mlm_logits(tmp_path, pad_id):
    config = BertConfig(**ROBERTA, pad_token_id=pad_id)
    ours_dir = _checkpoint(tmp_path, config, "mlm")
    out = export_to_hf(ours_dir, tmp_path / "hf")  # layout chosen from the recorded objective
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "roberta" and hf_config["architectures"] == ["RobertaForMaskedLM"]
    assert hf_config["max_position_embeddings"] == 24 + pad_id + 1 and hf_config["pad_token_id"] == pad_id
    assert hf_config["type_vocab_size"] == 1

    ids, types, mask = _batch(pad_id, types=False)
    our_mlm, _ = _ours(ours_dir, ids, types, mask)
    mlm, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(mlm).__name__ == "RobertaForMaskedLM"
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert set(info["unexpected_keys"]) <= {"roberta.pooler.dense.weight", "roberta.pooler.dense.bias"}, info
    with torch.no_grad():
        logits = mlm.eval()(input_ids=ids, attention_mask=mask).logits
    diff = _max_diff(our_mlm, logits, mask)
    print(f"RoBERTa export (pad id {pad_id}) max |ours - transformers| MLM logits: {diff:.2e}")
    assert our_mlm.abs().max() > 1 and diff < 1e-5

    # AutoModel (RobertaModel with its pooler) takes the pooler too
    base, info = transformers.AutoModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"], info
    model, _, _ = load_pretrained(ours_dir)
    with torch.no_grad():
        ours_hidden = model.bert(ids, types, mask)
        hf_out = base.eval()(input_ids=ids, attention_mask=mask)
    assert _max_diff(ours_hidden, hf_out.last_hidden_state, mask) < 1e-5
    torch.testing.assert_close(model.bert.pooler(ours_hidden), hf_out.pooler_output, rtol=0, atol=1e-5)


ALBERT = dict(vocab_size=45, hidden_size=32, num_layers=4, num_heads=4, intermediate_size=64,
              max_position_embeddings=24, embedding_size=16, hidden_dropout=0.0, attention_dropout=0.0)


@pytest.mark.parametrize("share, groups", [("all", 1), ("all", 2), ("none", 1)])
def test_albert_export_gives_transformers_the_same_mlm_and_sop_logits(tmp_path, share, groups):
    config = BertConfig(**ALBERT, share_layers=share, num_layer_groups=groups)
    ours_dir = _checkpoint(tmp_path, config, "mlm_sop")
    out = export_to_hf(ours_dir, tmp_path / "hf")
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "albert" and hf_config["architectures"] == ["AlbertForPreTraining"]
    assert hf_config["num_hidden_groups"] == (groups if share == "all" else 4) and hf_config["embedding_size"] == 16

    ids, types, mask = _batch(0, types=True)
    our_mlm, our_sop = _ours(ours_dir, ids, types, mask)
    pre, info = transformers.AutoModelForPreTraining.from_pretrained(out, output_loading_info=True)
    assert type(pre).__name__ == "AlbertForPreTraining" and not any(info.values()), info
    mlm, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(mlm).__name__ == "AlbertForMaskedLM" and not info["missing_keys"], info
    with torch.no_grad():
        pre_out = pre.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask)
        mlm_logits = mlm.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    diffs = {"pretraining MLM": _max_diff(our_mlm, pre_out.prediction_logits, mask),
             "masked-LM MLM": _max_diff(our_mlm, mlm_logits, mask),
             "SOP": (our_sop - pre_out.sop_logits).abs().max().item()}
    print(f"ALBERT export (share {share}, {groups} group(s)) max |ours - transformers|:",
          {k: f"{v:.2e}" for k, v in diffs.items()})
    assert our_mlm.abs().max() > 1 and our_sop.abs().max() > 0.1
    assert all(d < 1e-5 for d in diffs.values()), diffs


def test_a_plain_bert_exports_to_albert_with_an_identity_projection(tmp_path):
    config = BertConfig(**{**ALBERT, "embedding_size": None})
    ours_dir = _checkpoint(tmp_path, config, None)
    assert choose_layout({}, config, None, "x") == "bert"
    out = export_to_hf(ours_dir, tmp_path / "hf", layout="albert")
    ids, types, mask = _batch(0, types=True)
    our_mlm, our_sop = _ours(ours_dir, ids, types, mask)
    pre = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
    with torch.no_grad():
        hf_out = pre(input_ids=ids, token_type_ids=types, attention_mask=mask)
    assert _max_diff(our_mlm, hf_out.prediction_logits, mask) < 1e-5
    assert (our_sop - hf_out.sop_logits).abs().max().item() < 1e-5


@pytest.mark.parametrize("fields, record, layout", [
    ({}, "mlm_nsp", "bert"), ({}, "mlm", "roberta"), ({}, "mlm_sop", "albert"), ({}, None, "bert"),
    ({"type_vocab_size": 1}, None, "roberta"), ({"embedding_size": 8}, "mlm", "albert"),
    ({"share_layers": "all"}, None, "albert"),
])
def test_auto_layout_follows_structure_then_the_recorded_objective(fields, record, layout):
    config = BertConfig(**{**ROBERTA, "type_vocab_size": 2, **fields})
    doc = {} if record is None else {"training": {"fingerprint": {"pretrain": {"objective": record}}}}
    assert choose_layout(doc, config, None, "config.json") == layout
    assert choose_layout(doc, config, "auto", "config.json") == layout


def test_what_transformers_cannot_express_is_refused(tmp_path):
    for share in ("attention", "ffn"):
        ours_dir = _checkpoint(tmp_path, BertConfig(**ALBERT, share_layers=share), "mlm_sop", name=f"ours-{share}")
        with pytest.raises(ContractError, match=f"share_layers='{share}'.*cannot be expressed"):
            export_to_hf(ours_dir, tmp_path / f"hf-{share}")
        assert not (tmp_path / f"hf-{share}").exists()
    albert = _checkpoint(tmp_path, BertConfig(**ALBERT, share_layers="all"), "mlm_sop", name="albert")
    for layout in ("bert", "roberta"):
        with pytest.raises(ContractError, match="model.embedding_size=16.*export it with layout albert"):
            export_to_hf(albert, tmp_path / "x", layout=layout)
    with pytest.raises(ContractError, match="unknown export layout 'xlnet'"):
        export_to_hf(albert, tmp_path / "x", layout="xlnet")


def test_cli_export_layout_option(tmp_path, capsys):
    ours_dir = _checkpoint(tmp_path, BertConfig(**ROBERTA), None)
    assert main(["export", str(ours_dir), "--to", "hf", "--layout", "roberta", str(tmp_path / "hf")]) == 0
    assert "RobertaForMaskedLM" in capsys.readouterr().out
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "roberta"


@pytest.mark.parametrize("layout, hf_class", [("bert", "BertForMaskedLM"), ("albert", "AlbertForMaskedLM"),
                                              ("roberta", "RobertaForMaskedLM")])
def test_a_model_without_sentence_head_exports_as_a_masked_lm(tmp_path, layout, hf_class):
    fields = {**ALBERT, "share_layers": "all"} if layout == "albert" else {**ROBERTA, "type_vocab_size": 2}
    config = BertConfig(**fields, sentence_head=False)
    ours_dir = _checkpoint(tmp_path, config, None)
    model = load_pretrained(ours_dir)[0]
    assert not hasattr(model, "nsp_head")
    out = export_to_hf(ours_dir, tmp_path / "hf", layout=layout)
    assert json.loads((out / "config.json").read_text())["architectures"] == [hf_class]
    mlm, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(mlm).__name__ == hf_class and not info["missing_keys"] and not info["mismatched_keys"], info
    ids, types, mask = _batch(0, types=True)
    if layout == "roberta":
        types = torch.zeros_like(types)
    with torch.no_grad():
        hidden = model.bert(ids, types, mask)
        ours = model.mlm_head(hidden, model.bert.embeddings.word_embeddings.weight)
        theirs = mlm.eval()(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
    assert _max_diff(ours, theirs, mask) < 1e-5


def test_spanbert_exports_its_encoder_and_mlm_head_as_a_masked_lm(tmp_path):
    from training.models.spanbert.model import SpanBertConfig, SpanBertForPreTraining

    config = SpanBertConfig(**ROBERTA, sbo_max_span_tokens=5, sbo_position_size=8)
    torch.manual_seed(0)
    model = SpanBertForPreTraining(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    tokenizer = _tokenizer(tmp_path / "tok" / "tokenizer.json")
    ours_dir = save_pretrained(model, config, tokenizer, tmp_path / "ours",
                               training={"step": 1, "fingerprint": {"pretrain": {"objective": "mlm_sbo"}}})
    out = export_to_hf(ours_dir, tmp_path / "hf")  # type_vocab_size 1: the RoBERTa layout
    mlm, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(mlm).__name__ == "RobertaForMaskedLM" and not info["missing_keys"], info
    ids, types, mask = _batch(0, types=False)
    model.eval()
    with torch.no_grad():
        ours = model.mlm_head(model.bert(ids, types, mask), model.bert.embeddings.word_embeddings.weight)
        theirs = mlm.eval()(input_ids=ids, attention_mask=mask).logits
    assert _max_diff(ours, theirs, mask) < 1e-5
    bert = export_to_hf(ours_dir, tmp_path / "bert", layout="bert")
    assert json.loads((bert / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
