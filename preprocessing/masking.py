"""Precomputed masked-LM targets: one masking core, with the choice of *what is masked together* as a policy.

Core (as google-research/bert create_masked_lm_predictions): a policy turns the instance into candidate units
(lists of positions; special tokens are never candidates); the units are shuffled; whole units are taken while
they fit into num_to_predict = min(max_predictions_per_seq, max(1, round(len(input_ids) * masked_lm_prob)))
and do not overlap a unit already taken; every chosen position is replaced by [MASK] with probability
mask_token_prob, by a random non-special token with probability random_token_prob, else kept. Positions are
returned sorted, with the id placed at each.

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

80/10/10 per token or per unit (MaskingConfig.replacement_per): by default every chosen position draws its own
replacement (BERT); per unit, one draw decides for all tokens of the unit (all [MASK], all random, or all kept),
which is SpanBERT's per-span replacement and the default of the `span` policy.

`whole-word` (BERT's whole-word masking): each whole word is a unit; 80/10/10 per token as in Google's WWM release.
`entity` (ERNIE-style knowledge masking, Sun et al. 2019): named-entity and noun-phrase spans of whole words, found
by the heuristic of preprocessing.entities on the words' text (the Masker carries the tokenizer's id -> text
table: Masker.from_tokenizer), are units; the policy takes entities first, then phrases, then single words outside
them, each group in random order, while they fit the budget; a word inside a detected span is never masked alone.

Word boundaries come from the tokenizer's vocabulary (word_continuation_ids; docs/masking.md).
`variants_with_units` / `mask_with_spans` also return each chosen unit's (first, last) positions - the spans whose
boundary tokens SpanBERT's SBO reads. Dynamic masking (MaskingConfig.dynamic): `mask_at_read_time` masks a row at
read time with the same core, deterministic in (seed, epoch, row).

Seeding: variant v of instance (doc_id, index) uses random.Random(seed_of(seed, doc_id, index, v)), so masks do
not depend on bundle order, worker count or which other instances exist.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .config import MaskingConfig
from .entities import entity_spans, phrase_spans
from .hashing import seed_of

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


def continuation_ids(vocab: Mapping[str, int], prefix: str = "##") -> frozenset[int]:
    """Ids of a WordPiece vocabulary's continuation pieces (tokens that start with `prefix`, e.g. `##ing`)."""
    return frozenset(i for token, i in vocab.items() if token.startswith(prefix) and len(token) > len(prefix))


# word-start markers of byte-level BPE (RoBERTa: "Ġ" = a space before the token) and SentencePiece/Unigram ("▁")
_WORD_START_MARKERS = ("\u0120", "\u2581")


def word_continuation_ids(vocab: Mapping[str, int]) -> frozenset[int]:
    """Ids of the tokens that continue the word before them, for any tokenizer kind bertfactory trains:
    WordPiece marks continuations (`##ing`); byte-level BPE and Unigram mark word starts instead (`Ġword`,
    `▁word`), so there every token without the marker continues a word. For BPE that includes punctuation after
    a word ("end" + "." is one word to mask) and the unmarked first word of each sentence, which joins the last
    word of the sentence before it inside a row (whole-word masking then masks both: a slightly larger unit, never
    a split word). Special tokens are excluded by the masker itself."""
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


def dynamic_rng(seed: int, epoch: int, row_index: int) -> random.Random:
    """The random stream that masks row `row_index` in `epoch` under dynamic masking (the loader's)."""
    return random.Random(seed_of(seed, "dynamic", epoch, row_index))


def mask_at_read_time(masker: "Masker", input_ids: Sequence[int], epoch: int, row_index: int
                      ) -> tuple[list[int], list[int]]:
    """Dynamic masking (MaskingConfig.dynamic, RoBERTa): (positions ascending, replacement ids) for row
    `row_index` of the split read in `epoch`, with the masker's core, policy and seed - the same masks whichever
    rank, worker or resume reads the row, other masks in another epoch. For SBO spans use
    `masker.mask_with_spans(input_ids, dynamic_rng(masker.seed, epoch, row_index))`."""
    return masker.mask(input_ids, dynamic_rng(masker.seed, epoch, row_index))


@dataclass(frozen=True)
class Masker:
    """Masks instances for one tokenizer and config. `special_ids`: ids never masked and never drawn as random
    replacements ([PAD], [UNK], [CLS], [SEP], [MASK]). `continuation_ids`: the tokenizer's continuation pieces
    (`word_continuation_ids(tokenizer.get_vocab())`), which word-level policies keep with their word; without them
    every token is a word. `token_texts` / `byte_level`: token_text_table(vocab), needed by the `entity` policy
    only. Masker.from_tokenizer fills everything from a tokenizer."""

    cfg: MaskingConfig
    seed: int
    vocab_size: int
    mask_id: int
    special_ids: frozenset[int]
    continuation_ids: frozenset[int] = frozenset()
    token_texts: tuple[str, ...] = ()
    byte_level: bool = False

    @classmethod
    def from_tokenizer(cls, cfg: MaskingConfig, seed: int, tokenizer, source: str = "tokenizer") -> "Masker":
        """The masker for a `tokenizers.Tokenizer` of any kind bertfactory trains (wordpiece, bpe, unigram):
        special ids by role, word boundaries, and the token texts when the policy reads words. `source` names
        the tokenizer in the error raised when it lacks a complete set of special tokens."""
        from .tokenizer import special_ids  # the tokenizers package only where a tokenizer is at hand

        vocab = tokenizer.get_vocab()
        specials = special_ids(tokenizer, source)
        texts, byte_level = token_text_table(vocab) if cfg.policy in TEXT_POLICIES else ((), False)
        return cls(cfg, seed, tokenizer.get_vocab_size(), specials["mask"], frozenset(specials.values()),
                   word_continuation_ids(vocab), texts, byte_level)

    def num_to_predict(self, length: int) -> int:
        return min(self.cfg.max_predictions_per_seq, max(1, int(round(length * self.cfg.masked_lm_prob))))

    def _random_token(self, rng: random.Random) -> int:
        while True:
            token = rng.randrange(self.vocab_size)
            if token not in self.special_ids:
                return token

    @property
    def replaces_per_unit(self) -> bool:
        """Whether one 80/10/10 draw decides for all tokens of a chosen unit (else one draw per token)."""
        if self.cfg.replacement_per is not None:
            return self.cfg.replacement_per == "unit"
        return self.cfg.policy in PER_UNIT_REPLACEMENT_POLICIES

    def candidates(self, input_ids: Sequence[int]) -> Candidates:
        texts = None
        if self.cfg.policy in TEXT_POLICIES:
            if not self.token_texts:
                raise ValueError(f"masking policy '{self.cfg.policy}' reads the words' text: build the Masker with "
                                 "Masker.from_tokenizer (or pass token_texts=token_text_table(vocab)[0])")
            table = self.token_texts
            texts = [table[t] if 0 <= t < len(table) else "" for t in input_ids]
        return Candidates(is_special=[t in self.special_ids for t in input_ids],
                          is_continuation=[t in self.continuation_ids for t in input_ids],
                          budget=self.num_to_predict(len(input_ids)), token_texts=texts, byte_level=self.byte_level)

    def choose_units(self, input_ids: Sequence[int], rng: random.Random,
                     candidates: Candidates | None = None) -> Units:
        """The units to predict, in the order taken: disjoint, at most num_to_predict positions in all.
        `candidates`: this instance's, when already computed (the same for every variant)."""
        candidates = candidates or self.candidates(input_ids)
        budget = candidates.budget
        units = POLICIES[self.cfg.policy](candidates, rng)
        rng.shuffle(units)
        chosen: Units = []
        count = 0
        taken: set[int] = set()
        for unit in units:
            if count >= budget:
                break
            if count + len(unit) > budget or not taken.isdisjoint(unit):
                continue
            chosen.append(unit)
            count += len(unit)
            taken.update(unit)
        return chosen

    def mask(self, input_ids: Sequence[int], rng: random.Random,
             candidates: Candidates | None = None) -> tuple[list[int], list[int]]:
        """(positions ascending, replacement ids) for one variant."""
        positions, tokens, _ = self.mask_with_spans(input_ids, rng, candidates)
        return positions, tokens

    def mask_with_spans(self, input_ids: Sequence[int], rng: random.Random, candidates: Candidates | None = None
                        ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """mask() plus the chosen units as (first, last) positions, inclusive, sorted by first: a span policy's
        spans (their boundary tokens are first - 1 and last + 1), a whole-word policy's words, single tokens for
        `token`. Units are contiguous runs of positions; two units may touch (not under `span`). Same draws as
        mask(), so the same masks."""
        per_unit = self.replaces_per_unit
        replacements: dict[int, int] = {}
        units = self.choose_units(input_ids, rng, candidates)
        for unit in units:
            draw = rng.random()
            for k, position in enumerate(unit):
                if k and not per_unit:  # per token: the same sequence of draws as one draw per chosen position
                    draw = rng.random()
                if draw < self.cfg.mask_token_prob:
                    replacements[position] = self.mask_id
                elif draw < self.cfg.mask_token_prob + self.cfg.random_token_prob:
                    replacements[position] = self._random_token(rng)  # each token of a random span its own
                else:
                    replacements[position] = input_ids[position]
        positions = sorted(replacements)
        spans = sorted((min(unit), max(unit)) for unit in units)
        return positions, [replacements[p] for p in positions], spans

    def variants(self, input_ids: Sequence[int], doc_id: int, index: int) -> tuple[list[list[int]], list[list[int]]]:
        """K variants for instance `index` of document `doc_id`: (mask_positions, mask_tokens)."""
        positions, tokens = [], []
        candidates = self.candidates(input_ids)
        for variant in range(self.cfg.variants):
            p, t = self.mask(input_ids, random.Random(seed_of(self.seed, doc_id, index, variant)), candidates)
            positions.append(p)
            tokens.append(t)
        return positions, tokens

    def variants_with_units(self, input_ids: Sequence[int], doc_id: int, index: int
                            ) -> tuple[list[list[int]], list[list[int]], list[list[tuple[int, int]]]]:
        """variants() plus, per variant, the masked units as (first, last) positions (mask_with_spans): what a
        shard stores for SpanBERT's span boundary objective. The positions and tokens equal variants()'s."""
        positions, tokens, spans = [], [], []
        candidates = self.candidates(input_ids)
        for variant in range(self.cfg.variants):
            rng = random.Random(seed_of(self.seed, doc_id, index, variant))
            p, t, s = self.mask_with_spans(input_ids, rng, candidates)
            positions.append(p)
            tokens.append(t)
            spans.append(s)
        return positions, tokens, spans
