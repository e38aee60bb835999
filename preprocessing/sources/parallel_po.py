"""gettext `.po` catalogues -> `SentencePair`s (English msgid <-> translated msgstr), read with polib.

    from preprocessing.sources.parallel import iter_records, ParallelOptions
    for rec in iter_records("locale/fr/LC_MESSAGES/django.po", 0, ParallelOptions()): ...

Languages: source = options.src_lang, else `en` (gettext msgids are English by convention); target =
options.tgt_lang, else the catalogue's `Language` header, else the path `.../locale/<lang>/LC_MESSAGES/...`, both
normalised (`zh_CN`, `zh_Hans` -> `zh`); none of these -> InputError.

Entries in file order; what each becomes:
- `SentencePair(src_text=msgid, tgt_text=msgstr, key=msgctxt + "\\x04" + msgid)` (gettext's own context separator;
  just msgid without a context), meta {"format": "po", "msgctxt", "plural_form"}.
- obsolete (`#~`) -> Dropped(obsolete); fuzzy (`#, fuzzy`: a guess awaiting review) -> Dropped(fuzzy);
  empty msgstr -> Dropped(untranslated). Checked in that order, one record per entry.
- plural entries (msgid_plural): English has two forms, so msgid <-> the catalogue's form for n = 1 (key of msgid)
  and msgid_plural <-> its form for n = 2 (key of msgid_plural), the forms' indices worked out from the
  `Plural-Forms` header's expression (`plural=...`, evaluated as gettext does); meta plural_form is the index.
  Index 0/1 are not singular/plural everywhere: Arabic's form 0 is n = 0 and its singular form 1, Spanish's form 1
  is for millions and its ordinary plural form 2, Slovenian's singular is form 1. Without a header (or with one
  gettext cannot evaluate) the forms are 0 and 1. The other forms (Russian, Arabic, ... "few"/"many"/"zero") have
  no English counterpart -> Dropped(extra_plural_form) each. A language with one form (ja, ko, zh, th: n = 1 and
  n = 2 share it) gives only the msgid pair. A plural form left empty -> Dropped(untranslated).

polib reads the whole catalogue into memory (catalogues are kilobytes to a few megabytes); a file polib cannot
parse raises InputError naming the file and polib's message, and so does a string not closed on its line (which
polib would read as a different string: InputError naming the file and line).
"""

from __future__ import annotations

import gettext
import re
from collections.abc import Iterator
from pathlib import Path

from bertfactory.errors import InputError

from ..langcodes import normalise_lang_code
from ..records import Dropped, SentencePair
from .lines import open_input

_LOCALE_PATH = re.compile(r"(?:^|/)locale/([^/]+)/LC_MESSAGES/")
_CONTEXT_SEPARATOR = "\x04"
# a keyword line or a continuation line (comments, including obsolete `#~` entries, are not checked)
_STRING_LINE = re.compile(r'^\s*(?:(?:msgctxt|msgid|msgid_plural|msgstr|msgstr\[\d+\])\s+)?(".*)$')
_QUOTED = re.compile(r'(?:"(?:[^"\\]|\\.)*"\s*)+')
_PLURAL_RULE = re.compile(r"\bplural\s*=\s*([^;]+)")


def load_catalogue(path: str | Path, name: str):
    """The polib.POFile of `path` (local or fsspec URL, optionally compressed)."""
    import polib

    with open_input(path, name) as stream:
        data = stream.read()
    try:
        # polib detects the charset from the header when given text; decoding as UTF-8 first would break latin-1
        # catalogues, so hand it the bytes' text via its own detection
        text = data.decode(polib.detect_encoding(data.decode("latin-1"), binary_mode=False) or "utf-8")
        _check_strings(text, name)
        return polib.pofile(text, wrapwidth=0)
    except (OSError, ValueError, LookupError) as e:
        raise InputError(f"{name}: not a gettext .po file polib can read ({e})") from None


def _check_strings(text: str, name: str) -> None:
    """InputError naming the line of a keyword or continuation line whose string is not closed on it. polib reads
    `msgid "Bad` (no closing quote) as the string 'Ba' and a broken `msgstr "B` followed by `"C"` as 'C', with no
    error: a pair that is not in the file. msgfmt refuses both ("end-of-line within string")."""
    for number, line in enumerate(text.splitlines(), 1):
        m = _STRING_LINE.match(line)
        if m and not _QUOTED.fullmatch(m.group(1)):
            raise InputError(f"{name}:{number}: a string not closed on its line ({line.strip()[:80]!r}); not a valid "
                             "gettext .po file (msgfmt: end-of-line within string)")


def _target_language(catalogue, path: str | Path, name: str, override: str | None) -> str:
    if override:
        return override
    header = normalise_lang_code(catalogue.metadata.get("Language", ""))
    if header:
        return header
    m = _LOCALE_PATH.search(str(path).replace("\\", "/"))
    from_path = normalise_lang_code(m.group(1)) if m else None
    if from_path:
        return from_path
    raise InputError(f"{name}: cannot tell the target language: no Language header and the path is not "
                     f".../locale/<lang>/LC_MESSAGES/...; set tgt_lang")


def plural_indices(catalogue) -> tuple[int, int]:
    """(index of the form for n = 1, index of the form for n = 2) by the catalogue's Plural-Forms expression; (0, 1)
    when there is none gettext can evaluate."""
    m = _PLURAL_RULE.search(catalogue.metadata.get("Plural-Forms", ""))
    if m:
        try:
            rule = gettext.c2py(m.group(1).strip())
            return int(rule(1)), int(rule(2))
        except (ValueError, TypeError, ArithmeticError, RecursionError):
            pass
    return 0, 1


def po_pairs(path: str | Path, source: int, name: str, options) -> Iterator[SentencePair | Dropped]:
    catalogue = load_catalogue(path, name)
    src_lang = options.src_lang or "en"
    tgt_lang = _target_language(catalogue, path, name, options.tgt_lang)
    singular, plural = plural_indices(catalogue)
    ordinal = 0

    def pair(src: str, tgt: str, context: str | None, plural_form: int | None) -> SentencePair:
        key = f"{context}{_CONTEXT_SEPARATOR}{src}" if context is not None else src
        return SentencePair(source=source, ordinal=ordinal, key=key, src_text=src, tgt_text=tgt, src_lang=src_lang,
                            tgt_lang=tgt_lang, meta={"format": "po", "msgctxt": context, "plural_form": plural_form})

    for entry in catalogue:
        if entry.obsolete or entry.fuzzy:
            yield Dropped(source, ordinal, "obsolete" if entry.obsolete else "fuzzy")
            ordinal += 1
            continue
        if not entry.msgid_plural:
            yield pair(entry.msgid, entry.msgstr, entry.msgctxt, None) if entry.msgstr else \
                Dropped(source, ordinal, "untranslated")
            ordinal += 1
            continue
        forms = entry.msgstr_plural
        if not any(forms.values()):
            yield Dropped(source, ordinal, "untranslated")
            ordinal += 1
            continue
        for index in sorted(forms):
            english = (entry.msgid if index == singular else
                       entry.msgid_plural if index == plural and plural != singular else None)
            if english is None:
                yield Dropped(source, ordinal, "extra_plural_form")
            elif not forms[index]:
                yield Dropped(source, ordinal, "untranslated")
            else:
                yield pair(english, forms[index], entry.msgctxt, index)
            ordinal += 1


__all__ = ["po_pairs", "load_catalogue"]
