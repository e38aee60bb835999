"""Rule-based English sentence splitting (the segments of BERT's sentence pairs).

A boundary is sentence-final punctuation (. ! ?), optionally followed by closing quotes/brackets, then
whitespace, then something that can start a sentence (an upper-case letter, a digit, an opening quote or
bracket). A period does not end a sentence after a known abbreviation (Mr., e.g., No., ...), a single-letter
initial (J. R. R. Tolkien) or a dotted acronym (U.S.). Other languages would get their own splitter here.

    echo "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday." | python -m preprocessing.sentences
"""

from __future__ import annotations

import re
import sys

ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt ft rev gen col lt capt sgt maj cmdr adm gov sen rep pres hon
    vs etc e.g i.e cf al approx ca c fig figs no nos vol vols ed eds pp p ch sec op jan feb mar apr jun jul aug
    sep sept oct nov dec inc ltd co corp bros dept est univ assn ave blvd rd mr. u.s u.k u.n a.d b.c b.c.e c.e""".split()
)

_CANDIDATE = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_WORD_BEFORE = re.compile(r"(\S+)$")
_DOTTED_ACRONYM = re.compile(r"^(?:[A-Za-z]\.){2,}$")


def _is_abbreviation(text: str, period_index: int) -> bool:
    match = _WORD_BEFORE.search(text, 0, period_index + 1)
    if not match:
        return False
    word = match.group(1).lstrip("\"'“‘([")
    stem = word.rstrip(".").lower()
    if len(stem) == 1 and stem.isalpha():
        return True  # an initial: "J. Smith"
    return stem in ABBREVIATIONS or bool(_DOTTED_ACRONYM.match(word))


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph of plain text into sentences (whitespace at the edges removed; none empty)."""
    sentences: list[str] = []
    start = 0
    for match in _CANDIDATE.finditer(paragraph):
        punct_end = match.start() + len(match.group(0).rstrip())
        if paragraph[match.start()] == "." and _is_abbreviation(paragraph, match.start()):
            continue
        sentence = paragraph[start:punct_end].strip()
        if sentence:
            sentences.append(sentence)
        start = match.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


if __name__ == "__main__":
    for paragraph in sys.stdin.read().split("\n\n"):
        for s in split_sentences(paragraph):
            print(s)
