"""Tokenizer fertility per language: how many tokens a tokenizer spends on a language's text.

    from preprocessing.fertility import fertility
    fertility(tokenizer, {"en": [...], "zh": [...]})
    # {"zh": {"texts": 3, "chars": 5803, "words": None, "tokens": 4421, "tokens_per_char": 0.762,
    #         "chars_per_token": 1.313, "tokens_per_word": None, "unk_rate": 0.0, "spaced": False}, ...}

Definitions (tokens are those of `encode(text, add_special_tokens=False)`, counted from `encode_batch_fast`: the
same ids without the character offsets, which nothing here needs):
- chars = characters that are not whitespace (so that languages with and without spaces compare);
- words = whitespace-separated tokens of the raw text;
- tokens_per_char, chars_per_token = tokens / chars and its inverse;
- tokens_per_word = tokens / words, only where words mean something: for text written mostly in scripts without
  spaces between words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Burmese: `spaced` False) a whitespace token is
  a phrase or a whole sentence, so it is None there and tokens_per_char is the figure to compare;
- unk_rate = tokens that are the tokenizer's unknown token / tokens (0 for byte-level BPE by construction).

    python -m preprocessing.fertility tokenizer.json LANG=FILE.txt [LANG=FILE.txt ...]
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from .tokenizer import special_ids

# Scripts written without spaces between words.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0eff\u1780-\u17ff\u1000-\u109f]")
# runs rather than single characters: counting by len(text) - len(sub("", text)) makes no list of every letter
_UNSPACED_RUN = re.compile(_UNSPACED.pattern + "+")
_LETTER_RUN = re.compile(r"[^\W\d_]+")
_BATCH = 256


def _count(run: re.Pattern, text: str) -> int:
    """Characters of `text` that `run`'s character class matches."""
    return len(text) - len(run.sub("", text))


def is_spaced(texts: Sequence[str]) -> bool:
    """Whether most letters of the texts are in scripts that put spaces between words."""
    letters = sum(_count(_LETTER_RUN, t) for t in texts)
    unspaced = sum(_count(_UNSPACED_RUN, t) for t in texts)
    return letters == 0 or unspaced * 2 < letters


def fertility(tokenizer: Tokenizer, texts_by_lang: Mapping[str, Sequence[str]]) -> dict[str, dict]:
    """{lang: {texts, chars, words, tokens, tokens_per_char, chars_per_token, tokens_per_word, unk_rate, spaced}}
    for every language (sorted); see the module docstring for the definitions."""
    unk = special_ids(tokenizer, "tokenizer")["unk"]
    out: dict[str, dict] = {}
    for lang in sorted(texts_by_lang):
        texts = list(texts_by_lang[lang])
        split = [t.split() for t in texts]  # str.split() splits on exactly the characters str.isspace() accepts
        chars = sum(len(w) for ws in split for w in ws)
        words = sum(map(len, split))
        del split
        tokens = unknown = 0
        for start in range(0, len(texts), _BATCH):
            for enc in tokenizer.encode_batch_fast(texts[start:start + _BATCH], add_special_tokens=False):
                tokens += len(enc.ids)
                unknown += enc.ids.count(unk)
        spaced = is_spaced(texts)
        out[lang] = {
            "texts": len(texts), "chars": chars, "words": words if spaced else None, "tokens": tokens,
            "tokens_per_char": round(tokens / chars, 4) if chars else None,
            "chars_per_token": round(chars / tokens, 4) if tokens else None,
            "tokens_per_word": round(tokens / words, 4) if spaced and words else None,
            "unk_rate": round(unknown / tokens, 6) if tokens else 0.0,
            "spaced": spaced,
        }
    return out


def first_chars(texts: list[str], budget: int) -> list[str]:
    """The texts in order up to `budget` characters in all (a bounded sample to measure fertility on); the text
    that crosses the budget is cut there, at the last whitespace before it where the cut would split a word."""
    out = []
    for text in texts:
        if budget <= 0:
            break
        if len(text) > budget:
            cut = text[:budget]
            if not cut[-1].isspace() and not text[budget].isspace():  # the cut falls inside a word
                words = cut.rsplit(None, 1)
                cut = words[0] if len(words) == 2 else cut
            out.append(cut)
            break
        out.append(text)
        budget -= len(text)
    return [t for t in out if t]


def format_table(table: Mapping[str, Mapping]) -> str:
    """A Markdown table of `fertility`'s result."""
    lines = ["| lang | chars | tokens | tokens/char | chars/token | tokens/word | unk rate |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for lang, row in table.items():
        per_word = "—" if row["tokens_per_word"] is None else f"{row['tokens_per_word']:.2f}"
        lines.append(f"| {lang} | {row['chars']} | {row['tokens']} | {row['tokens_per_char']:.3f} | "
                     f"{row['chars_per_token']:.2f} | {per_word} | {row['unk_rate']:.4f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    tok = Tokenizer.from_file(sys.argv[1])
    texts = {}
    for arg in sys.argv[2:]:
        lang, _, path = arg.partition("=")
        texts.setdefault(lang, []).append(Path(path).read_text(encoding="utf-8"))
    result = fertility(tok, texts)
    print(format_table(result))
    print(json.dumps(result, indent=1))
