"""Deduplication (preprocessing.dedup) on real Wikipedia articles, in-process on Beam's FnApiRunner: exact and
near duplicates found whatever the input order, the earliest document kept, the prior index of an earlier corpus
version, byte-identical index files, and the LSH S-curve measured against theory."""

from __future__ import annotations

import functools
import json
import math
import random
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from pydantic import ValidationError

from bertfactory.errors import InputError
from bertfactory.samples import sample_path
from preprocessing.clean import wikitext_to_paragraphs
from preprocessing.config import DEFAULT_DROP_SECTIONS
from preprocessing.dedup import Deduplicate, read_prior_index
from preprocessing.dedup_config import DedupConfig
from preprocessing.dedup_index import index_info, merge_dedup_index, write_dedup_index
from preprocessing.minhash import (MERSENNE_61, MinHasher, band_keys, estimated_jaccard, lsh_candidate_probability,
                                   normalise_for_dedup, shingle_hashes)
from preprocessing.filters import tokenize
from preprocessing.hashing import hash64
from preprocessing.sentences import split_sentences
from preprocessing.sources.wikipedia import Page, iter_pages

CFG = DedupConfig()


@functools.lru_cache(maxsize=1)
def _articles() -> tuple:
    """Real enwiki articles of at least 300 words: (title, paragraphs of sentences)."""
    out = []
    for page in iter_pages(sample_path("enwiki"), 0):
        if isinstance(page, Page) and page.namespace == 0 and not page.redirect:
            paragraphs = wikitext_to_paragraphs(page.text, DEFAULT_DROP_SECTIONS, False, 20)
            if sum(len(p.split()) for p in paragraphs) >= 300:
                out.append((page.title, tuple(tuple(split_sentences(p)) for p in paragraphs)))
    return tuple(out)


def articles(n: int) -> list[tuple[str, list[list[str]]]]:
    return [(title, [list(s) for s in paragraphs]) for title, paragraphs in _articles()[:n]]


def doc(key: str, paragraphs: list[list[str]], source: int = 0, ordinal: int = 0) -> tuple[int, dict]:
    doc_id = hash64("doc", source, key)
    return doc_id, {"doc_id": doc_id, "source": source, "ordinal": ordinal, "key": key, "paragraphs": paragraphs}


def restyled(paragraphs: list[list[str]]) -> list[list[str]]:
    """The same text with other case, whitespace and punctuation: an exact duplicate after normalisation."""
    return [[" " + s.upper().replace(" ", "  ").replace(",", ";") + " !" for s in p] for p in paragraphs]


def edited(paragraphs: list[list[str]], rng: random.Random, every: int = 150) -> list[list[str]]:
    """One word in `every` replaced: a near duplicate (5-word shingle Jaccard ~0.9 for every=150)."""
    words = [[s.split() for s in p] for p in paragraphs]
    flat = [(i, j, k) for i, p in enumerate(words) for j, s in enumerate(p) for k in range(len(s))]
    for i, j, k in rng.sample(flat, max(1, len(flat) // every)):
        words[i][j][k] = "zyzzyva"
    return [[" ".join(s) for s in p] for p in words]


def run_dedup(docs: list, cfg: DedupConfig, out: Path, prior_path: Path | None = None) -> dict:
    """Run Deduplicate on the docs; return kept keys, duplicates, outcomes and the index file (if any kept)."""
    out.mkdir(parents=True, exist_ok=True)

    def write_json(lines, name):
        with open(out / name, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")

    def write_index(_, entries):
        return write_dedup_index(sorted(entries, key=lambda e: e[0]), out / "index.arrow", cfg)

    pipeline = beam.Pipeline(runner=FnApiRunner())
    prior = read_prior_index(pipeline, str(prior_path)) if prior_path else None
    # through JSON: Create would infer an int key and pick a signed 64-bit coder for these unsigned ids
    result = (pipeline | beam.Create([json.dumps(d) for d in docs])
              | "Parse" >> beam.Map(lambda s: tuple(json.loads(s))) | Deduplicate(cfg, prior=prior))
    (result.kept | "KeptKeys" >> beam.Map(lambda kv: json.dumps([kv[0], kv[1]["key"]]))
     | "AllKept" >> beam.combiners.ToList() | "WriteKept" >> beam.Map(write_json, "kept.jsonl"))
    (result.duplicates | "DupJson" >> beam.Map(lambda d: json.dumps(d, sort_keys=True))
     | "AllDups" >> beam.combiners.ToList() | "WriteDups" >> beam.Map(write_json, "duplicates.jsonl"))
    (result.outcome | "AllOutcomes" >> beam.combiners.ToList()
     | "WriteOutcomes" >> beam.Map(write_json, "outcome.jsonl"))
    (result.index | "OneIndex" >> beam.Map(lambda e: (0, e)) | "GroupIndex" >> beam.GroupByKey()
     | "WriteIndex" >> beam.MapTuple(write_index))
    pipeline.run().wait_until_finish()

    def read(name):
        path = out / name
        return [json.loads(line) for line in sorted(path.read_text().splitlines())] if path.exists() else []

    return {"kept": read("kept.jsonl"), "duplicates": read("duplicates.jsonl"), "outcome": read("outcome.jsonl"),
            "index": out / "index.arrow"}


# ---------------------------------------------------------------------------------------------- MinHash


def test_permutations_are_exact_modular_arithmetic():
    hasher = MinHasher(16, seed=5)
    rng = random.Random(1)
    xs = [0, 1, MERSENNE_61 - 1] + [rng.randrange(MERSENNE_61) for _ in range(300)]
    got = hasher.permute(np.array(xs, dtype=np.uint64))
    for i in range(16):
        a, b = int(hasher.a[i]), int(hasher.b[i, 0])
        assert [int(v) for v in got[i]] == [(a * x + b) % MERSENNE_61 for x in xs]


def test_shingle_hashes_do_not_depend_on_the_token_cache(monkeypatch):
    """The per-process token hash cache, emptied when full, gives the hashes computed from scratch: blake2b per
    token, rolling hash, mod 2^61 - 1, distinct and sorted."""
    import hashlib

    import preprocessing.minhash as dedup

    def plain(tokens: list[str], size: int) -> list[int]:
        codes = [int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little") for t in tokens]
        size = min(size, len(codes))
        shingles = set()
        for i in range(len(codes) - size + 1):
            h = 0
            for c in codes[i:i + size]:
                h = (h * 0x100000001B3 + c) % (1 << 64)
            shingles.add(h % MERSENNE_61)
        return sorted(shingles)

    rng = random.Random(6)
    vocab = [f"w{i}" for i in range(40)] + ["straße", "中", "ß", "x" * 30]
    monkeypatch.setattr(dedup, "_TOKEN_HASH_CACHE", {})
    monkeypatch.setattr(dedup, "_TOKEN_HASH_CACHE_SIZE", 16)  # emptied every few documents
    for _ in range(60):
        tokens = [rng.choice(vocab) for _ in range(rng.randint(1, 30))]
        assert [int(h) for h in shingle_hashes(tokens, 5)] == plain(tokens, 5)
        # bounded: the cap, or one document's own tokens where those alone exceed it
        assert len(dedup._TOKEN_HASH_CACHE) <= max(16, len(set(tokens)))


def test_signature_is_exact_where_permutations_come_near_zero():
    """Values x with (a_i x + b_i) mod p in 0..6: the folded form of such a value may be >= p, and the signature's
    per-chunk minimum must reduce it; chunk boundaries anywhere."""
    hasher = MinHasher(8, seed=3)
    rng = random.Random(4)
    xs = [rng.randrange(MERSENNE_61) for _ in range(40)]
    for i in range(8):
        a, b = int(hasher.a[i]), int(hasher.b[i, 0])
        xs += [((target - b) * pow(a, -1, MERSENNE_61)) % MERSENNE_61 for target in range(7)]
    xs = np.array(xs, dtype=np.uint64)
    exact = np.array([[(int(hasher.a[i]) * int(x) + int(hasher.b[i, 0])) % MERSENNE_61 for x in xs]
                      for i in range(8)], dtype=np.uint64)
    assert np.array_equal(hasher.permute(xs), exact)
    for chunk in (1, 5, 512):
        hasher.chunk = chunk
        for part in (slice(None), slice(0, 40), slice(40, None), slice(37, 52)):
            want = (exact[:, part].min(axis=1) >> np.uint64(29)).astype(np.uint32)
            assert np.array_equal(hasher.signature(xs[part]), want), (chunk, part)


def test_signature_estimates_the_jaccard_of_real_shingle_sets():
    title, paragraphs = articles(1)[0]
    text = normalise_for_dedup("\n".join(" ".join(p) for p in paragraphs))
    other = normalise_for_dedup("\n".join(" ".join(p) for p in edited(paragraphs, random.Random(3), every=40)))
    a, b = (shingle_hashes(tokenize(t), 5) for t in (text, other))
    true = len(np.intersect1d(a, b)) / len(np.union1d(a, b))
    hasher = MinHasher(512, seed=2)
    estimate = estimated_jaccard(hasher.signature(a), hasher.signature(b))
    assert 0.5 < true < 0.95
    assert abs(estimate - true) < 4 * math.sqrt(true * (1 - true) / 512)
    assert hasher.signature(np.zeros(0, dtype=np.uint64)) is None


def test_shingles_of_scripts_without_spaces_are_characters():
    assert len(shingle_hashes(tokenize("香港行政长官梁振英"), 5)) == 5  # 9 characters -> 5 five-character shingles
    assert len(shingle_hashes(tokenize("one two"), 5)) == 1  # shorter than a shingle: the whole text


def test_lsh_s_curve_matches_theory():
    """Pairs of synthetic shingle sets with known Jaccard s: the fraction that shares a band is 1 - (1 - s^r)^b."""
    cfg = DedupConfig()
    hasher = MinHasher(cfg.num_perm, cfg.seed)
    rng = np.random.default_rng(11)
    trials = 300
    for s in (0.5, 0.6, 0.7, 0.8, 0.9):
        union = 200
        common = round(s * union)
        hits = 0
        for _ in range(trials):
            values = rng.choice(MERSENNE_61, size=union, replace=False).astype(np.uint64)
            only = (union - common) // 2
            a = values[: common + only]
            b = np.concatenate([values[:common], values[common + only:]])
            true = common / union
            keys_a = set(band_keys(hasher.signature(a), cfg.bands, cfg.rows))
            keys_b = set(band_keys(hasher.signature(b), cfg.bands, cfg.rows))
            hits += bool(keys_a & keys_b)
        theory = lsh_candidate_probability(true, cfg.bands, cfg.rows)
        sigma = math.sqrt(theory * (1 - theory) / trials) + 1e-9
        measured = hits / trials
        print(f"s={true:.3f}: candidates {measured:.3f}, theory {theory:.3f}")
        assert abs(measured - theory) < 4 * sigma + 0.01


def test_config_validation():
    with pytest.raises(ValidationError, match="bands \\* rows must equal num_perm"):
        DedupConfig(num_perm=128, bands=10, rows=8)
    assert DedupConfig(num_perm=64, bands=8, rows=8).num_perm == 64


# ---------------------------------------------------------------------------------------------- Beam transform


def test_exact_duplicates_earliest_kept_whatever_the_order(tmp_path, no_prism):
    originals = articles(8)
    docs = [doc(title, paragraphs, source=1, ordinal=10 + i) for i, (title, paragraphs) in enumerate(originals)]
    # copies earlier in file order (source 0) and later (source 2): the source-0 copy must win
    docs.append(doc("copy-first", restyled(originals[0][1]), source=0, ordinal=5))
    docs.append(doc("copy-late", restyled(originals[1][1]), source=2, ordinal=0))
    docs.append(doc("copy-late-2", originals[1][1], source=1, ordinal=99))
    runs = []
    for seed in (0, 1):
        shuffled = list(docs)
        random.Random(seed).shuffle(shuffled)
        runs.append(run_dedup(shuffled, CFG, tmp_path / f"run{seed}"))
    assert runs[0]["kept"] == runs[1]["kept"] and runs[0]["duplicates"] == runs[1]["duplicates"]
    kept = {key for _, key in runs[0]["kept"]}
    assert kept == {"copy-first"} | {title for title, _ in originals[1:]}
    removed = {d["key"]: d for d in runs[0]["duplicates"]}
    assert set(removed) == {originals[0][0], "copy-late", "copy-late-2"}
    assert all(d["kind"] == "exact" and "jaccard" not in d for d in removed.values())
    assert removed[originals[0][0]]["duplicate_of"] == {"doc_id": hash64("doc", 0, "copy-first"), "source": 0,
                                                       "ordinal": 5, "key": "copy-first"}
    assert removed["copy-late"]["duplicate_of"]["key"] == originals[1][0]
    assert sorted(runs[0]["outcome"]) == [[1, "duplicate:exact"], [1, "duplicate:exact"], [2, "duplicate:exact"]]
    assert index_info(runs[0]["index"])["rows"] == len(kept)


def test_near_duplicates_found_and_unrelated_kept(tmp_path, no_prism):
    rng = random.Random(4)
    originals = articles(12)
    docs = [doc(title, paragraphs, ordinal=i) for i, (title, paragraphs) in enumerate(originals)]
    docs += [doc(f"edit of {title}", edited(paragraphs, rng), ordinal=100 + i)
             for i, (title, paragraphs) in enumerate(originals[:4])]
    result = run_dedup(docs, CFG, tmp_path / "run")
    assert {key for _, key in result["kept"]} == {title for title, _ in originals}
    removed = {d["key"]: d for d in result["duplicates"]}
    assert set(removed) == {f"edit of {title}" for title, _ in originals[:4]}
    for title, _ in originals[:4]:
        record = removed[f"edit of {title}"]
        assert record["kind"] == "near" and record["duplicate_of"]["key"] == title
        assert CFG.threshold <= record["jaccard"] < 1.0
    assert sorted(result["outcome"]) == [[0, "duplicate:near"]] * 4


def test_dedup_rate_on_a_set_with_known_duplicates(tmp_path, no_prism):
    rng = random.Random(9)
    originals = articles(40)
    docs = [doc(title, paragraphs, ordinal=i) for i, (title, paragraphs) in enumerate(originals)]
    exact_of = rng.sample(range(40), 10)
    near_of = rng.sample(range(40), 10)
    docs += [doc(f"exact {i}", restyled(originals[i][1]), source=1, ordinal=n) for n, i in enumerate(exact_of)]
    docs += [doc(f"near {i}", edited(originals[i][1], rng), source=2, ordinal=n) for n, i in enumerate(near_of)]
    result = run_dedup(docs, CFG, tmp_path / "run")
    kinds = [d["kind"] for d in result["duplicates"]]
    assert kinds.count("exact") == 10 and kinds.count("near") == 10
    rate = len(result["duplicates"]) / len(docs)
    print(f"dedup rate {rate:.3f} (20 of {len(docs)})")
    assert rate == pytest.approx(20 / 60)


def test_sentence_pairs_are_deduplicated_exactly(tmp_path, no_prism):
    def pair(key, src, tgt, ordinal):
        doc_id = hash64("pair", key)
        return doc_id, {"kind": "pair", "doc_id": doc_id, "source": 0, "ordinal": ordinal, "key": key,
                        "src": src, "tgt": tgt}

    docs = [pair("a", "Hello, world.", "Bonjour le monde.", 0), pair("b", "hello world", "bonjour le monde", 1),
            pair("c", "Hello world", "Salut le monde", 2)]
    result = run_dedup(docs, CFG, tmp_path / "run")
    assert [key for _, key in result["kept"]] == sorted(["a", "c"])
    assert [(d["key"], d["kind"], d["duplicate_of"]["key"]) for d in result["duplicates"]] == [("b", "exact", "a")]


def test_prior_index_wins_and_index_files_are_byte_identical(tmp_path, no_prism):
    rng = random.Random(2)
    originals = articles(10)
    first = [doc(title, paragraphs, ordinal=i) for i, (title, paragraphs) in enumerate(originals[:6])]
    v1 = run_dedup(first, CFG, tmp_path / "v1")
    again = run_dedup(list(reversed(first)), CFG, tmp_path / "v1-again")
    assert v1["index"].read_bytes() == again["index"].read_bytes()
    parent = merge_dedup_index([v1["index"]], None, tmp_path / "v1-merged.arrow", CFG)
    assert parent["rows"] == 6

    second = [doc(title, paragraphs, source=0, ordinal=i) for i, (title, paragraphs) in enumerate(originals[6:])]
    second.append(doc("old, restyled", restyled(originals[0][1]), source=0, ordinal=50))
    second.append(doc("old, edited", edited(originals[1][1], rng), source=0, ordinal=51))
    v2 = run_dedup(second, CFG, tmp_path / "v2", prior_path=tmp_path / "v1-merged.arrow")
    assert {key for _, key in v2["kept"]} == {title for title, _ in originals[6:]}
    removed = {d["key"]: d for d in v2["duplicates"]}
    assert removed["old, restyled"]["kind"] == "exact"
    assert removed["old, restyled"]["duplicate_of"] == {"doc_id": hash64("doc", 0, originals[0][0]), "prior": True}
    assert removed["old, edited"]["kind"] == "near" and removed["old, edited"]["duplicate_of"]["prior"] is True

    # v2's index = v1's + v2's kept documents, sorted by doc_id; the same bytes whatever the order of the parts
    one = merge_dedup_index([v2["index"]], tmp_path / "v1-merged.arrow", tmp_path / "v2-a.arrow", CFG)
    two = merge_dedup_index([v2["index"]], tmp_path / "v1-merged.arrow", tmp_path / "v2-b.arrow")
    assert one["rows"] == 10 and one["sha256"] == two["sha256"]
    import pyarrow as pa

    table = pa.ipc.open_file(pa.memory_map(str(tmp_path / "v2-a.arrow"))).read_all()
    ids = table.column("doc_id").to_pylist()
    assert ids == sorted(ids) and len(set(ids)) == 10


def test_prior_index_with_other_parameters_is_refused(tmp_path, no_prism):
    entries = [(1, 2, np.arange(64, dtype=np.uint32))]
    write_dedup_index(entries, tmp_path / "small.arrow", DedupConfig(num_perm=64, bands=8, rows=8))
    pipeline = beam.Pipeline(runner=FnApiRunner())
    prior = read_prior_index(pipeline, str(tmp_path / "small.arrow"))
    with pytest.raises(InputError, match=r"small\.arrow was built with num_perm=64, but dedup.num_perm is 128"):
        Deduplicate(CFG, prior=prior)
    write_dedup_index([(1, 2, np.arange(128, dtype=np.uint32))], tmp_path / "seed.arrow", DedupConfig(seed=7))
    with pytest.raises(InputError, match=r"seed\.arrow was built with seed=7"):
        Deduplicate(CFG, prior=read_prior_index(beam.Pipeline(runner=FnApiRunner()), str(tmp_path / "seed.arrow")))
    (tmp_path / "junk.arrow").write_bytes(b"not arrow")
    with pytest.raises(InputError, match=r"junk\.arrow is not a readable Arrow IPC file"):
        read_prior_index(beam.Pipeline(runner=FnApiRunner()), str(tmp_path / "junk.arrow"))
    with pytest.raises(InputError, match="does not exist"):
        index_info(tmp_path / "missing.arrow")
