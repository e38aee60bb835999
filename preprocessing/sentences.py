"""Rule-based multilingual sentence splitting (the segments of BERT's sentence pairs).

`split_sentences(paragraph, lang=None)` cuts a paragraph at sentence boundaries; the sentences are slices of the
paragraph with the whitespace at their edges removed, so joining them gives back the paragraph's text (modulo
whitespace). Boundaries, by script (the script-specific marks are unambiguous, so they apply whatever `lang` says):

- Latin, Cyrillic, Greek, Arabic, Hangul, ...: `. ! ?` (optionally followed by closing quotes/brackets), then
  whitespace, then something that can start a sentence: an upper-case letter, a digit, an opening quote or bracket
  (also ¿ ¡ « „), or a letter of a script without case (Arabic, Hangul, Devanagari, ...). A period does not end a
  sentence after a known abbreviation of the language (English always; German, French and Spanish ones for
  de/fr/es), a single-letter initial (J. R. R. Tolkien), a dotted acronym (U.S.) or, for German, an ordinal number
  ("am 3. Oktober"); nor after a Thai, Lao, Khmer or Burmese letter (there a period marks an abbreviation: "น.").
- CJK: full-width 。！？．｡ (and ASCII ! ? directly followed by a CJK character), with any closing brackets or quotes
  after them (」』）”》…), no whitespace needed; a full-width ． between digits is a decimal point.
- Arabic ؟ and ۔ (Urdu), Devanagari danda । ॥, Burmese ။, Armenian ։, Ethiopic ። ፧, Khmer ។ ៕, the Greek question
  mark (U+037E always; the ASCII semicolon, which U+037E becomes under NFC/NFKC, when lang is "el").
- Thai, Lao, Khmer: these scripts write no sentence-final punctuation; a space between two letters of the script
  is the boundary. This is the common heuristic (spaces separate sentences and also some clauses, so it
  over-splits a little; a sentence is never cut inside a run of letters).

`lang` is any language tag preprocessing.langcodes understands (de, deu, de-AT, cmn_hans); None = English
abbreviations only.

    echo "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday." | python -m preprocessing.sentences [LANG]
"""

from __future__ import annotations

import re
import sys

from .langcodes import normalise_lang_code

ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft rev gen col lt capt sgt maj cmdr adm gov sen rep pres hon
    vs etc e.g i.e cf al approx ca c fig figs no nos vol vols ed eds pp p ch sec op jan feb mar apr jun jul aug
    sep sept oct nov dec inc ltd co corp bros dept est univ assn ave blvd rd mr. u.s u.k u.n a.d b.c b.c.e c.e""".split()
)

# Common abbreviations written with a final period, per language (lower case, without that period). English's
# apply to every language: they are frequent in any news text.
LANGUAGE_ABBREVIATIONS: dict[str, frozenset[str]] = {
    "de": frozenset("""nr z.b bzw usw vgl d.h u.a o.ä s.o s.u sog ggf evtl inkl zzgl bzgl ca jh jhd mio mrd
        str tel abs abt hr fr frl dipl ing prof dr med phil geb gest verh ff hrsg mind max min u.v.m v.a
        z.t z.zt i.d.r a.d""".split()),
    "fr": frozenset("""m mm mme mlle me mgr st ste av apr j.-c env etc cf p pp vol éd hab boul bd n° réf
        chap fig tél""".split()),
    "es": frozenset("""sr sra srta sres dr dra lic ing ud uds vd vds pág págs núm art aprox etc ee.uu av avda
        c/ cía dpto gral pdte prof profa sto sta tel""".split()),
}

_CLOSERS = "\"'”’)\\]}»›」』）］｝〉》】〕〗〙〛"
_OPENERS = "\"'“‘([{«‹„¿¡「『（〈《【〔"
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af"

# A period-like mark, then closers, then whitespace: validated in Python (abbreviations, what follows).
_LATIN_CANDIDATE = re.compile(rf"[.!?]+[{re.escape(_CLOSERS)}]*\s+")
# Marks that end a sentence wherever they stand (no whitespace needed after them).
_ALWAYS_FINAL = re.compile(rf"(?:[。！？｡]|(?<![0-9０-９])．|．(?![0-9０-９])|[!?](?=[{_CJK_CHARS}])"
                           rf"|[؟۔।॥။։።፧។៕\u037e])+[{re.escape(_CLOSERS)}]*")
# a character every match of _ALWAYS_FINAL needs (its marks, or the CJK letter after `!`/`?`): without one the
# pattern, whose lookbehinds are tried at every position, need not run (0.35 s of a quarter of the sotu text)
_MAY_END_ALWAYS = re.compile(rf"[。！？｡．؟۔।॥။։።፧។៕\u037e{_CJK_CHARS}]").search
_GREEK_QUESTION = re.compile(rf";[{re.escape(_CLOSERS)}]*(?=\s)")
# Thai, Lao, Khmer letters (with their combining marks and digits): a space between two of them is a boundary.
_SPACE_IN_SCRIPT_RUN = re.compile(r"(?<=[\u0e00-\u0eff\u1780-\u17ff])\s+(?=[\u0e00-\u0eff\u1780-\u17ff])")
# whether those scripts occur at all: the lookbehind above is tried at every position (1.3 s of the sotu text)
_IN_SCRIPT_RUN = re.compile(r"[\u0e00-\u0eff\u1780-\u17ff]").search
# Scripts in which a period after a letter marks an abbreviation, not the end of a sentence.
_ABBREVIATING_PERIOD = re.compile(r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")
_DOTTED_ACRONYM = re.compile(r"^(?:[A-Za-z]\.){2,}$")


def _word_ending_at(text: str, end: int) -> str:
    r"""The run of non-space characters ending at text[end] (inclusive). Scanning back from the period keeps a
    paragraph's splitting linear: a regex `(\S+)$` searched in text[:end + 1] retried from position 0 at every period,
    quadratic in the paragraph (36 % of a run over State of the Union addresses, one 46k-character paragraph each)."""
    start = end + 1
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start : end + 1]


def _is_abbreviation(text: str, period_index: int, lang: str | None) -> bool:
    word = _word_ending_at(text, period_index)
    if not word:
        return False
    word = word.lstrip(_OPENERS)
    stem = word.rstrip(".").lower()
    if len(stem) == 1 and stem.isalpha():
        return True  # an initial: "J. Smith"
    if lang == "de" and stem.isdigit() and len(stem) <= 2:
        return True  # a German ordinal: "am 3. Oktober"
    if stem in ABBREVIATIONS or stem in LANGUAGE_ABBREVIATIONS.get(lang or "", ()):
        return True
    return bool(_DOTTED_ACRONYM.match(word))


def _can_start_sentence(text: str, index: int) -> bool:
    """Whether text[index:] can start a sentence: opening quotes/brackets, then an upper-case letter, a digit or a
    letter of a script without case (Arabic, Hangul, CJK, Devanagari: neither upper nor lower case)."""
    while index < len(text) and (text[index] in _OPENERS or text[index].isspace()):
        index += 1  # whitespace too: French « Bonjour »
    if index >= len(text):
        return False
    c = text[index]
    return c.isupper() or c.isdigit() or (c.isalpha() and not c.islower())


def _latin_boundaries(paragraph: str, lang: str | None) -> list[int]:
    ends = []
    for match in _LATIN_CANDIDATE.finditer(paragraph):
        if not _can_start_sentence(paragraph, match.end()):
            continue
        if paragraph[match.start()] == ".":
            if match.start() > 0 and _ABBREVIATING_PERIOD.match(paragraph[match.start() - 1]):
                continue
            if _is_abbreviation(paragraph, match.start(), lang):
                continue
        ends.append(match.start() + len(match.group(0).rstrip()))
    return ends


def split_sentences(paragraph: str, lang: str | None = None) -> list[str]:
    """Split one paragraph of plain text into sentences (whitespace at the edges removed; none empty).

    `lang` (ISO 639 code or None) selects language-specific rules: abbreviations (de, fr, es), German ordinals,
    the Greek question mark `;`. Script-specific punctuation is recognised whatever `lang` is."""
    lang = normalise_lang_code(lang)
    cuts = _latin_boundaries(paragraph, lang)
    if not paragraph.isascii():  # every character of the two checks below is outside ASCII
        if _MAY_END_ALWAYS(paragraph):
            cuts += [m.end() for m in _ALWAYS_FINAL.finditer(paragraph)]
        if _IN_SCRIPT_RUN(paragraph):
            cuts += [m.start() for m in _SPACE_IN_SCRIPT_RUN.finditer(paragraph)]
    if lang == "el":
        cuts += [m.end() for m in _GREEK_QUESTION.finditer(paragraph)]
    sentences: list[str] = []
    start = 0
    for cut in sorted(set(cuts)):
        sentence = paragraph[start:cut].strip()
        if sentence:
            sentences.append(sentence)
        start = cut
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


if __name__ == "__main__":
    code = sys.argv[1] if len(sys.argv) > 1 else None
    for paragraph in sys.stdin.read().split("\n\n"):
        for s in split_sentences(paragraph, code):
            print(s)
