"""Cleaning and dedup speed on real text: preprocessing.filters.clean_document (docs/s), and our numpy MinHash
against datasketch 2.0.0's MinHash on the same shingles (speed ratio, and whether the two estimate the same
Jaccard similarities).

    bertfactory samples fetch enwiki newspaper4k
    python benchmarks/cleaning.py

Documents: the 23 newspaper4k gold articles (paragraphs = non-empty lines) and the 106 articles of the enwiki sample
(wikitext -> paragraphs). Filters: default FiltersConfig, one pass after a warm-up. MinHash: both implementations
go from the same normalised token list to a 128-value signature (ours: shingle_hashes + MinHasher.signature;
datasketch: the 5-token shingles as UTF-8 bytes, MinHash.update_batch with its default sha1 hash). Agreement:
pairs (article, the article with one word in k replaced, k = 10, 20, 40, 150) — the true Jaccard of the 5-word
shingle sets vs each implementation's estimate.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertfactory.samples import sample_dir, sample_path  # noqa: E402
from preprocessing.clean import wikitext_to_paragraphs  # noqa: E402
from preprocessing.config import DEFAULT_DROP_SECTIONS  # noqa: E402
from preprocessing.dedup_config import DedupConfig  # noqa: E402
from preprocessing.minhash import MinHasher, estimated_jaccard, normalise_for_dedup, shingle_hashes  # noqa: E402
from preprocessing.filters import FiltersConfig, clean_document, tokenize  # noqa: E402
from preprocessing.sources.wikipedia import Page, iter_pages  # noqa: E402


def news_docs() -> list[list[str]]:
    return [[line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            for path in sorted((sample_dir("newspaper4k") / "txt").glob("*.txt"))]


def wiki_docs() -> list[list[str]]:
    return [wikitext_to_paragraphs(page.text, DEFAULT_DROP_SECTIONS, False, 20)
            for page in iter_pages(sample_path("enwiki"), 0)
            if isinstance(page, Page) and page.namespace == 0 and not page.redirect]


def bench_filters(name: str, docs: list[list[str]]) -> None:
    cfg = FiltersConfig()
    clean_document(docs[0], None, cfg)  # warm-up: Unicode tables
    chars = sum(len(p) for d in docs for p in d)
    start = time.perf_counter()
    kept = sum(clean_document(d, None, cfg)[1] is None for d in docs)
    seconds = time.perf_counter() - start
    print(f"filters {name}: {len(docs)} docs ({kept} kept), {len(docs) / seconds:.0f} docs/s, "
          f"{chars / seconds / 1e6:.2f} M chars/s")


def shingles_as_bytes(tokens: list[str], size: int) -> list[bytes]:
    size = min(size, len(tokens))
    return [" ".join(tokens[i:i + size]).encode("utf-8") for i in range(len(tokens) - size + 1)]


def edited_pairs(token_lists: list[list[str]]):
    """(document, the same document with one word in k replaced) for k = 10, 20, 40, 150, over the first 60
    documents of >= 300 words, seeded: pairs of known, graded overlap to score a MinHash estimate against the true
    Jaccard of their shingle sets (benchmarks/compiled_libs.py scores rensa on the same pairs)."""
    rng = random.Random(0)
    for tokens in token_lists[:60]:
        if len(tokens) < 300:
            continue
        for every in (10, 20, 40, 150):
            edited = list(tokens)
            for i in rng.sample(range(len(edited)), max(1, len(edited) // every)):
                edited[i] = "zyzzyva"
            yield tokens, edited


def bench_minhash(docs: list[list[str]]) -> None:
    from datasketch import MinHash

    cfg = DedupConfig()
    hasher = MinHasher(cfg.num_perm, cfg.seed)
    token_lists = [tokenize(normalise_for_dedup("\n".join(d))) for d in docs]
    token_lists = [t for t in token_lists if t]
    n_shingles = sum(max(1, len(t) - cfg.shingle_size + 1) for t in token_lists)

    def ours():
        return [hasher.signature(shingle_hashes(t, cfg.shingle_size)) for t in token_lists]

    def theirs():
        out = []
        for t in token_lists:
            m = MinHash(num_perm=cfg.num_perm, seed=cfg.seed)
            m.update_batch(shingles_as_bytes(t, cfg.shingle_size))
            out.append(m)
        return out

    times = {}
    for name, fn in (("ours", ours), ("datasketch", theirs)):
        fn()  # warm-up
        start = time.perf_counter()
        for _ in range(3):
            fn()
        times[name] = (time.perf_counter() - start) / 3
        print(f"minhash {name}: {len(token_lists)} docs, {n_shingles} shingles: {times[name] * 1e3:.0f} ms, "
              f"{len(token_lists) / times[name]:.0f} docs/s")
    print(f"minhash speed ratio ours/datasketch: {times['datasketch'] / times['ours']:.2f}x")

    rows = []
    for tokens, edited in edited_pairs(token_lists):
        a, b = (set(shingles_as_bytes(x, cfg.shingle_size)) for x in (tokens, edited))
        true = len(a & b) / len(a | b)
        ours_j = estimated_jaccard(*(hasher.signature(shingle_hashes(x, cfg.shingle_size))
                                     for x in (tokens, edited)))
        ma, mb = MinHash(num_perm=cfg.num_perm, seed=cfg.seed), MinHash(num_perm=cfg.num_perm, seed=cfg.seed)
        ma.update_batch(list(a))
        mb.update_batch(list(b))
        rows.append((true, ours_j, ma.jaccard(mb)))
    arr = np.array(rows)
    sigma = np.sqrt(arr[:, 0] * (1 - arr[:, 0]) / cfg.num_perm)
    print(f"jaccard agreement over {len(rows)} pairs (true J {arr[:, 0].min():.2f}..{arr[:, 0].max():.2f}): "
          f"mean |ours - true| {np.abs(arr[:, 1] - arr[:, 0]).mean():.4f}, "
          f"mean |datasketch - true| {np.abs(arr[:, 2] - arr[:, 0]).mean():.4f}, "
          f"mean |ours - datasketch| {np.abs(arr[:, 1] - arr[:, 2]).mean():.4f}; "
          f"mean (ours - true) {np.mean(arr[:, 1] - arr[:, 0]):+.4f}, (datasketch - true) "
          f"{np.mean(arr[:, 2] - arr[:, 0]):+.4f}; within 3 sigma: "
          f"ours {np.mean(np.abs(arr[:, 1] - arr[:, 0]) <= 3 * sigma):.3f}, "
          f"datasketch {np.mean(np.abs(arr[:, 2] - arr[:, 0]) <= 3 * sigma):.3f}")


def main() -> None:
    news, wiki = news_docs(), wiki_docs()
    bench_filters("newspaper4k gold texts", news)
    bench_filters("enwiki articles", wiki)
    bench_minhash(news + wiki)


if __name__ == "__main__":
    main()
