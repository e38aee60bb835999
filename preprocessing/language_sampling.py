"""Exponentially smoothed language sampling (XLM, Lample & Conneau 2019; mBERT; XLM-R uses alpha = 0.3):
how many copies of each document go into a multilingual corpus so that small languages are seen more often.

    from preprocessing.language_sampling import sampling_probabilities, copy_rates, copies
    counts = {"en": 9_000_000, "fr": 900_000, "sw": 100_000}   # tokens per language
    q = sampling_probabilities(counts, alpha=0.7)                # {"en": 0.805, "fr": 0.161, "sw": 0.034}
    rates = copy_rates(counts, alpha=0.7)                         # {"en": 0.894, "fr": 1.784, "sw": 3.450}
    n = copies(doc_key, "sw", rates, seed)                        # 3 or 4 (3 + a Bernoulli(0.45))

With p_i = n_i / sum_j n_j the share of language i in the corpus, the sampling distribution is
q_i = p_i^alpha / sum_j p_j^alpha: alpha = 1 keeps the shares, alpha = 0 makes them equal, in between flattens
them. Rather than sampling a stream, the corpus is rewritten: each document of language i is kept
`rate_i = q_i / p_i` times in expectation, so the corpus has the same size as before (in the unit the counts are
in — use tokens, since documents differ in length by orders of magnitude between sources) and language i makes up
q_i of it. A large language gets rate < 1 (some documents left out), a small one rate > 1 (repeated).

`copies` realises the rate for one document: floor(rate) + 1 with probability frac(rate), the coin being a stable
hash of (seed, language, document key) — no random state, so the answer does not depend on document order,
workers or reruns, and the same seed keeps the same documents. Languages with count 0 get q = 0 and rate 0.
Configured by `preprocess.language_sampling` (preprocessing/config.py: enabled, alpha, languages, min_docs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .hashing import hash64

_TWO_64 = float(1 << 64)


def _shares(counts: Mapping[str, int]) -> dict[str, float]:
    for lang, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, (int, float)) or n < 0 or not math.isfinite(n):
            raise ValueError(f"count of {lang!r} is {n!r}: counts must be finite numbers >= 0")
    total = sum(counts.values())
    if total <= 0:
        raise ValueError(f"the counts {dict(counts)} add up to {total}: nothing to sample from")
    return {lang: n / total for lang, n in counts.items()}


def sampling_probabilities(counts: Mapping[str, int], alpha: float = 0.7) -> dict[str, float]:
    """q_i = p_i^alpha / sum_j p_j^alpha over the languages with a positive count (others: 0.0)."""
    if alpha < 0 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    shares = _shares(counts)
    # sorted: the float sum is then the same whatever order the mapping was built in
    weights = {lang: (p ** alpha if p > 0 else 0.0) for lang, p in sorted(shares.items())}
    total = sum(weights.values())
    return {lang: weights[lang] / total for lang in counts}


def copy_rates(counts: Mapping[str, int], alpha: float = 0.7) -> dict[str, float]:
    """Expected copies per document of each language (q_i / p_i): the corpus keeps its size and language i
    becomes q_i of it. 0.0 for a language with count 0."""
    shares = _shares(counts)
    q = sampling_probabilities(counts, alpha)
    return {lang: (q[lang] / shares[lang] if shares[lang] > 0 else 0.0) for lang in counts}


def copies(doc_key: str, lang: str, rates: Mapping[str, float], seed: int) -> int:
    """How many times this document goes into the corpus: floor(rate) plus one more when a stable hash of
    (seed, lang, doc_key), as a number in [0, 1), is below frac(rate). `doc_key` must identify the document
    across the whole corpus (e.g. its doc id or "source:key")."""
    if lang not in rates:
        raise ValueError(f"no copy rate for language {lang!r}; rates are for {', '.join(sorted(rates))}")
    rate = rates[lang]
    whole = math.floor(rate)
    coin = hash64("copies", seed, lang, doc_key) / _TWO_64
    return whole + (1 if coin < rate - whole else 0)


__all__ = ["sampling_probabilities", "copy_rates", "copies"]
