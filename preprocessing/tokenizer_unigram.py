"""Deterministic SentencePiece Unigram training (ALBERT / XLM-R tokenizers) into a `tokenizers` Unigram model.

Why not `tokenizers.trainers.UnigramTrainer` (measured with tokenizers 0.23.3: three trainings of the same 20 kB
of news in three processes gave three different tokenizer.json files, every score differing in its last digits):
the Rust trainer keeps the word counts in a HashMap whose iteration order is randomised per process, and it walks
that map (a) to build the suffix array the seed pieces come from, so seeds of equal score are cut at `seed_size` in
a random order, and (b) in the EM steps, whose expected counts are float sums in that order, so the scores differ
in the last bits and pieces whose pruning loss ties are kept or dropped at random.

SentencePiece's own trainer (the reference implementation of Unigram) breaks every tie by the piece string and
splits the E-step over a *configured* number of threads whose partial sums are added in thread order; its input
is read in file order. So we count the words here (Python, order-independent), write them sorted as
`word<TAB>count` lines (SentencePiece's TSV input) and train with a fixed thread count: the result is a pure
function of the multiset of words, whatever the document order, the machine's cores or the process.

The pipeline around the model is `tokenizers`' (so encoding needs no sentencepiece): NFKC, whitespace runs to one
space, control characters removed, optional lowercase / accent stripping, Metaspace pre-tokenizer (every
space-separated word gets a leading ▁) and decoder. SentencePiece is told to do no normalisation of its own and
to treat the ▁ already in the words as the word boundary, so it learns exactly on what the model sees when
encoding. Every character of the sample is kept (character_coverage 1.0): no character of the training text is
<unk>. Runs of a script without spaces (Chinese, Japanese, Thai) are single long words; SentencePiece learns
multi-character pieces inside them (max 16 characters, never across a change of script).
"""

from __future__ import annotations

import io
import tempfile
from collections import Counter
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from bertfactory.errors import InputError

# The E-step's partial sums are per thread: a constant thread count (not the machine's) keeps the floats, and so
# the scores, identical everywhere. 8 is plenty for the sample sizes a tokenizer is trained on.
SENTENCEPIECE_THREADS = 8
MAX_PIECE_CHARS = 16


def unigram_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Normalizer:
    steps = [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Replace(Regex(r"\p{Cc}"), "")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if strip_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents(), normalizers.NFKC()]
    return normalizers.Sequence(steps)


def blank_unigram(lowercase: bool, strip_accents: bool) -> Tokenizer:
    """An untrained tokenizer with the Unigram pipeline (its model is replaced after training)."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = unigram_normalizer(lowercase, strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tokenizer


def train_unigram_pieces(words: Counter, vocab_size: int) -> list[tuple[str, float]]:
    """(piece, log-probability score) of a Unigram vocabulary of at most `vocab_size` pieces trained on the word
    counts, best score first, SentencePiece's <unk> excluded."""
    import sentencepiece as spm

    if not words:
        raise InputError("no words to train the tokenizer on: the training documents are empty")
    with tempfile.TemporaryDirectory(prefix="bertfactory-unigram-") as tmp:
        tsv = Path(tmp) / "words.tsv"
        with open(tsv, "w", encoding="utf-8") as out:
            for word in sorted(words):
                out.write(f"{word}\t{words[word]}\n")
        model = io.BytesIO()
        longest_word_bytes = max(len(w.encode("utf-8")) for w in words)
        spm.SentencePieceTrainer.train(
            input=str(tsv), input_format="tsv", model_writer=model, model_type="unigram",
            vocab_size=vocab_size + 1,  # + its own <unk>, which we drop (our specials carry <unk>)
            hard_vocab_limit=False,  # a small sample may not have that many pieces: take what there is
            normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
            split_by_whitespace=True, character_coverage=1.0, byte_fallback=False,
            max_sentencepiece_length=MAX_PIECE_CHARS, max_sentence_length=max(4192, longest_word_bytes + 1),
            input_sentence_size=0, shuffle_input_sentence=False, num_threads=SENTENCEPIECE_THREADS,
            unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, minloglevel=2,
        )
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [(processor.id_to_piece(i), float(processor.get_score(i)))
            for i in range(processor.get_piece_size()) if not processor.is_unknown(i)]


def unigram_from_pieces(blank: Tokenizer, specials: list[str], unk: str,
                        pieces: list[tuple[str, float]]) -> Tokenizer:
    """The blank pipeline with a Unigram model: the special tokens first (ids 0..), then the pieces."""
    taken = set(specials)
    vocab = [(token, 0.0) for token in specials] + [(p, s) for p, s in pieces if p not in taken]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=specials.index(unk), byte_fallback=False))
    tokenizer.normalizer = blank.normalizer
    tokenizer.pre_tokenizer = blank.pre_tokenizer
    tokenizer.decoder = blank.decoder
    tokenizer.add_special_tokens(specials)
    return tokenizer
