"""preprocessing.tokenizer: BERT WordPiece, stable special ids, and byte-identical training across processes."""

import json
import random
import subprocess
import sys
import textwrap

from preprocessing.config import TokenizerConfig
from preprocessing.tokenizer import SPECIAL_TOKENS, adopt_tokenizer, save_tokenizer, special_ids, train_tokenizer

_TRAIN_SCRIPT = textwrap.dedent("""
    import json, random, sys
    from pathlib import Path
    from preprocessing.config import TokenizerConfig
    from preprocessing.tokenizer import save_tokenizer, train_tokenizer
    lines = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
    if sys.argv[3] == "shuffled":
        random.Random(1).shuffle(lines)
    cfg = TokenizerConfig(vocab_size=600, min_frequency=2, limit_alphabet=30)
    save_tokenizer(train_tokenizer(lambda: iter(lines), cfg), Path(sys.argv[2]))
""")


def _corpus(wiki) -> list[str]:
    """Prose from the test wiki plus pseudo-words from syllables: many merges of equal count (ties)."""
    from preprocessing.clean import wikitext_to_paragraphs

    rng = random.Random(0)
    lines = []
    for _ in range(20):
        lines += wikitext_to_paragraphs(wiki.article_text(rng))
    syllables = ["ka", "lo", "mi", "tu", "ren", "sar", "vel", "dio", "pha", "gru", "ux", "bre", "Ön", "zy"]
    for _ in range(400):
        lines.append(" ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(12)))
    # characters of equal, low frequency: the limit_alphabet cut falls among them
    lines += [f"rare {chr(c)} zq{chr(c)}x" for c in range(0x3b1, 0x3c9)]
    return lines


def test_training_is_byte_identical_across_processes_orders_and_threads(tmp_path, wiki):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_corpus(wiki)), encoding="utf-8")
    outputs = []
    for i, (order, threads) in enumerate([("file", "2"), ("file", "2"), ("shuffled", "1")]):
        out = tmp_path / f"tok{i}.json"
        env = {"RAYON_NUM_THREADS": threads, "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", _TRAIN_SCRIPT, str(corpus), str(out), order], check=True, env=env)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    vocab = json.loads(outputs[0])["model"]["vocab"]
    assert len(vocab) == 600
    assert sum(1 for t in vocab if len(t) == 1) == 30  # limit_alphabet honoured


def test_bert_layout_special_ids_and_post_processor(wiki):
    lines = _corpus(wiki)
    tok = train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300, limit_alphabet=40))
    assert special_ids(tok, "t") == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS.values())
    enc = tok.encode("The River", "a Mountain")
    assert enc.tokens[0] == "[CLS]" and enc.tokens.count("[SEP]") == 2 and "river" in enc.tokens
    assert enc.type_ids == [0] * (enc.tokens.index("[SEP]") + 1) + [1] * (len(enc.tokens) - enc.tokens.index("[SEP]") - 1)
    # the pre-registered ## tokens are ordinary vocabulary again: matched only inside words, never skipped
    added = {t["content"] for t in json.loads(tok.to_str())["added_tokens"]}
    assert added == set(SPECIAL_TOKENS.values())
    assert tok.decode(tok.encode("rivers").ids) == "rivers"


def test_adopting_an_existing_tokenizer_copies_it(tmp_path, wiki):
    lines = _corpus(wiki)
    source = tmp_path / "mine.json"
    save_tokenizer(train_tokenizer(lambda: iter(lines), TokenizerConfig(vocab_size=300)), source)
    target = tmp_path / "run" / "tokenizer.json"
    adopt_tokenizer(source, target)
    assert target.read_bytes() == source.read_bytes()


def test_adopting_a_broken_tokenizer_names_it_and_writes_nothing(tmp_path):
    import pytest

    from bertfactory.errors import InputError

    source = tmp_path / "broken.json"
    source.write_bytes(b"\xff\xfe not json")
    target = tmp_path / "run" / "tokenizer.json"
    with pytest.raises(InputError) as err:
        adopt_tokenizer(source, target)
    assert str(source) in str(err.value)
    assert not target.parent.exists() or not any(target.parent.iterdir())
