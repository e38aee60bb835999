"""Adopting a Hugging Face tokenizer through preprocess.tokenizer.path (preprocessing.tokenizer.adopt_tokenizer):
the real MiniLM's own tokenizer.json (which pads and truncates to 128) and its bare vocab.txt (BERT WordPiece) give
the same ids and no pad ids; bad vocab files fail with one line naming the file (and line)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from bertfactory.errors import InputError
from bertfactory.samples import is_fetched, sample_path
from preprocessing.config import TokenizerConfig
from preprocessing.tokenizer import adopt_tokenizer, special_ids

needs_minilm = pytest.mark.skipif(not is_fetched("minilm"), reason="needs `bertfactory samples fetch minilm`")

TEXTS = ["The movie's plot was UNBELIEVABLY thin, but Keanu Reeves carries it.",
         "What is the capital of Burkina Faso?", "naïve café owners re-opened in 1998 — finally!",
         "a" * 150, "[MASK] tokens and [SEP] stay whole"]


@needs_minilm
def test_minilm_tokenizer_json_is_adopted_without_its_padding_and_truncation(tmp_path):
    source = sample_path("minilm") / "tokenizer.json"
    assert json.loads(source.read_text())["padding"]  # the sample pads to 128: what adoption must drop
    out = tmp_path / "tokenizer.json"
    tokenizer = adopt_tokenizer(source, out)
    written = json.loads(out.read_text())
    assert written["padding"] is None and written["truncation"] is None
    reread = Tokenizer.from_file(str(out))
    pad = special_ids(reread, "t")["pad"]
    for text in TEXTS:
        ids = reread.encode(text, add_special_tokens=False).ids
        assert pad not in ids and ids == tokenizer.encode(text, add_special_tokens=False).ids
    long = " ".join(["word"] * 300)
    assert len(reread.encode(long, add_special_tokens=False).ids) == 300  # not truncated to 128
    # the vocabulary and the ids are the file's own
    original = Tokenizer.from_file(str(source))
    assert reread.get_vocab(with_added_tokens=True) == original.get_vocab(with_added_tokens=True)


@needs_minilm
def test_minilm_vocab_txt_gives_the_ids_of_its_tokenizer_json(tmp_path):
    vocab = sample_path("minilm") / "vocab.txt"
    adopt_tokenizer(vocab, tmp_path / "from_vocab.json", TokenizerConfig(lowercase=True))
    adopt_tokenizer(sample_path("minilm") / "tokenizer.json", tmp_path / "from_json.json")
    a, b = (Tokenizer.from_file(str(tmp_path / n)) for n in ("from_vocab.json", "from_json.json"))
    assert a.get_vocab_size() == b.get_vocab_size() == 30522
    assert special_ids(a, "a") == special_ids(b, "b") == {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
    for text in TEXTS:
        assert a.encode(text).ids == b.encode(text).ids, text
        assert a.encode(text, "second part").type_ids == b.encode(text, "second part").type_ids
    # adopted twice: the same bytes (the build is deterministic)
    adopt_tokenizer(vocab, tmp_path / "again.json", TokenizerConfig(lowercase=True))
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "from_vocab.json").read_bytes()


def _vocab(tmp_path, tokens, name="vocab.txt"):
    path = tmp_path / name
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


BASE = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "t", "h", "e", "c", "a", "s", "T"]


def test_vocab_txt_lowercases_as_the_recipe_says(tmp_path):
    vocab = _vocab(tmp_path, BASE)
    lower = adopt_tokenizer(vocab, tmp_path / "lower.json", TokenizerConfig(lowercase=True))
    cased = adopt_tokenizer(vocab, tmp_path / "cased.json", TokenizerConfig(lowercase=False))
    assert lower.encode("The cats", add_special_tokens=False).tokens == ["the", "cat", "##s"]
    assert cased.encode("The cats", add_special_tokens=False).tokens == ["[UNK]", "cat", "##s"]
    assert lower.encode("cat").tokens == ["[CLS]", "cat", "[SEP]"]


def test_vocab_txt_casing_must_agree_with_its_tokenizer_config(tmp_path):
    vocab = _vocab(tmp_path, BASE)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with pytest.raises(InputError) as err:
        adopt_tokenizer(vocab, tmp_path / "out.json", TokenizerConfig(lowercase=True))
    message = str(err.value)
    assert "do_lower_case is false" in message and "lowercase: false" in message and "\n" not in message
    adopt_tokenizer(vocab, tmp_path / "out.json", TokenizerConfig(lowercase=False))  # agreeing: adopted


@pytest.mark.parametrize("tokens, raw, expected", [
    (BASE[1:], None, "lacks BERT's special token(s) [PAD]"),
    (BASE + ["cat"], None, "vocab.txt:16: token 'cat' repeats line 7"),
    (BASE[:6] + [""] + BASE[6:], None, "vocab.txt:7: empty line"),
    (None, b"[PAD]\n[UNK]\n\xff\xfe\n", "vocab.txt:3: not valid UTF-8"),
    (None, b"", "empty vocab.txt"),
])
def test_a_bad_vocab_txt_fails_with_one_line_naming_it(tmp_path, tokens, raw, expected):
    if raw is None:
        path = _vocab(tmp_path, tokens)
    else:
        path = tmp_path / "vocab.txt"
        path.write_bytes(raw)
    out = tmp_path / "run" / "tokenizer.json"
    with pytest.raises(InputError) as err:
        adopt_tokenizer(path, out)
    message = str(err.value)
    assert expected in message and str(tmp_path) in message and "\n" not in message
    assert not out.exists()


def test_a_tokenizer_json_without_padding_is_still_copied_byte_for_byte(tmp_path):
    vocab = _vocab(tmp_path, BASE)
    built = tmp_path / "built.json"
    adopt_tokenizer(vocab, built)
    copy = tmp_path / "copy.json"
    adopt_tokenizer(built, copy)
    assert copy.read_bytes() == built.read_bytes()
