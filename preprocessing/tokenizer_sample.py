"""The tokenizer's training sample: language-balanced and deterministic.

A multilingual corpus is dominated by its large languages; a tokenizer trained on it as is gives the small ones
few pieces (long token sequences, many single characters). XLM (Lample & Conneau 2019) trains its tokenizer on a
sample in which language i has share q_i = p_i^alpha / sum_j p_j^alpha (p_i its share of the characters,
alpha = 0.5; preprocessing.language_sampling computes q). Here:

- the budget is B = `max_chars` (None = the corpus's own size) and language i gets b_i = q_i * B characters;
- within a language the documents are ranked by a stable hash of (seed, language, document key), ties by key;
  language i takes every document floor(b_i / n_i) times (a small language is repeated when alpha lifts it above
  its size) and then the ranked documents, one copy each, until the remainder of b_i is reached (the document that
  crosses it is included);
- so the sample depends only on the set of (language, key, length) and the seed: not on input order, workers
  or process. alpha = 1 with max_chars None takes every document exactly once.

Two shapes: `plan_sample` over (lang, key, chars) triples (what a pipeline has after a first pass over its
documents: `plan.copies(lang, key)` on the second pass), and `training_sample` over texts in memory (key = the
text's hash), whose result is what `train_tokenizer`'s texts_factory yields.

    from preprocessing.tokenizer_sample import training_sample
    texts = training_sample({"en": en_docs, "zh": zh_docs}, max_chars=10_000_000, alpha=0.5, seed=0)
    train_tokenizer(lambda: iter(texts), cfg)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .hashing import hash64
from .language_sampling import sampling_probabilities


@dataclass(frozen=True)
class SamplePlan:
    """How many copies of each document the sample takes (see the module docstring)."""

    seed: int
    available: dict[str, int]  # characters per language in the corpus
    budgets: dict[str, float]  # b_i = q_i * B
    full_copies: dict[str, int]  # floor(b_i / n_i): copies every document of the language gets
    cutoffs: dict[str, tuple[int, str] | None]  # rank (hash, key) from which no extra copy; None = all get one
    chars: dict[str, int]  # characters the sample takes per language

    def copies(self, lang: str, key: str) -> int:
        if lang not in self.available:
            raise ValueError(f"language {lang!r} was not in the planned corpus ({', '.join(sorted(self.available))})")
        cutoff = self.cutoffs[lang]
        extra = cutoff is None or (_rank(self.seed, lang, key) < cutoff)
        return self.full_copies[lang] + (1 if extra else 0)


def _rank(seed: int, lang: str, key: str) -> tuple[int, str]:
    return hash64("tokenizer-sample", seed, lang, key), key


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
    total = sum(available.values())
    if total <= 0:
        raise ValueError("the tokenizer sample has nothing to draw from: the documents are empty")
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars must be >= 1 or None, got {max_chars}")
    budget_total = total if max_chars is None else max_chars
    q = sampling_probabilities({lang: n for lang, n in available.items() if n > 0}, alpha)
    budgets, full, cutoffs, taken = {}, {}, {}, {}
    for lang, n in available.items():
        b = q.get(lang, 0.0) * budget_total
        # a tiny tolerance: alpha = 1 at the corpus size must give exactly one copy, not 0.9999999 of one
        k = math.floor(b / n + 1e-9) if n else 0
        remainder = b - k * n
        budgets[lang], full[lang] = b, k
        cutoff, got = None, k * n
        acc = 0
        for rank in sorted(ranked[lang]):
            if acc >= remainder - 1e-9 * n:
                cutoff = rank
                break
            acc += ranked[lang][rank]
        cutoffs[lang], taken[lang] = cutoff, got + acc
    return SamplePlan(seed, available, budgets, full, cutoffs, taken)


def training_sample(docs: Mapping[str, Sequence[str]] | Iterable[tuple[str, str]], max_chars: int | None,
                    alpha: float = 0.5, seed: int = 0) -> list[str]:
    """The sampled texts (repeated as often as the plan says), in a canonical order (language, then rank), from
    {lang: [text, ...]} or (lang, text) pairs. A text's key is its content hash."""
    pairs = [(lang, text) for lang, texts in docs.items() for text in texts] if isinstance(docs, Mapping) else list(docs)
    keyed = [(lang, f"{hash64('text', text):016x}", text) for lang, text in pairs]
    plan = plan_sample(((lang, key, len(text)) for lang, key, text in keyed), max_chars, alpha, seed)
    out = []
    for lang, key, text in sorted(keyed, key=lambda d: (d[0], _rank(seed, d[0], d[1]), d[2])):
        out += [text] * plan.copies(lang, key)
    return out
