"""Language identification of documents: ISO 639-1 code (or 639-3 where there is none) and a probability.

    from preprocessing.langid import LangIdConfig, LanguageIdentifier
    ident = LanguageIdentifier(LangIdConfig(max_chars=2000, min_probability=0.5))
    ident.detect("Tous les êtres humains naissent libres")        # ("fr", 0.99...)
    ident.detect_batch(texts)                                       # [(code, probability), ...]

    python -m preprocessing.langid FILE...                  # code and probability of each file's text
    python -m preprocessing.langid --backend cld2 FILE...   # the same with the CLD2 backend

Model: py3langid (0.4), the maintained fork of Lui & Baldwin's langid.py — a multinomial naive Bayes over byte
n-grams, 140 labels. Chosen because it is pure Python + numpy with its model inside the wheel (nothing to download
at run time, which matters on workers without network), deterministic (no threads, no sampling: same text, same
answer on every machine), and fast enough that detection is not the bottleneck of a pipeline that also extracts
HTML; fastText's lid.176 is more accurate on short texts but needs a native build and a separate model download,
CLD3 a native build. On whole documents the difference is small (see the accuracy below).

What is looked at: the first `max_chars` characters of the text (a document's language is settled long before its
end, and the cost is linear in the bytes read). Probabilities are py3langid's normalised ones (its naive-Bayes
scores scaled by 1/sqrt(text bytes), then a softmax), summed over the model labels that normalise to one code.
Codes go through `preprocessing.langcodes.normalise_lang_code`, the same function the source readers use, so a
source's `cmn_hans`/`zh-Hant` and the detector's `zh` agree (likewise nb/no, fil/tl, gug -> gn). Below
`min_probability`, or for text without any letters, the answer is ("und", probability). `languages` restricts the
candidates (e.g. to the languages a corpus is known to contain), which removes most confusions between close
languages (bs/hr/sr, ms/id, no/da).

Batches: each text's byte n-grams are counted by py3langid's automaton (a Python loop over bytes), then the
naive-Bayes products of the whole batch are one sparse matrix product over only the n-gram rows the batch uses. The
byte loop dominates: a batch runs at the speed of py3langid's own classify per text (measured 1.00x, ~2.8 MB/s of
UTF-8 on one core, 1,023 UDHR segments), so the ceiling is ~1,400 documents/s per core at max_chars 2000.
Accuracy on real text (tests/preprocessing/test_langid.py): the 372 UDHR segments (preamble + 30 articles) of 12
languages and the 23 newspaper4k gold articles in 8 languages, all languages as candidates.

`backend: cld2` swaps the model for CLD2 (pycld2, compiled C++; preprocessing/langid_cld2.py): ~6x less CPU per MB
at the same accuracy on the same texts (benchmarks/compiled_libs.py, docs/compiled_libraries.md), different
probabilities (CLD2's share of the text in each language). The default stays py3langid, so that the shards of an
existing recipe do not change; CLD2 is the choice for web corpora of short documents, where language ID reads most
of the text.
"""

from __future__ import annotations

import math
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from bertfactory.config import StrictModel
from bertfactory.errors import ConfigError

from .langcodes import normalise_lang_code, normalise_lang_codes

UNDETERMINED = "und"


class LangIdConfig(StrictModel):
    """Language identification of documents whose source gives no language."""

    backend: Literal["py3langid", "cld2"] = Field(
        "py3langid", description="py3langid (naive Bayes over byte n-grams, numpy; the default) or cld2 (CLD2 via "
        "pycld2, compiled: ~6x less CPU per MB at the same accuracy, docs/compiled_libraries.md)")
    max_chars: int = Field(2000, ge=1, description="how many characters from the start of a document are looked at")
    min_probability: float = Field(0.5, ge=0.0, le=1.0, description="below this probability the language is 'und'")
    languages: list[str] | None = Field(None, description="restrict the candidates to these codes (normalised: "
                                        "eng -> en, cmn -> zh); null = all 140 of the model")

    @field_validator("languages")
    @classmethod
    def _codes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        return normalise_lang_codes(value, empty="an empty list leaves no candidate; use null for all languages")


def _model():
    """py3langid's model (its LanguageIdentifier, normalised probabilities). The wheel ships it LZMA-compressed
    (4.4 MB -> 65 MiB): decompressing costs ~0.35 CPU-s in every process that detects languages (each Beam worker
    of each job, or the driver of a small job), more than a small job's detection itself. So the decompressed npz is
    kept in $BERTFACTORY_CACHE/langid/, named by the compressed file's sha256, and read from there (~0.03 s); the
    arrays, and so every answer, are the same. Where that cache cannot be written, the model is decompressed as
    py3langid does."""
    from py3langid.langid import MODEL_DIR, MODEL_FILE
    from py3langid.langid import LanguageIdentifier as _Py3LangId

    try:
        cached = _decompressed_model(MODEL_DIR / MODEL_FILE)
    except OSError:
        return _Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    from py3langid.modelio import _to_array

    # what py3langid's from_model_file / load_model build from the same arrays
    with np.load(cached, allow_pickle=False) as data:
        return _Py3LangId(np.asarray(data["ptc"]), np.asarray(data["pc"]), data["classes"].tolist(),
                          _to_array(data["nextmove"]), data["out_feat"].tolist(), norm_probs=True,
                          tk_row=_to_array(data["nextmove_row"]))


def _decompressed_model(compressed: Path) -> Path:
    """The cached decompressed copy of py3langid's model file, written (atomically) on first use."""
    import lzma
    import shutil

    from bertfactory.io import AtomicFile, sha256_file
    from bertfactory.samples import cache_dir

    path = cache_dir() / "langid" / f"py3langid-{sha256_file(compressed)[:16]}.npz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with AtomicFile(path) as tmp, lzma.open(compressed) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, length=1 << 20)
    return path


def _has_letter(text: str) -> bool:
    return any(c.isalpha() for c in text)


def _encode(text: str) -> bytes:
    # what py3langid does to a str before counting n-grams (so the scores are its scores)
    if text.isupper():
        text = text.lower()
    return unicodedata.normalize("NFC", text).encode("utf-8", errors="surrogatepass")


class LanguageIdentifier:
    """Detects the language of texts with py3langid's model (see the module docstring)."""

    def __init__(self, cfg: LangIdConfig | None = None):
        from py3langid.langid import visit_counts

        self.cfg = cfg or LangIdConfig()
        self._cld2 = None
        if self.cfg.backend == "cld2":
            from .langid_cld2 import Cld2Identifier

            self._cld2 = Cld2Identifier(self.cfg.max_chars, self.cfg.min_probability, self.cfg.languages)
            self.codes = self._cld2.codes
            return
        model = _model()
        self._visit_counts = visit_counts
        self._nextmove, self._output = model.tk_nextmove, model.tk_output
        self._rowbase = [r << 8 for r in model.tk_row]
        labels = [normalise_lang_code(label) or label for label in model.nb_classes]
        columns = list(range(len(labels)))
        if self.cfg.languages is not None:
            unknown = [code for code in self.cfg.languages if code not in labels]
            if unknown:
                raise ConfigError(f"langid.languages: {', '.join(unknown)} not known to the py3langid model; known: "
                                  f"{', '.join(sorted(set(labels)))}")
            columns = [i for i, code in enumerate(labels) if code in self.cfg.languages]
        self._table = model.nb_ptc[:, columns]  # float16 (n-grams x labels); rows are gathered per batch
        self._prior = np.asarray(model.nb_pc[columns], dtype=np.float32)
        # model labels -> output codes: several labels can share one (script variants, nb/no ...): probabilities add
        self.codes = sorted({labels[i] for i in columns})
        index = {code: k for k, code in enumerate(self.codes)}
        self._merge = np.zeros((len(columns), len(self.codes)), dtype=np.float64)
        for j, i in enumerate(columns):
            self._merge[j, index[labels[i]]] = 1.0

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), len(self.codes)) probabilities; an all-zero row for text without any known n-gram."""
        if self._cld2 is not None:
            return self._cld2.probabilities(texts)
        from scipy.sparse import csr_matrix

        rows, feats, weights, lengths = [], [], [], []
        for row, text in enumerate(texts):
            data = _encode(text[: self.cfg.max_chars])
            lengths.append(len(data))
            counts = self._visit_counts(self._nextmove, self._rowbase, self._output, data) if data else None
            if counts:
                keys = sorted(counts)  # a fixed order, so the float sums are the same on every run
                rows.extend([row] * len(keys))
                feats.extend(keys)
                weights.extend(counts[k] for k in keys)
        out = np.zeros((len(texts), len(self.codes)), dtype=np.float64)
        if not rows:
            return out
        used, local = np.unique(np.asarray(feats, dtype=np.int64), return_inverse=True)
        counts = csr_matrix((np.log1p(np.asarray(weights, dtype=np.float32)), (np.asarray(rows), local)),
                            shape=(len(texts), len(used)), dtype=np.float32)
        scores = np.asarray(counts @ self._table[used].astype(np.float32)) + self._prior
        has_features = np.zeros(len(texts), dtype=bool)
        has_features[np.unique(rows)] = True
        scale = np.asarray([1.0 / math.sqrt(n or 1) for n in lengths], dtype=np.float32)[:, None]
        scores = scores * scale
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs = (scores / scores.sum(axis=1, keepdims=True)).astype(np.float64) @ self._merge
        out[has_features] = probs[has_features]
        return out

    def detect_batch(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(code, probability) per text; ("und", p) below min_probability or without any letters."""
        if self._cld2 is not None:
            return self._cld2.detect_batch(texts)
        probs = self.probabilities(texts)
        best = probs.argmax(axis=1)
        results = []
        for row, k in enumerate(best):
            p = float(probs[row, k])
            # digits, punctuation and symbols have n-grams too: among few candidates `12:30 - 13:45` scored `de`
            # 0.53 (en, de); text without a letter has no language
            known = p >= self.cfg.min_probability and p > 0 and _has_letter(texts[row][: self.cfg.max_chars])
            results.append((self.codes[k] if known else UNDETERMINED, p))
        return results

    def detect(self, text: str) -> tuple[str, float]:
        return self.detect_batch([text])[0]


def _main(args: list[str]) -> int:
    backend = "py3langid"
    if args[:1] == ["--backend"] and len(args) > 1:
        backend, args = args[1], args[2:]
    ident = LanguageIdentifier(LangIdConfig(backend=backend))
    paths = args
    texts = [open(p, encoding="utf-8", errors="replace").read() for p in paths]
    for path, (code, p) in zip(paths, ident.detect_batch(texts)):
        print(f"{code}\t{p:.3f}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

__all__ = ["LangIdConfig", "LanguageIdentifier", "UNDETERMINED"]
