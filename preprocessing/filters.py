"""Document cleaning and quality filters: Unicode normalisation, C4 boilerplate lines and the Gopher quality and
repetition rules, each switchable in `FiltersConfig` (corpus.filters). The documents pipeline calls
`clean_document` on every document and `normalise_text` on both sides of every sentence pair.

    from preprocessing.filters import FiltersConfig, clean_document
    paragraphs, reason = clean_document(doc.paragraphs, "en", FiltersConfig(), lang_prob=None)
    # reason None = keep `paragraphs`; otherwise a short drop reason such as "top_ngram" (docs/cleaning.md)

    python -m preprocessing.filters FILE...    # drop reason (or "kept") of each file, paragraphs = non-empty lines

Order of the steps (the first rule that fires names the reason):
1. language (`languages`, `min_lang_probability`): cheap, before any cleaning;
2. per paragraph: normalise (NFC/NFKC), remove control and format characters, collapse whitespace; per line: drop
   C4 boilerplate lines; paragraphs left empty are dropped. "lorem ipsum" anywhere drops the document
   (`boilerplate`), as does a document whose every line was boilerplate;
3. length (`too_short`, `too_long`: characters, then words);
4. Gopher quality rules (symbol_ratio, mean_word_length, alphabetic_words, bullet_lines, ellipsis_lines,
   stop_words) and repetition rules (duplicate_lines, duplicate_paragraphs, top_ngram, duplicate_ngrams).

Scripts without spaces between words (Han, Hiragana/Katakana, Thai, Lao, Myanmar, Khmer, Tibetan): every character
of those scripts (with its combining marks) is one *word* token, everywhere a rule counts words: document length,
symbol ratio, alphabetic words, n-grams. Rationale: a Chinese word is 1-2 characters, so character counts are the
right order of magnitude for length limits written in words, and character n-grams still expose the boilerplate
repetition the Gopher rules target. Two rules are not defined on such text and are skipped when most word tokens
of a document are single characters of these scripts: the mean word length (it would always be 1) and, as for every
language but English, the English stop words. Hangul is written with spaces and is treated like Latin.
Measured on the real newspaper4k gold articles (zh x3, ja x2, th, my): all kept with the defaults (tests).

Speed: one pass tokenises a document (str.split when it holds no character of an unsegmented script, else one
regex pass); the rules' per-token properties (word and letter characters, script) are computed once per distinct
token from per-code-point tables and weighted by the token counts; the n-gram statistics map tokens to integer ids,
then build the rolling 64-bit hashes of all n-grams of a size at once with numpy and count them in the sorted hashes
(exact counts up to 64-bit hash collisions, about 1e-10 for a 100,000-word document). See docs/cleaning.md for the
figures.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from bertfactory.config import StrictModel

from .langcodes import normalise_lang_codes

DROP_REASONS = (
    "language", "language_probability", "boilerplate", "too_short", "too_long", "symbol_ratio", "mean_word_length",
    "alphabetic_words", "bullet_lines", "ellipsis_lines", "stop_words", "duplicate_lines", "duplicate_paragraphs",
    "top_ngram", "duplicate_ngrams",
)



class DropReason(str):
    """A drop reason (one of DROP_REASONS, equal to its plain string) that also names the setting and value that
    applied, for the reasons more than one setting can cause (too_short: corpus.filters.min_chars / min_words /
    no words, corpus.min_doc_chars / min_doc_sentences; too_long; boilerplate; the repetition rules): counted
    in the manifest's counts.docs_dropped_rules and named by the "no training documents left" error."""

    rule: str

    def __new__(cls, reason: str, rule: str) -> "DropReason":
        made = super().__new__(cls, reason)
        made.rule = rule
        return made

    def __reduce__(self):
        return DropReason, (str(self), self.rule)


def _rule(reason: str, key: str, value) -> DropReason:
    shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
    return DropReason(reason, f"corpus.filters.{key}={shown}")


# C4 (Raffel et al. 2020, tensorflow_datasets c4_utils.clean_page): lines naming these are policy notices, cookie
# banners or "enable JavaScript" boilerplate.
C4_BOILERPLATE_PHRASES = [
    "javascript", "terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies",
]
# Gopher (Rae et al. 2021, appendix A1.1): an English document needs at least two of these.
GOPHER_STOP_WORDS = ["the", "be", "to", "of", "and", "that", "have", "with"]
# Bullet marks a line can start with (Gopher counts "bullet point" lines). Dashes other than "-" are left out: they
# open dialogue lines in Spanish, Russian or French prose.
BULLETS = "•●○◦▪▫■□‣⁃∙·-*"
# Sentence-final marks of many scripts (for the optional C4 terminal-punctuation rule) and the closers that may
# follow them (quotes, brackets).
TERMINAL_PUNCTUATION = ".!?…。！？．｡؟۔।॥။።፧។៕;"
CLOSERS = "\"'”’»」』）)]】〕›"


class FiltersConfig(StrictModel):
    """Cleaning and quality filters of documents (preprocessing.filters; docs/cleaning.md). Every rule can be
    switched off: booleans false, thresholds null."""

    # --- normalisation
    # the key keeps the standard's spelling ("Unicode Normalization Forms", UAX #15) and recipes already use it;
    # our own names write British (normalise_text)
    normalization: Literal["NFC", "NFKC", "none"] = Field(
        "NFC", description="Unicode normal form (Unicode Standard Annex #15): NFC composes characters and keeps "
        "full-width forms and ligatures; NFKC also folds compatibility characters (ﬁ -> fi, Ｆ -> F); none = as read")
    remove_control_chars: bool = Field(
        True, description="remove control (Cc, except newline and tab) and format (Cf) characters — zero-width "
        "spaces, soft hyphens, BOMs, bidi marks — except ZWJ/ZWNJ, which Persian and Indic spelling needs "
        "(bertfactory rule; the usual web-text hygiene, e.g. CCNet/Wenzek et al. 2020)")
    collapse_whitespace: bool = Field(
        True, description="runs of whitespace inside a line (tabs, no-break and ideographic spaces) -> one space; "
        "lines stripped; blank lines removed (bertfactory rule)")
    # --- length
    min_chars: int | None = Field(
        None, ge=0, description="drop documents with fewer characters after cleaning (too_short); corpus.min_doc_chars "
        "also applies after sentence splitting (bertfactory rule)")
    max_chars: int | None = Field(
        1_000_000, ge=1, description="drop documents with more characters (too_long): a guard on the memory and time "
        "of one document (bertfactory rule)")
    min_words: int | None = Field(
        50, ge=0, description="drop documents with fewer words (too_short); Gopher (Rae et al. 2021): 50")
    max_words: int | None = Field(
        100_000, ge=1, description="drop documents with more words (too_long); Gopher (Rae et al. 2021): 100,000")
    # --- C4 boilerplate lines
    boilerplate_phrases: list[str] = Field(
        default_factory=lambda: list(C4_BOILERPLATE_PHRASES),
        description="drop lines containing any of these (case-insensitive); C4 (Raffel et al. 2020): javascript, "
        "terms of use, privacy policy, cookie policy, uses cookies, use of cookies, use cookies; [] = off")
    drop_lorem_ipsum: bool = Field(
        True, description="drop documents containing 'lorem ipsum' (boilerplate); C4 (Raffel et al. 2020)")
    drop_curly_brace_lines: bool = Field(
        True, description="drop lines containing { or } (code, templates, CSS); C4 (Raffel et al. 2020) drops the "
        "whole page, here only the line")
    line_min_words: int = Field(
        0, ge=0, description="drop lines with fewer words; C4 (Raffel et al. 2020) uses 5; 0 = off (it removes "
        "headings and short lines of CJK text)")
    line_terminal_punctuation: bool = Field(
        False, description="drop lines that do not end in terminal punctuation (. ! ? … 。 ！ ？ ؟ । ။ ... possibly "
        "followed by a closing quote or bracket); C4 (Raffel et al. 2020); off by default (removes headings)")
    # --- Gopher quality rules (Rae et al. 2021, MassiveText, appendix A1.1)
    max_symbol_word_ratio: float | None = Field(
        0.1, ge=0, description="drop documents whose '#' count or ellipsis ('...', '…') count per word exceeds this "
        "(symbol_ratio); Gopher: 0.1")
    mean_word_length: tuple[float, float] | None = Field(
        (3.0, 10.0), description="drop documents whose mean word length (letters and digits) is outside [lo, hi] "
        "(mean_word_length); Gopher: [3, 10]; skipped for text mostly in scripts without spaces")
    min_alphabetic_word_fraction: float | None = Field(
        0.8, ge=0, le=1, description="drop documents in which fewer words contain a letter (alphabetic_words); "
        "Gopher: 80%")
    max_bullet_line_fraction: float | None = Field(
        0.9, ge=0, le=1, description="drop documents with more lines starting with a bullet (bullet_lines); "
        "Gopher: 90%")
    max_ellipsis_line_fraction: float | None = Field(
        0.3, ge=0, le=1, description="drop documents with more lines ending in an ellipsis (ellipsis_lines); "
        "Gopher: 30%")
    stop_words: list[str] | None = Field(
        default_factory=lambda: list(GOPHER_STOP_WORDS),
        description="English documents (lang 'en') must contain `min_stop_words` occurrences of these (stop_words); "
        "Gopher: the, be, to, of, and, that, have, with; null = off")
    min_stop_words: int = Field(
        2, ge=0, description="how many stop-word occurrences an English document needs; Gopher: 2")
    # --- Gopher repetition rules (Rae et al. 2021, table A1)
    max_duplicate_line_fraction: float | None = Field(
        0.3, ge=0, le=1, description="drop documents in which more lines repeat an earlier line (duplicate_lines); "
        "Gopher: 0.3")
    max_duplicate_line_char_fraction: float | None = Field(
        0.2, ge=0, le=1, description="drop documents in which repeated lines hold more of the characters "
        "(duplicate_lines); Gopher: 0.2")
    max_duplicate_paragraph_fraction: float | None = Field(
        0.3, ge=0, le=1, description="drop documents in which more paragraphs repeat an earlier one "
        "(duplicate_paragraphs); Gopher: 0.3")
    max_duplicate_paragraph_char_fraction: float | None = Field(
        0.2, ge=0, le=1, description="drop documents in which repeated paragraphs hold more of the characters "
        "(duplicate_paragraphs); Gopher: 0.2")
    top_ngram_char_fraction: dict[int, float] = Field(
        default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16},
        description="{n: f}: drop documents in which the most frequent word n-gram covers more than f of the word "
        "characters (top_ngram); Gopher: 2: 0.20, 3: 0.18, 4: 0.16; {} = off")
    duplicate_ngram_char_fraction: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10},
        description="{n: f}: drop documents in which the word n-grams occurring more than once cover more than f of "
        "the word characters, overlaps counted once (duplicate_ngrams); Gopher: 5..10 -> 0.15..0.10; {} = off")
    unsegmented_ngram_scale: int = Field(
        3, ge=1, description="for documents mostly in scripts without spaces (one token per character) the n-gram "
        "rules use n-grams of n x this many characters: a Thai or Burmese word is ~3 characters, a Chinese one ~1.5, "
        "and 5-character n-grams repeat in any real article (bertfactory rule, measured on the newspaper4k zh/ja/th/my "
        "gold texts: docs/cleaning.md)")
    # --- language
    languages: list[str] | None = Field(
        None, description="keep only documents in these languages (codes normalised: eng -> en); unknown ('und' or "
        "none) is dropped too (language); null = every language (CCNet, Wenzek et al. 2020, filters by language id)")
    min_lang_probability: float = Field(
        0.0, ge=0, le=1, description="drop documents whose detected language has a lower probability "
        "(language_probability); a language given by the source is not checked; CCNet uses 0.5; 0 = off")

    @field_validator("languages")
    @classmethod
    def _codes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return sorted(normalise_lang_codes(
            value, keep=("und",), empty="an empty list drops every document; use null for all languages"))

    @field_validator("top_ngram_char_fraction", "duplicate_ngram_char_fraction")
    @classmethod
    def _ngram_sizes(cls, value: dict[int, float]) -> dict[int, float]:
        for n, fraction in value.items():
            if n < 1 or not 0 <= fraction <= 1:
                raise ValueError(f"n-gram size {n} -> {fraction}: sizes must be >= 1 and fractions in [0, 1]")
        return dict(sorted(value.items()))

    @model_validator(mode="after")
    def _ranges(self) -> "FiltersConfig":
        if self.min_chars is not None and self.max_chars is not None and self.min_chars > self.max_chars:
            raise ValueError(f"min_chars {self.min_chars} > max_chars {self.max_chars}")
        if self.min_words is not None and self.max_words is not None and self.min_words > self.max_words:
            raise ValueError(f"min_words {self.min_words} > max_words {self.max_words}")
        if self.mean_word_length is not None and self.mean_word_length[0] > self.mean_word_length[1]:
            raise ValueError(f"mean_word_length {self.mean_word_length}: lower bound above the upper one")
        return self


# ---------------------------------------------------------------------------------------------- character classes

# Scripts written without spaces between words (one character = one word token).
_UNSEGMENTED_RANGES = [
    (0x0E00, 0x0E7F), (0x0E80, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F),  # Myanmar (+ extensions)
    (0x1780, 0x17FF), (0x19E0, 0x19FF),  # Khmer (+ symbols)
    (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B),  # CJK radicals, 々〆〇, Hangzhou numerals
    (0x3041, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F),  # Hiragana, Katakana, half-width kana
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x323AF),  # Han
]


def _class(codepoints) -> str:
    """A regex character class body for these code points (as ranges)."""
    points = sorted(codepoints)
    parts, start, prev = [], None, None
    for cp in points:
        if start is None:
            start = prev = cp
        elif cp == prev + 1:
            prev = cp
        else:
            parts.append((start, prev))
            start = prev = cp
    if start is not None:
        parts.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in parts)


@functools.lru_cache(maxsize=1)
def _tables() -> dict:
    """Character tables from the Unicode database of this Python (built once per process, ~0.3 s)."""
    marks, controls, punctuation = [], {}, {}
    keep = {0x09, 0x0A, 0x200C, 0x200D}  # tab, newline, ZWNJ, ZWJ
    for cp in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(cp))
        if category[0] == "M":
            marks.append(cp)
        elif category in ("Cc", "Cf", "Cs") and cp not in keep:
            controls[cp] = None
        elif category[0] == "P":
            punctuation[cp] = None
    unsegmented = [cp for a, b in _UNSEGMENTED_RANGES for cp in range(a, b + 1)
                   if unicodedata.category(chr(cp))[0] not in "MZC"]
    unseg, mark = _class(unsegmented), _class(marks)
    every = np.arange(sys.maxunicode + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    unsegmented_chars = np.zeros(sys.maxunicode + 1, dtype=bool)
    unsegmented_chars[unsegmented] = True
    return {
        "controls": controls,
        "punctuation": punctuation,
        # a token: one character of an unsegmented script with its marks, or any other run of non-space (no
        # groups: findall then returns the tokens themselves, not tuples to pick from)
        "token": re.compile(f"[{unseg}][{mark}]*|[^\\s{unseg}]+"),
        "has_unsegmented": re.compile(f"[{unseg}]").search,
        # per code point (bool arrays): what the rules ask of a token's characters, for all distinct tokens of a
        # document in a few array operations (_token_classes)
        "word_chars": _char_table(_WORD_RUN, every),
        "letters": _char_table(_LETTER_RUN, every),
        "unsegmented_chars": unsegmented_chars,
    }


def _char_table(run: re.Pattern, every: str) -> np.ndarray:
    """bool per code point: whether `run` (a character class, repeated) matches that character; found by the regex
    itself on a string of every code point, so the table agrees with the regex by construction."""
    table = np.zeros(len(every), dtype=bool)
    for m in run.finditer(every):
        table[m.start():m.end()] = True
    return table


def has_unsegmented(text: str) -> bool:
    """Whether `text` holds a character of a script without spaces (never in ASCII text)."""
    return not text.isascii() and _tables()["has_unsegmented"](text) is not None


def tokenize(text: str) -> list[str]:
    """Word tokens of `text`: whitespace-separated runs, and one token per character (with its combining marks)
    of the scripts written without spaces."""
    if not has_unsegmented(text):
        # then only the regex's second kind matches, runs of non-\s: str.split() gives the same tokens (re's \s
        # and str.isspace agree on every code point) at a fifth of the CPU
        return text.split()
    return _tables()["token"].findall(text)


def strip_punctuation_table() -> dict[int, None]:
    """str.translate table deleting every Unicode punctuation character (category P*); used by dedup."""
    return _tables()["punctuation"]


_LINE_BREAKS = re.compile(r"\r\n?|[\v\f\x1c-\x1e\x85\u2028\u2029]")
_WORD_RUN = re.compile(r"\w+")  # a word character: a letter, digit or _ (as re sees them)
_LETTER_RUN = re.compile(r"[^\W\d_]+")  # a letter: a word character that is neither a digit nor _


# every character _LINE_BREAKS replaces: `in` scans for these cost far less than the regex's scan of the text
_BREAK_CHARS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def normalise_text(text: str, cfg: FiltersConfig) -> str:
    """Unicode normal form, control/format characters removed, whitespace collapsed (lines kept, stripped, blank
    ones removed) as configured."""
    if cfg.normalization != "none":
        text = unicodedata.normalize(cfg.normalization, text)
    if any(c in text for c in _BREAK_CHARS):
        text = _LINE_BREAKS.sub("\n", text)  # line separators are not controls to delete: they end lines
    if cfg.remove_control_chars:
        text = text.translate(_tables()["controls"])
    if cfg.collapse_whitespace:
        # runs of whitespace inside a line -> one space, the line stripped: " ".join(split()) does it without the
        # regex scan and the replacement per space of re.sub(r"[^\S\n]+", " ", line).strip() (a line holds no
        # "\n", and re's \s and str.isspace agree on every code point)
        text = "\n".join(line for line in (" ".join(raw.split()) for raw in text.split("\n")) if line)
    return text


# ------------------------------------------------------------------------------------------------- line rules


@functools.lru_cache(maxsize=32)
def _phrase_pattern(phrases: tuple[str, ...]):
    """Whether a lower-cased line contains one of `phrases`: one substring search per phrase (an alternation
    regex tries every position of the line, several times slower on long lines)."""
    if not phrases:
        return None
    lowered = tuple(dict.fromkeys(p.lower() for p in phrases))
    return lambda line: any(p in line for p in lowered)


def _ends_sentence(line: str) -> bool:
    stripped = line.rstrip(CLOSERS + " ")
    return bool(stripped) and stripped[-1] in TERMINAL_PUNCTUATION


def _is_boilerplate_line(line: str, cfg: FiltersConfig, phrase_search) -> bool:
    if phrase_search is not None and phrase_search(line.lower()):
        return True
    if cfg.drop_curly_brace_lines and ("{" in line or "}" in line):
        return True
    if cfg.line_terminal_punctuation and not _ends_sentence(line):
        return True
    if cfg.line_min_words <= 0:
        return False
    # every whitespace-separated run gives at least one token: a line with enough runs needs no tokenising (a
    # one-line document would otherwise be tokenised once more here)
    return len(line.split(None, cfg.line_min_words - 1)) < cfg.line_min_words and \
        len(tokenize(line)) < cfg.line_min_words


# ------------------------------------------------------------------------------------------------- n-gram rules

_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants of splitmix64: spread small ids over 64 bits
_MIX2 = np.uint64(0xBF58476D1CE4E5B9)
_ROLL = np.uint64(0x100000001B3)  # FNV prime: the multiplier of the rolling n-gram hash


def _token_codes(ids: np.ndarray) -> np.ndarray:
    """One pseudo-random 64-bit code per token from its id (distinct tokens numbered in first-seen order), mixed:
    equal tokens, equal codes; the same in every process."""
    x = (ids.astype(np.uint64) + np.uint64(1)) * _MIX
    x ^= x >> np.uint64(31)
    return x * _MIX2


_LOW16 = np.uint64(0xFFFF)


def _positions_of(hashes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The positions i (ascending) at which hashes[i] is one of `values` (sorted). A table of the values' low 16
    bits first narrows the binary search to the few positions that may hold one: a repeated n-gram is rare in
    real text, and searching every position cost more than the sort."""
    table = np.zeros(1 << 16, dtype=bool)
    table[values & _LOW16] = True
    maybe = np.flatnonzero(table[hashes & _LOW16])
    at = np.minimum(np.searchsorted(values, hashes[maybe]), len(values) - 1)
    return maybe[values[at] == hashes[maybe]]


def _ngram_rules(ids: np.ndarray, lengths: np.ndarray, cfg: FiltersConfig, scale: int = 1) -> str | None:
    """The top_ngram and duplicate_ngrams rules on a text's tokens, given as their ids (first-seen order) and
    lengths in characters."""
    top = {n * scale: f for n, f in cfg.top_ngram_char_fraction.items()}
    dup = {n * scale: f for n, f in cfg.duplicate_ngram_char_fraction.items()}
    if not top and not dup:
        return None
    total = int(lengths.sum())
    if total == 0:
        return None
    codes = _token_codes(ids)
    char_prefix = np.concatenate(([0], np.cumsum(lengths)))
    hashes = codes.copy()
    for n in range(2, max([*top, *dup]) + 1):
        if len(ids) < n:
            break
        hashes = hashes[:-1] * _ROLL + codes[n - 1:]  # hash of tokens[i : i + n] at i (uint64 wraps around)
        if n not in top and n not in dup:
            continue
        # a plain sort of the hashes, not np.unique with first indices, inverse and counts (a stable argsort and
        # scatters: 3x the CPU); the few positions a rule needs are found again from the sorted values
        ordered = np.sort(hashes)
        same = ordered[1:] == ordered[:-1]  # same[k]: ordered[k + 1] repeats ordered[k]
        if not same.any():
            continue  # every n-gram occurs once: neither rule can fire
        if n in top:
            starts = np.flatnonzero(np.concatenate(([True], ~same)))
            counts = np.diff(starts, append=len(ordered))
            best = int(counts.max())
            # the first occurrence of each most frequent n-gram, as np.unique's return_index gave it
            where = _positions_of(hashes, ordered[starts[counts == best]])
            firsts = where[np.unique(hashes[where], return_index=True)[1]]
            chars = int((char_prefix[firsts + n] - char_prefix[firsts]).max())
            if best * chars / total > top[n]:
                return DropReason("top_ngram", f"corpus.filters.top_ngram_char_fraction[{n // scale}]={top[n]}")
        if n in dup:
            # the n-grams starting at these positions occur more than once (ordered[1:][same]: sorted, and every
            # value occurring more than once is among them)
            repeated = _positions_of(hashes, ordered[1:][same])
            # token j is covered if a repeated n-gram starts in [j - n + 1, j]: +1 where a window opens, -1 where
            # it closes, summed
            opened = np.zeros(len(ids) + 1, dtype=np.int64)
            opened[repeated] += 1
            opened[repeated + n] -= 1
            covered = np.cumsum(opened[:-1]) > 0
            if int(lengths[covered].sum()) / total > dup[n]:
                return DropReason("duplicate_ngrams",
                                  f"corpus.filters.duplicate_ngram_char_fraction[{n // scale}]={dup[n]}")
    return None


def _token_classes(distinct: list[str], any_unsegmented: bool) -> tuple[np.ndarray, ...]:
    """Per distinct token: (length, how many word characters (\\w), whether it has a letter, whether it is a
    character of a script without spaces), from the code points of all tokens at once."""
    tables = _tables()
    lengths = np.fromiter(map(len, distinct), dtype=np.int64, count=len(distinct))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    points = np.frombuffer("".join(distinct).encode("utf-32-le", "surrogatepass"), dtype="<u4")

    def per_token(table: np.ndarray) -> np.ndarray:
        running = np.concatenate(([0], np.cumsum(table[points], dtype=np.int64)))
        return running[ends] - running[starts]

    # a token of a script without spaces is one character of it (with its marks): its first character says so
    unsegmented = (tables["unsegmented_chars"][points[starts]] if any_unsegmented and len(distinct)
                   else np.zeros(len(distinct), dtype=bool))
    return lengths, per_token(tables["word_chars"]), per_token(tables["letters"]) > 0, unsegmented


def _repeated_fractions(items: list[str]) -> tuple[float, float]:
    """(fraction of items equal to an earlier item, fraction of the characters in such items)."""
    seen: set[str] = set()
    repeats = repeat_chars = total_chars = 0
    for item in items:
        total_chars += len(item)
        if item in seen:
            repeats += 1
            repeat_chars += len(item)
        else:
            seen.add(item)
    return repeats / max(1, len(items)), repeat_chars / max(1, total_chars)


def _over(value: float, limit: float | None) -> bool:
    return limit is not None and value > limit


# ------------------------------------------------------------------------------------------------- the document


def clean_document(paragraphs: list[str], lang: str | None, cfg: FiltersConfig,
                   lang_prob: float | None = None) -> tuple[list[str], str | None]:
    """Clean one document and apply the quality rules. Returns (clean paragraphs, None) for a kept document and
    ([], reason) for a dropped one (reasons in DROP_REASONS; docs/cleaning.md). `lang`: the document's language
    code (None = unknown); `lang_prob`: the detector's probability, None when the language came from the source."""
    if cfg.languages is not None and (lang or "und") not in cfg.languages:
        return [], "language"
    if lang_prob is not None and lang_prob < cfg.min_lang_probability:
        return [], "language_probability"

    phrase_search = _phrase_pattern(tuple(cfg.boilerplate_phrases))
    cleaned: list[str] = []
    lines: list[str] = []
    lines_read = 0
    for paragraph in paragraphs:
        text = normalise_text(paragraph, cfg)
        kept = []
        for line in text.split("\n"):
            if not line.strip():
                continue
            lines_read += 1
            if not _is_boilerplate_line(line, cfg, phrase_search):
                kept.append(line)
        if kept:
            lines += kept
            cleaned.append("\n".join(kept))
    if cfg.drop_lorem_ipsum and any("lorem ipsum" in p.lower() for p in cleaned):
        return [], _rule("boilerplate", "drop_lorem_ipsum", True)
    if lines_read and not lines:
        return [], DropReason("boilerplate", "every line removed by the line rules (corpus.filters.boilerplate_phrases, "
                              "drop_curly_brace_lines, line_min_words, line_terminal_punctuation)")

    n_chars = sum(len(p) for p in cleaned)
    if cfg.min_chars is not None and n_chars < cfg.min_chars:
        return [], _rule("too_short", "min_chars", cfg.min_chars)
    if cfg.max_chars is not None and n_chars > cfg.max_chars:
        return [], _rule("too_long", "max_chars", cfg.max_chars)
    text = "\n".join(cleaned)
    tokens = tokenize(text)
    # Every rule below is a sum over tokens of a property of the token: the properties are computed once per
    # distinct token (a text repeats its words: ~5-10 % of the tokens are distinct) and weighted by the counts.
    # ids in first-seen order: the n-gram codes are made from them
    distinct = list(dict.fromkeys(tokens))
    ids = dict(zip(distinct, range(len(distinct))))
    token_ids = np.fromiter(map(ids.__getitem__, tokens), dtype=np.int64, count=len(tokens))
    counts = np.bincount(token_ids, minlength=len(distinct))
    lengths, word_chars, has_letter, unsegmented = _token_classes(distinct, has_unsegmented(text))
    word_like = word_chars > 0  # punctuation-only tokens are not words
    n_words = int(counts[word_like].sum())
    if cfg.min_words is not None and n_words < cfg.min_words:
        return [], _rule("too_short", "min_words", cfg.min_words)
    if cfg.max_words is not None and n_words > cfg.max_words:
        return [], _rule("too_long", "max_words", cfg.max_words)
    if n_words == 0:
        return [], DropReason("too_short", "no words")

    # Gopher quality rules
    if cfg.max_symbol_word_ratio is not None:
        ellipses = text.count("...") + text.count("…")
        if max(text.count("#"), ellipses) / n_words > cfg.max_symbol_word_ratio:
            return [], "symbol_ratio"
    spaced = word_like & ~unsegmented
    n_spaced = int(counts[spaced].sum())
    if cfg.mean_word_length is not None and n_spaced * 2 >= n_words:  # skipped for mostly-unsegmented text
        if n_spaced:
            letters = int((word_chars * counts)[spaced].sum())  # the word characters (\w) of the spaced words
            mean = letters / n_spaced
            lo, hi = cfg.mean_word_length
            if not lo <= mean <= hi:
                return [], "mean_word_length"
    if cfg.min_alphabetic_word_fraction is not None:
        alphabetic = int(counts[has_letter].sum())  # a token with a letter is a word
        if alphabetic / n_words < cfg.min_alphabetic_word_fraction:
            return [], "alphabetic_words"
    if _over(sum(1 for line in lines if line.lstrip()[:1] in BULLETS) / len(lines), cfg.max_bullet_line_fraction):
        return [], "bullet_lines"
    ellipsis_lines = sum(1 for line in lines if line.rstrip().endswith(("...", "…")))
    if _over(ellipsis_lines / len(lines), cfg.max_ellipsis_line_fraction):
        return [], "ellipsis_lines"
    if cfg.stop_words is not None and lang == "en":
        stop = set(cfg.stop_words)
        found = 0
        for w, n, is_word in zip(distinct, counts.tolist(), word_like.tolist()):
            if found >= cfg.min_stop_words:
                break  # enough: the rest of the document cannot change the verdict
            if is_word and w.lower().strip(".,;:!?\"'()[]“”‘’") in stop:
                found += n
        if found < cfg.min_stop_words:
            return [], "stop_words"

    # Gopher repetition rules
    line_repeats, line_chars = _repeated_fractions(lines)
    if _over(line_repeats, cfg.max_duplicate_line_fraction):
        return [], _rule("duplicate_lines", "max_duplicate_line_fraction", cfg.max_duplicate_line_fraction)
    if _over(line_chars, cfg.max_duplicate_line_char_fraction):
        return [], _rule("duplicate_lines", "max_duplicate_line_char_fraction", cfg.max_duplicate_line_char_fraction)
    para_repeats, para_chars = _repeated_fractions(cleaned)
    if _over(para_repeats, cfg.max_duplicate_paragraph_fraction):
        return [], _rule("duplicate_paragraphs", "max_duplicate_paragraph_fraction",
                         cfg.max_duplicate_paragraph_fraction)
    if _over(para_chars, cfg.max_duplicate_paragraph_char_fraction):
        return [], _rule("duplicate_paragraphs", "max_duplicate_paragraph_char_fraction",
                         cfg.max_duplicate_paragraph_char_fraction)
    mostly_unsegmented = int(counts[unsegmented].sum()) * 2 > n_words
    reason = _ngram_rules(token_ids, lengths[token_ids], cfg, cfg.unsegmented_ngram_scale if mostly_unsegmented else 1)
    if reason is not None:
        return [], reason
    return cleaned, None


def main(argv: list[str]) -> int:
    cfg = FiltersConfig()
    for path in argv:
        with open(path, encoding="utf-8") as f:
            paragraphs = [line for line in f.read().splitlines() if line.strip()]
        _, reason = clean_document(paragraphs, None, cfg)
        print(f"{path}\t{reason or 'kept'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
