"""Named-entity and noun-phrase spans from word strings alone: the heuristic behind the `entity` masking policy
(ERNIE-style knowledge masking, Sun et al. 2019, without a tagger: no tagger model can be fetched here).

Input: the words of one run of text (a row between special tokens), as strings, punctuation attached or split off
- whatever the tokenizer's word boundaries give (preprocessing.masking builds them from token ids). Output:
disjoint half-open word-index ranges [start, end).

Entities (`entity_spans`): maximal runs of capitalised words (first letter upper case, after leading `#`, quotes or
brackets; or an upper-case letter inside a word: "iPad", "eBay"), joined across at most two internal connectors ("Bank of America", "Bank of the West", "Johnson &
Johnson", "Leonardo da Vinci"), never across punctuation (a word ending in `,` `.` `:` ... ends the run after it).
Not capitalised for this purpose: closed-class words ("The", "I", "It", "This"), weekday and month names, @mentions
(also when the tokenizer split the "@" off) and URLs. A one-word run that starts a sentence (no ordinary word since the last . ! ? or the start of the row) is dropped:
its capital may be just the sentence's; so is a one-word run of a single letter ("U", "D"). A sentence whose words are mostly capitalised (headline case, ALL CAPS) carries no
capitalisation signal and yields no entity. Uncased (lower-cased) vocabularies therefore yield no entities at all.

Noun phrases (`phrase_spans`): a determiner or possessive ("the", "a", "this", "my", ...) followed by 1..3
open-class words (not closed-class, not punctuation, not inside an entity); the span is those open-class words,
without the determiner (guessable from context), so "the big red car" gives "big red car". Measured against the gold
entities of WNUT-16 in docs/masking.md (tests/preprocessing/test_masking_entity.py).

    python -m preprocessing.entities "Yesterday I flew to New York with the Bank of America team ."
"""

from __future__ import annotations

import sys
from typing import Sequence

Span = tuple[int, int]

DETERMINERS = frozenset(
    "the a an this that these those my your his her its our their some every each no any another such what "
    "which whose either neither".split())
# internal connectors of multi-word names (English and the Romance/Germanic particles common in names)
CONNECTORS = frozenset("of the de du des del della di da van von der den la le y &".split())
CLOSED_CLASS = DETERMINERS | frozenset((
    # pronouns
    "i me we us you he him she it they them myself yourself himself herself itself ourselves themselves "
    "mine yours hers ours theirs who whom i'm im i've ive i'll i'd it's its you're we're they're he's she's "
    "that's there's what's let's "
    # prepositions, conjunctions, particles
    "about above across after against along among around as at before behind below beneath beside between "
    "beyond but by despite down during except for from in inside into like near of off on onto out outside over "
    "past since through throughout till til to toward towards under until up upon via with within without "
    "and or nor so yet if then than because although though while whereas whether unless once when where why how "
    "not no yes there here "
    # auxiliaries and very common verbs
    "be am is are was were been being have has had having do does did doing done will would shall should can "
    "could may might must ought get got gets getting go goes going gone went "
    # common adverbs and sentence openers
    "all also just only very too really still even now never always often ever again already soon today "
    "tonight tomorrow yesterday please thanks thank ok okay oh lol well hey hi hello yeah yea wow omg rt "
    "more most many much few less least other others same own").split())
CALENDAR = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun "
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split())
SENTENCE_END = frozenset(".!?")
LEADING_MARKS = "#\"'“‘([{«"
TRAILING_MARKS = "\"'”’)]}»"
MAX_PHRASE_WORDS = 3
MAX_CONNECTORS = 2


def _core(word: str) -> str:
    """The word without surrounding quotes/brackets/hashtag mark and trailing punctuation."""
    return word.strip().lstrip(LEADING_MARKS).rstrip(TRAILING_MARKS + ".,;:!?…")


def _is_punctuation(word: str) -> bool:
    return not any(ch.isalnum() for ch in word)


def _ends_phrase(word: str) -> bool:
    """Whether punctuation after the word's letters closes a name or phrase (`Paris,` `York.` `it:`)."""
    stripped = word.strip().rstrip(TRAILING_MARKS)
    return bool(stripped) and stripped[-1] in ".,;:!?…" and not _is_punctuation(word)


def _ends_sentence(word: str) -> bool:
    stripped = word.strip().rstrip(TRAILING_MARKS)
    return bool(stripped) and stripped[-1] in SENTENCE_END


def _is_handle_or_url(word: str) -> bool:
    w = word.strip().lower()
    return w.startswith("@") or w.startswith("http") or w.startswith("www.")


def _is_capitalised(word: str, after: str = "") -> bool:
    """`after`: the word before, which makes this one a @mention when it is a lone "@" (WordPiece splits it off)."""
    core = _core(word)
    if not core or _is_handle_or_url(word) or after == "@" or not core[0].isalpha():
        return False
    if not core[0].isupper() and not any(ch.isupper() for ch in core[1:]):  # "iPad", "eBay" count
        return False
    lower = core.lower()
    return lower not in CLOSED_CLASS and lower not in CALENDAR


def _is_ordinary(word: str) -> bool:
    """A word that shows the sentence has started (not a mention, URL, number or punctuation)."""
    core = _core(word)
    return bool(core) and core[0].isalpha() and not _is_handle_or_url(word)


def _sentences(words: Sequence[str]) -> list[Span]:
    """[start, end) word ranges of the sentences: a sentence ends after a word ending in . ! ?"""
    out, start = [], 0
    for i, word in enumerate(words):
        if _ends_sentence(word):
            out.append((start, i + 1))
            start = i + 1
    if start < len(words):
        out.append((start, len(words)))
    return out


def entity_spans(words: Sequence[str]) -> list[Span]:
    """Named-entity candidates: capitalised-word runs (module docstring), as disjoint [start, end) word ranges."""
    spans: list[Span] = []
    for s_start, s_end in _sentences(words):
        alphabetic = [w for w in words[s_start:s_end] if _is_ordinary(w)]
        capitals = sum(_core(w)[0].isupper() for w in alphabetic)
        if len(alphabetic) >= 3 and capitals > 0.6 * len(alphabetic):
            continue  # headline case or ALL CAPS: capitals say nothing
        first_ordinary = next((i for i in range(s_start, s_end) if _is_ordinary(words[i])), s_end)
        i = s_start
        while i < s_end:
            if not _is_capitalised(words[i], words[i - 1] if i else ""):
                i += 1
                continue
            end = i + 1  # run [i, end)
            while end < s_end and not _ends_phrase(words[end - 1]):
                if _is_capitalised(words[end], words[end - 1]):
                    end += 1
                    continue
                # connectors between two capitalised words: "of", "of the", "&"
                j = end
                while j < s_end and j - end < MAX_CONNECTORS and _core(words[j]).lower() in CONNECTORS \
                        and not _ends_phrase(words[j]):
                    j += 1
                if j > end and j < s_end and _is_capitalised(words[j], words[j - 1]):
                    end = j + 1
                    continue
                break
            # a lone sentence-initial capital may be just the sentence's; a lone letter is rarely a name ("U")
            if end - i > 1 or (i != first_ordinary and len(_core(words[i])) > 1):
                spans.append((i, end))
            i = end
    return spans


def phrase_spans(words: Sequence[str], taken: Sequence[Span] = ()) -> list[Span]:
    """Noun-phrase candidates: the 1..MAX_PHRASE_WORDS open-class words after a determiner, outside `taken`."""
    busy = [False] * len(words)
    for a, b in taken:
        busy[a:b] = [True] * (b - a)
    spans: list[Span] = []
    i = 0
    while i < len(words):
        if busy[i] or _core(words[i]).lower() not in DETERMINERS or _ends_phrase(words[i]):
            i += 1
            continue
        start = end = i + 1
        while end < len(words) and end - start < MAX_PHRASE_WORDS and not busy[end]:
            core = _core(words[end])
            if not core or _is_punctuation(core) or core.lower() in CLOSED_CLASS or _is_handle_or_url(words[end]):
                break
            end += 1
            if _ends_phrase(words[end - 1]):
                break
        if end > start:
            spans.append((start, end))
        i = max(end, i + 1)
    return spans


if __name__ == "__main__":
    text_words = " ".join(sys.argv[1:]).split()
    ents = entity_spans(text_words)
    print("entities:", [" ".join(text_words[a:b]) for a, b in ents])
    print("phrases: ", [" ".join(text_words[a:b]) for a, b in phrase_spans(text_words, ents)])
