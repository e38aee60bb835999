"""Masking policies: what is masked together. A policy turns one instance (Candidates: which positions are special,
which continue a word, the budget, the token texts) into candidate units - lists of positions - which the core
(preprocessing.masking.Masker) orders, takes under the budget and replaces 80/10/10. Pure Python, no Beam.

Policies: a function (Candidates, rng) -> units. `token`: each WordPiece token is its own unit (BERT's original
80/10/10). `ngram` (ALBERT, Lan et al. 2020): a unit is an n-gram of whole words (a word = a token plus the
`##` continuation pieces after it, so a word is never split), one n-gram starting at every word, n <= 3 drawn with
p(n) proportional to 1/n (renormalised over the n that fit before the end of the segment; an n-gram never
crosses a special token). As in ALBERT's create_pretraining_data, n-grams starting at different words overlap
and the core skips one that overlaps what is taken; unlike it, an n-gram that does not fit the remaining budget
is skipped rather than shortened, so the budget is filled by the shorter ones that follow (the mix of n-grams
taken is the same as with ALBERT's selection, about 0.66 / 0.22 / 0.11 for n = 1 / 2 / 3 at 15 %:
tests/preprocessing/test_albert_data.py; shorter than the 1/n drawn because long n-grams stop fitting first).
`span` (SpanBERT, Joshi et al. 2020, section 3.1): spans of whole words, chosen by the policy itself under the
budget (see span_units): repeatedly draw a length n ~ Geometric(p=0.2) truncated to 1..10 words and renormalised
(mean 3.8 words, as in the paper and its masking.py), then a start uniformly among the words where n free words fit
in one run between special tokens, until the budget is spent.

`whole-word` (BERT's whole-word masking): each whole word is a unit; 80/10/10 per token as in Google's WWM release.
`entity` (ERNIE-style knowledge masking, Sun et al. 2019): named-entity and noun-phrase spans of whole words, found
by the heuristic of preprocessing.entities on the words' text (the Masker carries the tokenizer's id -> text
table: Masker.from_tokenizer), are units; the policy takes entities first, then phrases, then single words outside
them, each group in random order, while they fit the budget; a word inside a detected span is never masked alone.

    python -c "from preprocessing.masking_policies import POLICIES; print(sorted(POLICIES))"
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from .entities import entity_spans, phrase_spans

Units = list[list[int]]
MAX_NGRAM = 3  # ALBERT's n-gram masking: n in 1..3


@dataclass(frozen=True)
class Candidates:
    """What a policy sees of one instance: which positions hold special tokens (never masked) and which hold
    continuation pieces (`##ing`: part of the word of the token before them)."""

    is_special: Sequence[bool]
    is_continuation: Sequence[bool]
    # the core's num_to_predict, for policies that choose their units under the budget themselves (span, entity)
    budget: int | None = None
    # per position, the token's text without its word marker (`##`; byte-level BPE: one latin-1 char per byte),
    # for policies that read words (entity); None when the policy does not need them
    token_texts: Sequence[str] | None = None
    byte_level: bool = False  # token_texts hold bytes as latin-1 chars (byte-level BPE): decode words as UTF-8

    def word_text(self, word: Sequence[int]) -> str:
        """The text of a word (its positions), without the space before it."""
        if self.token_texts is None:
            raise ValueError("this policy needs the token texts (Masker.from_tokenizer / Masker.token_texts)")
        text = "".join(self.token_texts[p] for p in word)
        if self.byte_level:
            text = text.encode("latin-1").decode("utf-8", errors="replace")
        return text.strip()

    def word_runs(self) -> list[list[list[int]]]:
        """Whole words (lists of positions), grouped into runs of adjacent words between special tokens. A
        continuation piece right after a special token (its word start was truncated away) starts a word."""
        runs: list[list[list[int]]] = [[]]
        for position, special in enumerate(self.is_special):
            if special:
                runs.append([])
            elif self.is_continuation[position] and runs[-1]:
                runs[-1][-1].append(position)
            else:
                runs[-1].append([position])
        return [run for run in runs if run]


Policy = Callable[[Candidates, random.Random], Units]


def token_units(candidates: Candidates, rng: random.Random) -> Units:
    """Each non-special token is its own unit."""
    return [[i] for i, special in enumerate(candidates.is_special) if not special]


def ngram_units(candidates: Candidates, rng: random.Random) -> Units:
    """One n-gram of whole words starting at every word, n ~ p(n) proportional to 1/n over the n <= MAX_NGRAM that
    fit in the word's run (ALBERT)."""
    units: Units = []
    for words in candidates.word_runs():
        for start in range(len(words)):
            sizes = range(1, min(MAX_NGRAM, len(words) - start) + 1)
            n = rng.choices(sizes, weights=[1.0 / k for k in sizes])[0]
            units.append([position for word in words[start:start + n] for position in word])
    return units


SPAN_GEOMETRIC_P = 0.2  # SpanBERT: span length in words ~ Geometric(0.2) ...
MAX_SPAN_WORDS = 10  # ... truncated to 1..10 words and renormalised (mean 3.8 words)


def span_length_probabilities(p: float = SPAN_GEOMETRIC_P, max_words: int = MAX_SPAN_WORDS) -> list[float]:
    """P(n words) for n = 1..max_words: p (1-p)^(n-1), renormalised over 1..max_words (SpanBERT's "clipping",
    whose mean 3.8 is that of the renormalised, not of the capped, distribution)."""
    weights = [p * (1.0 - p) ** (n - 1) for n in range(1, max_words + 1)]
    total = sum(weights)
    return [w / total for w in weights]


_SPAN_LENGTHS = range(1, MAX_SPAN_WORDS + 1)
_SPAN_WEIGHTS = span_length_probabilities()


def span_units(candidates: Candidates, rng: random.Random) -> Units:
    """SpanBERT spans of whole words, chosen until the budget (candidates.budget) is spent.

    Each round draws n words from span_length_probabilities(), then a start uniformly among the words where a
    span of n words fits: inside one run between special tokens, within the remaining budget, on free words, and
    not touching a span already taken (a free word or a special token on both sides). When no start fits, n is
    lowered one word at a time; the loop ends when not even one word fits. Keeping spans apart means the masked
    positions fall into maximal runs that are exactly these spans, so the span boundary objective can recover
    each span (and its two boundary tokens) from the sorted positions alone; SpanBERT's reference code instead
    lets spans touch and merges touching spans into one (merge_intervals), which our rule avoids at the cost of
    never placing two spans side by side."""
    if candidates.budget is None:
        raise ValueError("the span policy needs Candidates.budget (the core's num_to_predict)")
    words: list[list[int]] = []  # every word, run after run
    gaps: list[tuple[int, int, bool, bool]] = []  # free words [a, b) + whether a / b are ends of their run
    for run in candidates.word_runs():
        gaps.append((len(words), len(words) + len(run), True, True))
        words.extend(run)
    prefix = [0]  # prefix[w] = tokens in words[:w]
    for word in words:
        prefix.append(prefix[-1] + len(word))
    longest_word = max((len(word) for word in words), default=1)
    left = candidates.budget
    units: Units = []
    while left > 0:
        n = rng.choices(_SPAN_LENGTHS, weights=_SPAN_WEIGHTS)[0]
        while n >= 1:
            # starts s with s..s+n-1 free and not touching a taken word: inside a gap, one word in from a side
            # that borders a taken span
            ranges = [(a + (not at_start), b - (not at_end) - n) for a, b, at_start, at_end in gaps]
            ranges = [(lo, hi) for lo, hi in ranges if lo <= hi]
            if n * longest_word <= left:  # every window fits the budget: count instead of listing
                total = sum(hi - lo + 1 for lo, hi in ranges)
                if total:
                    k = rng.randrange(total)
                    for lo, hi in ranges:
                        if k <= hi - lo:
                            start = lo + k
                            break
                        k -= hi - lo + 1
                    break
            else:
                starts = [s for lo, hi in ranges for s in range(lo, hi + 1) if prefix[s + n] - prefix[s] <= left]
                if starts:
                    start = starts[rng.randrange(len(starts))]
                    break
            n -= 1
        if n == 0:
            break
        unit = [position for word in words[start:start + n] for position in word]
        left -= len(unit)
        units.append(unit)
        g = next(i for i, (a, b, _, _) in enumerate(gaps) if a <= start < b)
        a, b, at_start, at_end = gaps[g]
        gaps[g:g + 1] = [gap for gap in ((a, start, at_start, False), (start + n, b, False, at_end)) if gap[0] < gap[1]]
    return units


def whole_word_units(candidates: Candidates, rng: random.Random) -> Units:
    """Each whole word (a token and its continuation pieces) is one unit: BERT's whole-word masking, where the
    80/10/10 choice is still made for every token (Google's WWM release)."""
    return [word for words in candidates.word_runs() for word in words]


def entity_units(candidates: Candidates, rng: random.Random) -> Units:
    """ERNIE-style units chosen under the budget: entity spans, then noun-phrase spans, then the words outside
    both (preprocessing.entities on each run's word texts), each group shuffled, every unit that still fits
    taken. Units are whole words; spans never cross a special token."""
    if candidates.budget is None:
        raise ValueError("the entity policy needs Candidates.budget (the core's num_to_predict)")
    entities: Units = []
    phrases: Units = []
    single_words: Units = []
    for words in candidates.word_runs():
        texts = [candidates.word_text(word) for word in words]
        found = entity_spans(texts)
        noun_phrases = phrase_spans(texts, found)
        inside = [False] * len(words)
        for group, spans in ((entities, found), (phrases, noun_phrases)):
            for a, b in spans:
                group.append([position for word in words[a:b] for position in word])
                inside[a:b] = [True] * (b - a)
        single_words += [word for word, busy in zip(words, inside) if not busy]
    left = candidates.budget
    units: Units = []
    for group in (entities, phrases, single_words):
        rng.shuffle(group)
        for unit in group:
            if len(unit) <= left:
                units.append(unit)
                left -= len(unit)
    return units


POLICIES: dict[str, Policy] = {"token": token_units, "whole-word": whole_word_units, "ngram": ngram_units,
                               "span": span_units, "entity": entity_units}
# Policies that read the words' text (Masker.token_texts).
TEXT_POLICIES = frozenset({"entity"})
# Policies whose units get one 80/10/10 decision each unless MaskingConfig.replacement_per says otherwise.
PER_UNIT_REPLACEMENT_POLICIES = frozenset({"span"})
# Policies whose chosen units a shard stores as span bounds (shards.SPAN_COLUMN: SpanBERT's SBO reads them)
SPAN_BOUND_POLICIES = frozenset({"span"})
# Policies whose units split the non-special positions into disjoint runs (no random draws of their own): the core
# chooses among them with array operations only.
PARTITION_POLICIES = frozenset({"token", "whole-word"})
