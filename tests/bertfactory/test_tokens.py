"""bertfactory.tokens: the special-token roles of every tokenizer family, read the same way by the checkpoint
writer (training.checkpoint.tokenizer_info) and the task encoder (evaluation.encode.TextEncoder)."""

import pytest

from bertfactory.tokens import role_tokens, special_token_ids, tokenizer_kind
from evaluation.encode import TextEncoder
from preprocessing.config import TokenizerConfig
from preprocessing.tokenizer import save_tokenizer, train_tokenizer
from training.checkpoint import tokenizer_info

TEXTS = ["the cat sat on the mat", "a dog chased the cat around the garden", "birds sing in the morning light"] * 20


@pytest.mark.parametrize("kind, cls_token, sep_token", [("wordpiece", "[CLS]", "[SEP]"), ("bpe", "<s>", "</s>"),
                                                        ("unigram", "[CLS]", "[SEP]")])
def test_every_kind_is_read_by_checkpoint_and_encoder(tmp_path, kind, cls_token, sep_token):
    tok = train_tokenizer(lambda: iter(TEXTS), TokenizerConfig(kind=kind, vocab_size=300, min_frequency=1,
                                                               lowercase=kind != "bpe"))
    path = tmp_path / "tokenizer.json"
    save_tokenizer(tok, path)
    assert tokenizer_kind(tok) == kind
    ids = special_token_ids(tok)
    assert set(ids) == {"pad", "unk", "cls", "sep", "mask"} and len(set(ids.values())) == 5
    assert role_tokens(tok)["cls"] == cls_token and role_tokens(tok)["sep"] == sep_token
    assert tokenizer_info(path)["special_ids"] == ids
    encoder = TextEncoder.from_file(path)
    assert encoder.cls_id == ids["cls"] and encoder.sep_id == ids["sep"] and encoder.pad_id == ids["pad"]
    row = encoder.encode(["the cat"], max_seq_len=16)[0]
    assert int(row[0]) == ids["cls"] and int(row[-1]) == ids["sep"] and len(row) > 2


def test_a_tokenizer_with_no_family_is_refused_by_the_encoder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "plain.json"
    tok.save(str(path))
    assert tokenizer_kind(tok) is None and special_token_ids(tok) == {"unk": 2}
    with pytest.raises(Exception, match="has no pad, cls, sep token"):
        TextEncoder.from_file(path)
