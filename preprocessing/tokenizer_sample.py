"""The tokenizer's training sample: language-balanced and deterministic.

A multilingual corpus is dominated by its large languages; a tokenizer trained on it as is gives the small ones
few pieces (long token sequences, many single characters). XLM (Lample & Conneau 2019) trains its tokenizer on a
sample in which language i has share q_i = p_i^alpha / sum_j p_j^alpha (p_i its share of the characters,
alpha = 0.5; preprocessing.language_sampling computes q). Here:

- the budget is B = `max_chars` (None = the whole corpus: every document once, alpha has no effect) and language i
  gets b_i = q_i * B characters, capped at its size n_i: a language below its share is taken whole and what it
  leaves is shared by the others in proportion to their q (water-filling, repeated until no cap binds);
- within a language the documents are ranked by a stable hash of (seed, language, document key), ties by key, and
  taken in that order until b_i is reached (the document that crosses it is included);
- no document is repeated. XLM's sampling repeats small languages, but for a tokenizer that is harmful (measured on
  the newspaper4k texts: with Japanese repeated 6 times every n-gram of it passed min_frequency and byte-level BPE
  learned a 42-character token, a whole clause); a language smaller than its share keeps its natural counts;
- so the sample depends only on the set of (language, key, length) and the seed: not on input order, workers
  or process.

Two shapes: `plan_sample` over (lang, key, chars) triples (what a pipeline has after a first pass over its
documents: `plan.copies(lang, key)` on the second pass), and `training_sample` over texts in memory (key = the
text's hash), whose result is what `train_tokenizer`'s texts_factory yields.

    from preprocessing.tokenizer_sample import training_sample
    texts = training_sample({"en": en_docs, "zh": zh_docs}, max_chars=10_000_000, alpha=0.5, seed=0)
    train_tokenizer(lambda: iter(texts), cfg)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .hashing import hash64
from .language_sampling import sampling_probabilities


@dataclass(frozen=True)
class SamplePlan:
    """Which documents the sample takes (see the module docstring)."""

    seed: int
    available: dict[str, int]  # characters per language in the corpus
    budgets: dict[str, float]  # b_i after water-filling (<= available)
    cutoffs: dict[str, tuple[int, str] | None]  # rank (hash, key) from which documents are left out; None = none
    chars: dict[str, int]  # characters the sample takes per language

    def copies(self, lang: str, key: str) -> int:
        """1 if the document is in the sample, else 0."""
        if lang not in self.available:
            raise ValueError(f"language {lang!r} was not in the planned corpus ({', '.join(sorted(self.available))})")
        cutoff = self.cutoffs[lang]
        return 1 if cutoff is None or _rank(self.seed, lang, key) < cutoff else 0


def _rank(seed: int, lang: str, key: str) -> tuple[int, str]:
    return hash64("tokenizer-sample", seed, lang, key), key


def language_budgets(available: Mapping[str, int], max_chars: int | None, alpha: float) -> dict[str, float]:
    """b_i = q_i * B capped at n_i, the cut share redistributed by q among the uncapped languages."""
    total = sum(available.values())
    if total <= 0:
        raise ValueError("the tokenizer sample has nothing to draw from: the documents are empty")
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars must be >= 1 or None, got {max_chars}")
    if max_chars is None or max_chars >= total:
        return {lang: float(n) for lang, n in available.items()}  # everything, exactly (no float rounding)
    remaining = float(max_chars)
    budgets = {lang: 0.0 for lang in available}
    active = sorted(lang for lang, n in available.items() if n > 0)
    while active:
        q = sampling_probabilities({lang: available[lang] for lang in active}, alpha)
        capped = [lang for lang in active if q[lang] * remaining >= available[lang]]
        if not capped:
            budgets.update({lang: q[lang] * remaining for lang in active})
            break
        for lang in capped:
            budgets[lang] = float(available[lang])
            remaining -= available[lang]
        active = [lang for lang in active if lang not in capped]
    return budgets


def plan_sample(docs: Iterable[tuple[str, str, int]], max_chars: int | None, alpha: float, seed: int) -> SamplePlan:
    """Plan the sample from (lang, key, chars) of every document; `key` identifies a document within its language
    (duplicates of a key share one decision)."""
    ranked: dict[str, dict[tuple[int, str], int]] = {}
    for lang, key, chars in docs:
        if chars < 0:
            raise ValueError(f"document {key!r} ({lang}) has a negative length {chars}")
        rank = _rank(seed, lang, key)
        ranked.setdefault(lang, {})
        ranked[lang][rank] = ranked[lang].get(rank, 0) + chars
    available = {lang: sum(by_rank.values()) for lang, by_rank in sorted(ranked.items())}
    budgets = language_budgets(available, max_chars, alpha)
    cutoffs, taken = {}, {}
    for lang, by_rank in ranked.items():
        cutoff, acc = None, 0
        for rank in sorted(by_rank):
            if acc >= budgets[lang]:
                cutoff = rank
                break
            acc += by_rank[rank]
        cutoffs[lang], taken[lang] = cutoff, acc
    return SamplePlan(seed, available, budgets, cutoffs, taken)


def training_sample(docs: Mapping[str, Sequence[str]] | Iterable[tuple[str, str]], max_chars: int | None,
                    alpha: float = 0.5, seed: int = 0) -> list[str]:
    """The sampled texts in a canonical order (language, then rank), from {lang: [text, ...]} or (lang, text)
    pairs. A text's key is its content hash (duplicate texts are taken or left out together)."""
    pairs = [(lang, text) for lang, texts in docs.items() for text in texts] if isinstance(docs, Mapping) else list(docs)
    keyed = [(lang, f"{hash64('text', text):016x}", text) for lang, text in pairs]
    plan = plan_sample(((lang, key, len(text)) for lang, key, text in keyed), max_chars, alpha, seed)
    out = []
    for lang, key, text in sorted(keyed, key=lambda d: (d[0], _rank(seed, d[0], d[1]), d[2])):
        out += [text] * plan.copies(lang, key)
    return out
