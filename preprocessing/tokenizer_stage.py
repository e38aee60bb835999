"""The tokenizer stage on the driver, between the two Beam jobs: the language-balanced sample of training documents
it learns from (preprocessing.tokenizer_sample), the training itself (preprocessing.tokenizer), the tokenizer to
adopt instead (given or a parent version's), and the fertility table of the manifest measured on a bounded sample.

    python -c "from preprocessing.tokenizer_stage import FERTILITY_DOCS as d, FERTILITY_CHARS as c; print(d, c)"
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from tokenizers import Tokenizer
from tqdm import tqdm

from . import hashing
from .config import PreprocessConfig
from .staging import Staging, iter_docs
from .tokenizer import save_tokenizer, train_tokenizer


def doc_texts(doc: dict) -> list[str]:
    """The text of a document record as paragraphs (a sentence pair: its two sides)."""
    if doc.get("kind") == "pair":
        return [doc["src"], doc["tgt"]]
    return [" ".join(paragraph) for paragraph in doc["paragraphs"]]


def doc_lang(doc: dict) -> str:
    return (f"{doc['src_lang']}-{doc['tgt_lang']}" if doc.get("kind") == "pair" else doc.get("lang")) or "und"


def sample_plan(cfg: PreprocessConfig, work: Path):
    """The language-balanced, deterministic sample of training documents the tokenizer learns from
    (preprocessing.tokenizer_sample: q_i ~ p_i^alpha of sample_max_chars, documents chosen by a stable hash)."""
    from .tokenizer_sample import plan_sample

    t = cfg.tokenizer
    return plan_sample(((doc_lang(d), str(d["doc_id"]), sum(map(len, doc_texts(d))))
                        for d in iter_docs(work) if d["split"] == "train"), t.sample_max_chars, t.sample_alpha, cfg.seed)


def train_texts(work: Path, plan, total: int, desc: str) -> Iterator[str]:
    """The paragraphs of the sampled training documents (file order: the trained vocabulary does not depend on
    it)."""
    for doc in tqdm(iter_docs(work), total=total, desc=desc, unit="doc", disable=None, leave=False):
        if doc["split"] == "train" and plan.copies(doc_lang(doc), str(doc["doc_id"])):
            yield from doc_texts(doc)


# the sample the manifest's fertility table is measured on, per language: the first FERTILITY_DOCS documents in
# rank order (held-out first), cut at FERTILITY_CHARS characters of text. Bounded so that the driver's second
# tokenisation stays a small fixed cost whatever the corpus (it was 4-9 s of a 2.2 M-token corpus unbounded, then
# ~0.3 CPU-s per job at 1,000,000 characters: a tenth of a 1x sotu job run in process; 0.1 at 250,000). 250,000
# characters are ~55 k tokens of English: tokens per character varied by ~2 % between seeds of the sample on 1x
# sotu (0.254-0.260; the held-out documents come first, unseen by a trained tokenizer, so more of them than at
# 1,000,000: 0.238-0.245). The table compares languages and tokenizers, which differ by tens of percent
FERTILITY_DOCS = 200
FERTILITY_CHARS = 250_000


def fertility_parts(doc: dict, seed: int) -> list[tuple[str, int, list[str]]]:
    """(language, stable-hash rank, texts) of what a document record adds to the fertility sample: the document in
    its language, or each side of a sentence pair in its own language (a pair's `en-ja` row would divide the
    Japanese side's tokens by the English side's words). A side is ranked by its text, so the English side that
    a corpus pairs with several languages counts once."""
    if doc.get("kind") == "pair":
        return [(doc[f"{side}_lang"] or "und", hashing.hash64("fertility", seed, doc[f"{side}_lang"] or "und",
                                                              doc[side]), [doc[side]]) for side in ("src", "tgt")]
    return [(doc_lang(doc), hashing.hash64("fertility", seed, doc["doc_id"]), doc_texts(doc))]


def corpus_fertility(tokenizer: Tokenizer, work: Path, seed: int) -> dict:
    """Tokens per character / word and unknown rate per language, with the tokenizer just made, on a deterministic
    bounded sample of each language: up to FERTILITY_DOCS documents (held-out first, then training; chosen by a
    stable hash), their text cut at FERTILITY_CHARS characters. A sentence pair's sides count as texts of their
    own languages (fertility_parts)."""
    from .fertility import fertility, first_chars

    import heapq

    kept: dict[str, list] = {}  # per language a heap of the FERTILITY_DOCS smallest ranks (negated: a max-heap)
    held: dict[str, set] = {}  # the ranks in each heap: a pair side already there is not taken twice
    for doc in iter_docs(work):
        for lang, key, texts in fertility_parts(doc, seed):
            rank = (int(doc["split"] != "heldout"), key)
            heap, ranks = kept.setdefault(lang, []), held.setdefault(lang, set())
            if rank in ranks:
                continue
            item = (-rank[0], -rank[1], texts)
            if len(heap) < FERTILITY_DOCS:
                heapq.heappush(heap, item)
            elif item[:2] > heap[0][:2]:
                ranks.discard((-heap[0][0], -heap[0][1]))
                heapq.heapreplace(heap, item)
            else:
                continue
            ranks.add(rank)
    texts = {lang: first_chars([t for *_r, ts in sorted(heap, key=lambda d: (-d[0], -d[1])) for t in ts],
                                FERTILITY_CHARS) for lang, heap in kept.items()}
    return fertility(tokenizer, texts)


def given_tokenizer(cfg: PreprocessConfig, increment) -> Path | None:
    """The tokenizer to adopt rather than train: an incremental version's parent's (it keeps its token ids), else
    preprocess.tokenizer.path; None when one is to be trained."""
    if increment is not None:
        return increment.tokenizer_path
    return Path(cfg.tokenizer.path).expanduser() if cfg.tokenizer.path else None


def train_tokenizer_stage(cfg: PreprocessConfig, counts: dict, staging: Staging) -> Tokenizer:
    """Train the tokenizer on the sampled training documents and save it into the staging directory; the sample's
    characters per language go into `counts` (tokenizer_sample_chars)."""
    total = sum(counts["docs"].values())
    plan = sample_plan(cfg, staging.work)
    counts["tokenizer_sample_chars"] = dict(sorted(plan.chars.items()))
    passes = iter(["tokenizer: counting words", "tokenizer: training", "tokenizer: training"])
    tokenizer = train_tokenizer(lambda: train_texts(staging.work, plan, total, next(passes)), cfg.tokenizer)
    save_tokenizer(tokenizer, staging.tokenizer)
    return tokenizer
