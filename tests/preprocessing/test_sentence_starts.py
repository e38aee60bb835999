"""Byte-level BPE: every sentence's first word starts a word unit for the masking policies.

The pipeline tokenises one sentence at a time (TokenizeDoc) and packs the sentences into FULL-SENTENCES rows, so a
sentence's first word sits right after the previous sentence's last word. Byte-level BPE marks word *starts* (`Ġ`),
so unless the tokenizer gives the first word its space it would continue the word before it and be masked with it.
Checked on real text (State of the Union addresses, the `sotu` sample) through the real trainer, sentence splitter,
packer and masker; the same vocabulary without the prefix space is the control that shows the check can fail."""

import json
import random

import pytest
from tokenizers import Tokenizer

from bertfactory.samples import sample_path
from preprocessing.config import MaskingConfig, TokenizerConfig
from preprocessing.masking import Masker
from preprocessing.masking_policies import POLICIES
from preprocessing.segments import full_sentences
from preprocessing.sentences import split_sentences
from preprocessing.tokenizer import adopt_tokenizer, save_tokenizer, special_ids, train_tokenizer

ADDRESSES = ("1995_william_j_clinton_d.txt", "1962_john_f_kennedy_d.txt", "1934_franklin_d_roosevelt_d.txt",
             "1863_abraham_lincoln_r.txt")
POLICY_NAMES = ("whole-word", "ngram", "span")


@pytest.fixture(scope="module")
def corpus():
    docs = []
    for name in ADDRESSES:
        text = sample_path("sotu", name).read_text(encoding="utf-8")
        docs.append([s for line in text.splitlines() if line.strip() for s in split_sentences(line.strip(), "en")])
    tok = train_tokenizer(lambda: (" ".join(d) for d in docs),
                          TokenizerConfig(kind="bpe", vocab_size=2000, min_frequency=2, lowercase=False))
    return docs, tok


def _rows_with_sentence_starts(docs, tok):
    """FULL-SENTENCES rows of the documents (tokenised sentence by sentence, as the pipeline does) and, per row, the
    positions where a sentence begins. The positions come from packing a shadow corpus of the same lengths whose
    token ids are global token numbers, so the real packer decides where everything goes."""
    specials = special_ids(tok, "t")
    tokenised, shadow, starts, number = [], [], set(), 0
    for doc_id, sentences in enumerate(docs):
        ids = [e.ids for e in tok.encode_batch_fast(sentences, add_special_tokens=False) if e.ids]
        tokenised.append((doc_id, ids, 0))
        numbered = []
        for sentence in ids:
            starts.add(number)
            numbered.append(list(range(number, number + len(sentence))))
            number += len(sentence)
        shadow.append((doc_id, numbered, 0))
    rows = full_sentences(tokenised, 128, specials["cls"], specials["sep"])
    shadows = full_sentences(shadow, 128, -1, -2)
    assert [len(r.input_ids) for r in rows] == [len(r.input_ids) for r in shadows]
    return [(row.input_ids, [p for p, n in enumerate(s.input_ids) if n in starts])
            for row, s in zip(rows, shadows)]


def _word_starts(masker: Masker, ids) -> set[int]:
    return {word[0] for run in masker.candidates(ids).word_runs() for word in run}


def _check(docs, tok) -> tuple[int, int]:
    """(sentence starts inside rows, how many of them start a word / unit under every policy)."""
    rows = _rows_with_sentence_starts(docs, tok)
    total = starting = 0
    maskers = {p: Masker.from_tokenizer(MaskingConfig(policy=p, variants=1), 3, tok) for p in POLICY_NAMES}
    for ids, sentence_starts in rows:
        # a sentence start right after [CLS] / [SEP] starts a word whatever the tokenizer: count the others
        inner = [p for p in sentence_starts if p > 0 and ids[p - 1] not in maskers["span"].special_ids]
        total += len(inner)
        ok = set(inner)
        for policy, masker in maskers.items():
            candidates = masker.candidates(ids)
            ok &= _word_starts(masker, ids)
            unit_firsts = {unit[0] for unit in POLICIES[policy](candidates, random.Random(0))}
            if policy != "span":  # whole words and n-grams: one unit starts at every word (span: any word start
                ok &= unit_firsts  # may be drawn, word_runs decides which)
        starting += len(ok)
    return total, starting


def test_every_sentence_starts_a_word_unit_with_bpe(corpus):
    docs, tok = corpus
    total, starting = _check(docs, tok)
    assert total > 500  # sentences that begin inside a row, after another sentence's last token
    assert starting == total  # measured: 630 of 630


def test_without_the_prefix_space_sentences_join_the_word_before(corpus, tmp_path):
    """The control: the same vocabulary with the ByteLevel prefix space off (as an adopted GPT-2 / RoBERTa
    tokenizer.json may be) spells most first words without `Ġ`, and they continue the previous sentence's last
    word; adopting such a file warns."""
    docs, tok = corpus
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"]["add_prefix_space"] = False
    plain = Tokenizer.from_str(json.dumps(spec))
    total, starting = _check(docs, plain)
    assert total > 500 and starting < 0.05 * total  # measured: 0 of 618


def test_adopting_a_byte_level_tokenizer_without_prefix_space_warns(corpus, tmp_path, caplog):
    _, tok = corpus
    save_tokenizer(tok, tmp_path / "good.json")
    spec = json.loads(tok.to_str())
    spec["pre_tokenizer"]["add_prefix_space"] = False
    (tmp_path / "bad.json").write_text(json.dumps(spec), encoding="utf-8")
    with caplog.at_level("WARNING", logger="preprocessing.tokenizer"):
        adopt_tokenizer(tmp_path / "good.json", tmp_path / "out1.json")
        assert not caplog.records
        adopt_tokenizer(tmp_path / "bad.json", tmp_path / "out2.json")
    assert len(caplog.records) == 1 and "bad.json" in caplog.text and "add_prefix_space" in caplog.text


def test_bpe_prefix_space_keeps_encoding_and_decoding_consistent(corpus):
    """A sentence's first word gets the id it has inside a sentence, and decoding drops the added space."""
    _, tok = corpus
    alone = tok.encode("Congress", add_special_tokens=False).ids
    inside = tok.encode("the Congress", add_special_tokens=False).ids
    assert inside[-len(alone):] == alone and tok.id_to_token(alone[0]).startswith("\u0120")
    text = "We hold these truths. Congress shall make no law."
    assert tok.decode(tok.encode(text).ids) == text
