"""Word boundaries and token texts from a tokenizer's vocabulary, for the masking policies that work on whole
words (preprocessing.masking_policies) or read their text (entity): which ids continue the word before them
(WordPiece `##ing`; byte-level BPE and Unigram mark word starts instead) and each id's text without its word
marker (docs/masking.md). Pure Python, no Beam, no tokenizers package.

    python -c "from preprocessing.masking_vocab import word_continuation_ids as w; print(w({'a': 0, '##b': 1}))"
"""

from __future__ import annotations

from typing import Mapping

def continuation_ids(vocab: Mapping[str, int], prefix: str = "##") -> frozenset[int]:
    """Ids of a WordPiece vocabulary's continuation pieces (tokens that start with `prefix`, e.g. `##ing`)."""
    return frozenset(i for token, i in vocab.items() if token.startswith(prefix) and len(token) > len(prefix))


# word-start markers of byte-level BPE (RoBERTa: "Ġ" = a space before the token) and SentencePiece/Unigram ("▁")
_WORD_START_MARKERS = ("\u0120", "\u2581")


def word_continuation_ids(vocab: Mapping[str, int]) -> frozenset[int]:
    """Ids of the tokens that continue the word before them, for any tokenizer kind bertfactory trains:
    WordPiece marks continuations (`##ing`); byte-level BPE and Unigram mark word starts instead (`Ġword`,
    `▁word`), so there every token without the marker continues a word. For BPE that includes punctuation after
    a word ("end" + "." is one word to mask). Every sentence's first word carries the marker, because the pipeline
    tokenises one sentence at a time and both kinds prepend the space (Metaspace `prepend_scheme`, ByteLevel
    `add_prefix_space`; preprocessing.tokenizer): without it a sentence's first word would continue the previous
    sentence's last word and be masked with it. Special tokens are excluded by the masker itself."""
    if any(token.startswith("##") and len(token) > 2 for token in vocab):
        return continuation_ids(vocab, "##")
    for marker in _WORD_START_MARKERS:
        if any(token.startswith(marker) for token in vocab):
            return frozenset(i for token, i in vocab.items() if not token.startswith(marker))
    return frozenset()


def _byte_level_chars() -> dict[str, int]:
    """GPT-2's byte -> printable character table, inverted (char -> byte): how byte-level BPE spells bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_text_table(vocab: Mapping[str, int]) -> tuple[tuple[str, ...], bool]:
    """(text of every id, byte_level): each token's text without its word marker - `##` of WordPiece pieces
    removed; Unigram's `▁` and byte-level BPE's `Ġ` turned into the space they stand for (Candidates.word_text
    strips it); byte-level BPE tokens spelled as one latin-1 char per byte (byte_level True), so a word's bytes
    decode as UTF-8 even when a character is split across tokens. Ids missing from `vocab` get ""."""
    texts = [""] * (max(vocab.values(), default=-1) + 1)
    if any(token.startswith("##") and len(token) > 2 for token in vocab):
        for token, i in vocab.items():
            texts[i] = token[2:] if token.startswith("##") and len(token) > 2 else token
        return tuple(texts), False
    if any(token.startswith("\u0120") for token in vocab):
        byte_of = _byte_level_chars()
        for token, i in vocab.items():
            if all(ch in byte_of for ch in token):
                texts[i] = "".join(chr(byte_of[ch]) for ch in token)
            else:  # an added token (<s>, <mask>) is plain text; keep it as its UTF-8 bytes
                texts[i] = token.encode("utf-8").decode("latin-1")
        return tuple(texts), True
    for token, i in vocab.items():
        texts[i] = token.replace("\u2581", " ")
    return tuple(texts), False
