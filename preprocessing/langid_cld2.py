"""Language identification with CLD2 (pycld2, compiled C++): the `backend: cld2` of preprocessing.langid.

    from preprocessing.langid import LangIdConfig, LanguageIdentifier
    LanguageIdentifier(LangIdConfig(backend="cld2")).detect("Tous les êtres humains naissent libres")  # ("fr", 0.99)

    python -m preprocessing.langid --backend cld2 FILE...     # code and probability of each file's text

Why it is offered: on the same 551 real texts (benchmarks/compiled_libs.py, docs/compiled_libraries.md) it takes
~6x less CPU than the py3langid backend per MB (0.059 vs 0.35 CPU-s/MB on one core; pycld2 alone 0.033, the rest
is the character clean-up below) at the same accuracy (0.998 vs 0.996 on the 547 texts whose language is known)
and agrees with it on 99.5 % of the labels; the model is compiled into the wheel (nothing to load or download: no
per-process model cost either). Deterministic: a pure function of the text, no threads, no sampling.

What a probability means here: CLD2 reports, for up to three languages, the percentage of the text's letters in
that language; that share / 100 is the probability (so a text half French, half English gives about 0.5 each and,
below `min_probability`, "und"). CLD2's codes go through `preprocessing.langcodes.normalise_lang_code` as the other
backend's do (iw -> he, zh-Hant -> zh); its "un" and "xx-<script>" (a script without a language model) are "und".
`languages` keeps the best of CLD2's three languages that is a candidate ("und" when none is): CLD2 itself cannot
restrict its candidates. Characters CLD2 rejects as invalid UTF-8 although they are valid (C0/C1 controls other
than tab, newline, form feed and carriage return; noncharacters such as U+FFFE; lone surrogates) are read as
spaces: they carry no language.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from bertfactory.errors import ConfigError

from .langcodes import normalise_lang_code

UNDETERMINED = "und"

# every code point pycld2 0.42 refuses (found by trying all 1.1 M of them), plus the surrogates Python may hold
_REFUSED = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef"
                      + "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
                      + "]")


@functools.lru_cache(maxsize=None)  # CLD2 has ~300 codes; normalising one costs more than detecting a short text
def _code_of(cld2_code: str) -> str:
    if cld2_code in ("un", "") or cld2_code.startswith("xx"):
        return UNDETERMINED
    return normalise_lang_code(cld2_code) or cld2_code


class Cld2Identifier:
    """Detects languages with CLD2 (see the module docstring); the interface of preprocessing.langid's
    LanguageIdentifier (`codes`, `probabilities`, `detect_batch`, `detect`)."""

    def __init__(self, max_chars: int, min_probability: float, languages: Sequence[str] | None):
        import pycld2

        self._detect = pycld2.detect
        self.max_chars, self.min_probability = max_chars, min_probability
        known = sorted({code for code in (_code_of(c) for _, c in pycld2.LANGUAGES) if code != UNDETERMINED})
        if languages is not None:
            unknown = [code for code in languages if code not in known]
            if unknown:
                raise ConfigError(f"langid.languages: {', '.join(unknown)} not known to CLD2 (backend cld2); known: "
                                  f"{', '.join(known)}")
            known = sorted(languages)
        self.codes = known
        self._index = {code: k for k, code in enumerate(self.codes)}

    def _shares(self, text: str) -> list[tuple[str, float]]:
        """(code, share of the text) for CLD2's languages of this text, best first, candidates only."""
        _, _, details = self._detect(_REFUSED.sub(" ", text[: self.max_chars]), bestEffort=True)
        shares: dict[str, float] = {}
        for _, cld2_code, percent, _ in details:
            if percent <= 0:
                break  # CLD2 lists its languages best first and pads the three with ("Unknown", "un", 0, 0.0)
            code = _code_of(cld2_code)
            if code in self._index:
                shares[code] = shares.get(code, 0.0) + percent / 100.0  # two labels of one code (zh, zh-Hant) add up
        return sorted(shares.items(), key=lambda item: (-item[1], item[0]))

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), len(self.codes)) shares; an all-zero row for text CLD2 finds no language in."""
        out = np.zeros((len(texts), len(self.codes)), dtype=np.float64)
        for row, text in enumerate(texts):
            for code, share in self._shares(text):
                out[row, self._index[code]] = share
        return out

    def detect_batch(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(code, probability) per text; ("und", p) below min_probability or when CLD2 finds no language."""
        results = []
        for text in texts:
            shares = self._shares(text)
            code, p = shares[0] if shares else (UNDETERMINED, 0.0)
            results.append((code if p >= self.min_probability and p > 0 else UNDETERMINED, p))
        return results

    def detect(self, text: str) -> tuple[str, float]:
        return self.detect_batch([text])[0]


__all__ = ["Cld2Identifier"]
