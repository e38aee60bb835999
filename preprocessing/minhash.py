"""The text and hash side of deduplication, without Beam: the text a record is compared on, its normalised form
and exact hash, word shingles, MinHash signatures (MinHasher) and LSH band keys. preprocessing.dedup runs them as a
Beam transform; benchmarks/cleaning.py and the tests call them directly.

MinHash is own numpy rather than datasketch (2.0.0). Measured on the same 127 real documents (418k shingles,
benchmarks/cleaning.py): the same speed within noise (ours/datasketch 0.87x-0.98x over two runs, ~210 docs/s on
one core), the same Jaccard estimates (mean |error| vs the true shingle Jaccard 0.029 vs 0.028 over 200 pairs);
ours wins on what matters for an index kept across corpus versions: exact arithmetic, coefficients that do not
depend on a library version, plain uint32 arrays straight into Arrow, and no extra dependency. A signature is one
vectorised pass — stable 64-bit shingle
hashes (blake2b of each distinct token, combined by a rolling hash), then (a*x + b) mod 2^61-1 for all permutations
and shingles at once with exact 61-bit modular arithmetic (datasketch lets a*x overflow 64 bits), min over
shingles, top 32 bits kept. The permutation coefficients come from blake2b of (seed, i), not from a numpy RNG whose
stream may change between numpy versions: an index written today must match signatures computed by a later
version. Speed and agreement with datasketch: benchmarks/cleaning.py (RESULTS.md).

    python -c "from preprocessing.minhash import normalise_for_dedup; print(normalise_for_dedup('Straße, STRASSE!'))"
"""

from __future__ import annotations

import hashlib

import numpy as np

from .filters import strip_punctuation_table
from .hashing import hash64

MERSENNE_61 = (1 << 61) - 1
_P = np.uint64(MERSENNE_61)
_LOW30 = np.uint64((1 << 30) - 1)
_LOW31 = np.uint64((1 << 31) - 1)
_U1, _U29, _U30, _U31, _U61 = np.uint64(1), np.uint64(29), np.uint64(30), np.uint64(31), np.uint64(61)


def document_text(doc: dict) -> str:
    """The text a record is compared on: paragraphs of sentences, or a sentence pair as src TAB tgt."""
    if "paragraphs" in doc:
        return "\n".join(" ".join(sentences) for sentences in doc["paragraphs"])
    return f"{doc['src']}\t{doc['tgt']}"


def normalise_for_dedup(text: str) -> str:
    """Case-folded (str.casefold: ß = SS = ss), every Unicode punctuation character (category P*) removed,
    whitespace runs -> one space."""
    return " ".join(normalised_words(text))


def normalised_words(text: str) -> list[str]:
    """The whitespace-separated words of normalise_for_dedup(text)."""
    return text.casefold().translate(strip_punctuation_table()).split()


def exact_hash(normalised: str) -> int:
    return hash64("dedup-exact", normalised)


# token -> its blake2b hash, kept across the documents of a process: a corpus repeats its vocabulary (sotu: 32k
# distinct tokens among the 400k distinct per document), and blake2b costs a microsecond a token. Emptied when a
# document's new tokens would overflow it: bounded memory (~8 MB, or one document's distinct tokens where they alone
# are more), and the values never depend on what is cached.
_TOKEN_HASH_CACHE: dict[str, int] = {}
_TOKEN_HASH_CACHE_SIZE = 1 << 16


def _token_hashes(tokens: list[str]) -> np.ndarray:
    """A stable 64-bit hash per token (blake2b of each distinct token, once per process while cached)."""
    cache = _TOKEN_HASH_CACHE
    distinct = set(tokens)
    new = distinct.difference(cache)  # in C: a set smaller than the dict is checked against it element by element
    if len(cache) + len(new) > _TOKEN_HASH_CACHE_SIZE:
        cache.clear()
        new = distinct
    for token in new:
        cache[token] = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
    return np.fromiter(map(cache.__getitem__, tokens), dtype=np.uint64, count=len(tokens))


_ROLL = np.uint64(0x100000001B3)


def shingle_hashes(tokens: list[str], size: int) -> np.ndarray:
    """The distinct 61-bit hashes (values < 2^61 - 1) of all `size`-token shingles, sorted; a text shorter than
    `size` is one shingle; no tokens, no shingles."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    codes = _token_hashes(tokens)
    size = min(size, len(tokens))
    hashes = codes[: len(codes) - size + 1].copy()
    for k in range(1, size):
        hashes = hashes * _ROLL + codes[k: len(codes) - size + 1 + k]  # rolling hash, uint64 wraps around
    # hashes % (2^61 - 1) without a 64-bit division: 2^61 = 1 (mod 2^61 - 1), so h = q 2^61 + r -> q + r <= p + 7,
    # then one conditional subtraction (r - p wraps around to a huge value where r < p)
    folded = (hashes & _P) + (hashes >> _U61)
    folded = np.minimum(folded, folded - _P)
    # np.unique as a sort and a neighbour test (np.unique's hash table costs more than the sort here)
    ordered = np.sort(folded)
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]


class MinHasher:
    """MinHash signatures under `num_perm` universal hash functions h_i(x) = (a_i x + b_i) mod (2^61 - 1)."""

    def __init__(self, num_perm: int, seed: int, chunk: int = 512):
        a = [hash64("minhash-a", seed, i) % (MERSENNE_61 - 1) + 1 for i in range(num_perm)]
        b = [hash64("minhash-b", seed, i) % MERSENNE_61 for i in range(num_perm)]
        self.a = np.array(a, dtype=np.uint64)
        self.b = np.array(b, dtype=np.uint64)[:, None]
        # a = a_hi 2^31 + a_lo; a_hi doubled in advance (a_hi x_hi 2^62 = 2 a_hi x_hi)
        self.a_hi2 = ((self.a >> _U31) << _U1)[:, None]
        self.a_hi = (self.a >> _U31)[:, None]
        self.a_lo = (self.a & _LOW31)[:, None]
        self.num_perm = num_perm
        self.chunk = chunk

    def _folded(self, x: np.ndarray) -> np.ndarray:
        """[num_perm, len(x)] values v_ij <= 2^61 + 4 with v_ij = (a_i x_j + b_i) mod (2^61 - 1) or that plus 2^61 - 1.
        Exact: a = a_hi 2^31 + a_lo and x = x_hi 2^31 + x_lo (hi < 2^30, lo < 2^31), so
        a x = a_hi x_hi 2^62 + (a_hi x_lo + a_lo x_hi) 2^31 + a_lo x_lo, with 2^61 = 1 and so 2^62 = 2 (mod 2^61 - 1);
        every product < 2^62, and no sum overflows 64 bits. 16 array operations (the 32-bit split took 21)."""
        x_hi = (x >> _U31)[None, :]
        x_lo = (x & _LOW31)[None, :]
        # in place: each full-size temporary costs as much as the arithmetic
        total = self.a_hi2 * x_hi  # 2 a_hi x_hi < 2^61
        mid = self.a_hi * x_lo
        tmp = self.a_lo * x_hi
        mid += tmp  # < 2^62; mid 2^31 = (mid >> 30) 2^61 + (mid & (2^30 - 1)) 2^31 = (mid >> 30) + ... (mod p)
        np.bitwise_and(mid, _LOW30, out=tmp)
        tmp <<= _U31  # < 2^61
        total += tmp
        mid >>= _U30  # < 2^32
        total += mid
        np.multiply(self.a_lo, x_lo, out=tmp)  # < 2^62
        total += tmp
        total += self.b  # < 2^61 + 2^61 + 2^32 + 2^62 + 2^61 < 2^63.4
        np.right_shift(total, _U61, out=tmp)  # <= 5
        total &= _P
        total += tmp  # <= 2^61 - 1 + 5
        return total

    def permute(self, x: np.ndarray) -> np.ndarray:
        """(a_i x_j + b_i) mod (2^61 - 1) for every permutation i and value x_j < 2^61 - 1: [num_perm, len(x)]."""
        total = self._folded(x)
        tmp = total - _P  # wraps around to a huge value where total < p
        return np.minimum(total, tmp, out=total)

    def _chunk_minimum(self, x: np.ndarray) -> np.ndarray:
        """permute(x).min(axis=1) without reducing every value: a folded value is >= p only when the true one is
        < 5 (about 5 in 2^61 of them), and only then does the chunk need the exact reduction."""
        total = self._folded(x)
        if total.max() < _P:
            return total.min(axis=1)
        tmp = total - _P
        return np.minimum(total, tmp, out=total).min(axis=1)

    def signature(self, shingles: np.ndarray) -> np.ndarray | None:
        """uint32[num_perm]: the top 32 bits of the minimum of each permutation over the shingles; None without
        shingles."""
        if len(shingles) == 0:
            return None
        low = np.full(self.num_perm, _P, dtype=np.uint64)
        # chunks of shingles: bounded memory, and [num_perm, 512] uint64 temporaries stay in the CPU cache (3x faster
        # than chunks of 2048)
        for start in range(0, len(shingles), self.chunk):
            np.minimum(low, self._chunk_minimum(shingles[start: start + self.chunk]), out=low)
        return (low >> np.uint64(29)).astype(np.uint32)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.count_nonzero(a == b)) / len(a)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> list[tuple[int, int]]:
    """(band, hash of the band's rows) for every band: documents sharing one are LSH candidates."""
    data = signature.astype("<u4").tobytes()
    width = rows * 4
    return [(band, int.from_bytes(hashlib.blake2b(data[band * width: (band + 1) * width], digest_size=8,
                                                  person=b"lsh-band").digest(), "little"))
            for band in range(bands)]


def lsh_candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """The S-curve: probability that a pair of Jaccard similarity s shares at least one band, 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - similarity ** rows) ** bands
