"""Main-text extraction quality and speed: trafilatura vs resiliparse on newspaper4k's real news pages.

    bertfactory samples fetch newspaper4k
    python benchmarks/extraction.py

For each of the 23 pages that ship a gold body text, every extractor of preprocessing.sources.warc runs on the
page's HTML (decoded as UTF-8, as the WARC reader would for these pages) and its output is compared with the gold
text by **token F1**: bag-of-tokens precision/recall, where a token is a run of word characters, except in scripts
written without spaces (CJK, kana, Thai, Burmese) where every character is a token — so the score means the same
for English and Chinese. Reported: mean F1 over pages, pages with F1 < 0.5, and pages/s (extraction only, one pass
after a warm-up page; the peer is the other library in the same run).
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertfactory.samples import SAMPLES, sample_dir  # noqa: E402
from preprocessing.sources.warc import make_extractor  # noqa: E402

EXTRACTORS = ["trafilatura", "trafilatura_precision", "trafilatura_recall", "resiliparse", "resiliparse_all"]
_TOKEN = re.compile(r"[\u0e00-\u0e7f\u1000-\u109f\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]|[^\W_]+")


def tokens(text: str) -> Counter:
    return Counter(t.lower() for t in _TOKEN.findall(text))


def token_f1(predicted: str, gold: str) -> float:
    p, g = tokens(predicted), tokens(gold)
    common = sum((p & g).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(p.values()), common / sum(g.values())
    return 2 * precision * recall / (precision + recall)


def gold_pages() -> list[tuple[str, str, str]]:
    """(page, html, gold text) for every page of the newspaper4k sample that has a gold text, sorted by name."""
    root = sample_dir("newspaper4k")
    names = sorted(f.name[len("txt/"):-len(".txt")] for f in SAMPLES["newspaper4k"].files if f.name.startswith("txt/"))
    return [(n, (root / f"html/{n}.html").read_bytes().decode("utf-8", "replace"),
             (root / f"txt/{n}.txt").read_text("utf-8")) for n in names]


def main() -> None:
    pages = gold_pages()
    print(f"{len(pages)} pages with gold texts")
    results = {}
    for name in EXTRACTORS:
        extract = make_extractor(name)
        extract(pages[0][1])  # warm-up: imports, lazy model loading
        start = time.perf_counter()
        outputs = [extract(html) for _, html, _ in pages]
        seconds = time.perf_counter() - start
        scores = [token_f1(out, gold) for out, (_, _, gold) in zip(outputs, pages)]
        results[name] = (sum(scores) / len(scores), sum(s < 0.5 for s in scores), len(pages) / seconds, scores)
    print("| extractor | mean token F1 | pages F1 < 0.5 | pages/s |")
    print("|---|---|---|---|")
    for name, (mean, low, speed, _) in results.items():
        print(f"| {name} | {mean:.3f} | {low} | {speed:.1f} |")
    print("\nper page F1: " + " ".join(EXTRACTORS))
    for i, (page, _, _) in enumerate(pages):
        print(f"  {page:22s} " + " ".join(f"{results[n][3][i]:.2f}" for n in EXTRACTORS))


if __name__ == "__main__":
    main()
