"""One spelling per language, so that the code a source gives and the code language identification returns agree.

    from preprocessing.langcodes import normalise_lang_code
    normalise_lang_code("cmn_hans") == normalise_lang_code("zh-Hant") == normalise_lang_code("zho") == "zh"

Rule: take the primary subtag (`en-GB`, `de_1996`, `cmn_hans` -> `en`, `de`, `cmn`), lower-case it, map an ISO 639-2/3
code to its ISO 639-1 code where one exists (`eng` -> `en`; individual members of macrolanguages too: `cmn` ->
`zh`, `arb` -> `ar`, `pes` -> `fa`, `swh` -> `sw`), and fold the few codes that name the same language twice onto
the one py3langid uses (`nb`/`nob` -> `no`, `fil`/`tgl` -> `tl`, deprecated `iw`/`in`/`ji`/`jw`/`mo`). Codes without an
ISO 639-1 equivalent stay 3 letters (`yue`, `ace`, `kwi`). Anything that is not a language tag (2-3 letters, then
`-`/`_`-separated subtags) -> None.

The 3-letter table is CLDR's language aliases (as shipped in Babel 2.18, filtered to 639-2/3 -> 639-1), copied here
so that the mapping is fixed by this repository rather than by whichever Babel is installed.
"""

from __future__ import annotations

import re

# ISO 639-2 (T and B) and 639-3 individual/macrolanguage codes -> ISO 639-1 (CLDR language aliases).
_TO_639_1 = {
    "aar": "aa", "abk": "ab", "adp": "dz", "afr": "af", "aka": "ak", "alb": "sq", "als": "sq", "amh": "am",
    "ara": "ar", "arb": "ar", "arg": "an", "arm": "hy", "asm": "as", "ava": "av", "ave": "ae", "aym": "ay",
    "ayr": "ay", "aze": "az", "azj": "az", "bak": "ba", "bam": "bm", "baq": "eu", "bel": "be", "ben": "bn",
    "bis": "bi", "bod": "bo", "bos": "bs", "bre": "br", "bul": "bg", "bur": "my", "cat": "ca", "ces": "cs",
    "cha": "ch", "che": "ce", "chi": "zh", "chu": "cu", "chv": "cv", "cmn": "zh", "cor": "kw", "cos": "co",
    "cre": "cr", "cwd": "cr", "cym": "cy", "cze": "cs", "dan": "da", "deu": "de", "div": "dv", "drh": "mn",
    "dut": "nl", "dzo": "dz", "ekk": "et", "ell": "el", "eng": "en", "epo": "eo", "esk": "ik", "est": "et",
    "eus": "eu", "ewe": "ee", "fao": "fo", "fas": "fa", "fat": "ak", "fij": "fj", "fin": "fi", "fra": "fr",
    "fre": "fr", "fry": "fy", "fuc": "ff", "ful": "ff", "gaz": "om", "geo": "ka", "ger": "de", "gla": "gd",
    "gle": "ga", "glg": "gl", "glv": "gv", "gre": "el", "grn": "gn", "gug": "gn", "guj": "gu", "hat": "ht",
    "hau": "ha", "heb": "he", "her": "hz", "hin": "hi", "hmo": "ho", "hrv": "hr", "hun": "hu", "hye": "hy",
    "ibo": "ig", "ice": "is", "ido": "io", "iii": "ii", "ike": "iu", "iku": "iu", "ile": "ie", "ina": "ia",
    "ind": "id", "ipk": "ik", "isl": "is", "ita": "it", "jav": "jv", "jpn": "ja", "kal": "kl", "kan": "kn",
    "kas": "ks", "kat": "ka", "kau": "kr", "kaz": "kk", "khk": "mn", "khm": "km", "kik": "ki", "kin": "rw",
    "kir": "ky", "kmr": "ku", "knc": "kr", "kng": "kg", "kom": "kv", "kon": "kg", "kor": "ko", "kpv": "kv",
    "kua": "kj", "kur": "ku", "lao": "lo", "lat": "la", "lav": "lv", "lim": "li", "lin": "ln", "lit": "lt",
    "ltz": "lb", "lub": "lu", "lug": "lg", "lvs": "lv", "mac": "mk", "mah": "mh", "mal": "ml", "mao": "mi",
    "mar": "mr", "may": "ms", "mkd": "mk", "mlg": "mg", "mlt": "mt", "mol": "ro", "mon": "mn", "mri": "mi",
    "msa": "ms", "mya": "my", "nau": "na", "nav": "nv", "nbl": "nr", "nde": "nd", "ndo": "ng", "nep": "ne",
    "nld": "nl", "nno": "nn", "nob": "no", "nor": "no", "npi": "ne", "nya": "ny", "oci": "oc", "oji": "oj",
    "ojg": "oj", "ori": "or", "orm": "om", "ory": "or", "oss": "os", "pan": "pa", "pbu": "ps", "per": "fa",
    "pes": "fa", "pli": "pi", "plt": "mg", "pol": "pl", "por": "pt", "pus": "ps", "que": "qu", "quz": "qu",
    "roh": "rm", "ron": "ro", "rum": "ro", "run": "rn", "rus": "ru", "sag": "sg", "san": "sa", "scc": "sr",
    "scr": "hr", "sin": "si", "slk": "sk", "slo": "sk", "slv": "sl", "sme": "se", "smo": "sm", "sna": "sn",
    "snd": "sd", "som": "so", "sot": "st", "spa": "es", "sqi": "sq", "src": "sc", "srd": "sc", "srp": "sr",
    "ssw": "ss", "sun": "su", "swa": "sw", "swe": "sv", "swh": "sw", "tah": "ty", "tam": "ta", "tat": "tt",
    "tel": "te", "tgk": "tg", "tgl": "tl", "tha": "th", "tib": "bo", "tir": "ti", "ton": "to", "tsn": "tn",
    "tso": "ts", "tuk": "tk", "tur": "tr", "twi": "ak", "uig": "ug", "ukr": "uk", "urd": "ur", "uzb": "uz",
    "uzn": "uz", "ven": "ve", "vie": "vi", "vol": "vo", "wel": "cy", "wln": "wa", "wol": "wo", "xho": "xh",
    "ydd": "yi", "yid": "yi", "yor": "yo", "zha": "za", "zho": "zh", "zsm": "ms", "zul": "zu", "zyb": "za",
}
# Two codes for one language: keep the one py3langid's model uses, so sources and detection agree.
_SAME_LANGUAGE = {"nb": "no", "fil": "tl", "iw": "he", "in": "id", "ji": "yi", "jw": "jv", "mo": "ro"}

_TAG = re.compile(r"([A-Za-z]{2,3})(?:[-_][A-Za-z0-9]{1,8})*")


def normalise_lang_code(value: str | None) -> str | None:
    """The canonical code of a language tag or code (see the module docstring); None if it is not one."""
    if not value:
        return None
    tag = _TAG.fullmatch(value.strip())
    if tag is None:
        return None
    primary = tag.group(1).lower()
    primary = _TO_639_1.get(primary, primary)
    return _SAME_LANGUAGE.get(primary, primary)


# ISO 639-1 codes (the table's targets, and the folded ones' targets): what `is_listed_language` accepts
_LISTED = frozenset(_TO_639_1.values()) | frozenset(_SAME_LANGUAGE.values())


def is_listed_language(value: str | None) -> bool:
    """True when `value` normalises to an ISO 639-1 code of the table (`ar`, `eng`, `zh_Hans`): a stricter test than
    `normalise_lang_code(value) is not None`, which takes any 2-3 letters (`ok`, `oui`), for telling a header row of
    language codes from text."""
    return normalise_lang_code(value) in _LISTED


def normalise_lang_codes(given: list[str], *, empty: str, keep: tuple[str, ...] = ()) -> list[str]:
    """The canonical codes of a config's language list, each once, in the order given: the one validator of
    corpus.filters.languages and langid.languages. Codes in `keep` (e.g. "und") pass unchanged; ValueError for a
    value that is not a language code, and with `empty` as its message for an empty list."""
    codes: list[str] = []
    for value in given:
        code = value if value in keep else normalise_lang_code(value)
        if code is None:
            raise ValueError(f"{value!r} is not a language code")
        if code not in codes:
            codes.append(code)
    if not codes:
        raise ValueError(empty)
    return codes


__all__ = ["normalise_lang_code", "normalise_lang_codes", "is_listed_language"]
