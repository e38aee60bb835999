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
- plural entries (msgid_plural): msgid <-> msgstr[0] (plural_form 0, key of msgid) and msgid_plural <-> msgstr[1]
  (plural_form 1, key of msgid_plural) — English has exactly these two forms, and forms 0/1 are the singular and
  the first plural in every language with two or more; forms 2.. (Russian, Arabic, ... "few"/"many") have no English
  counterpart -> Dropped(extra_plural_form) each. A language with one form (ja, ko, zh, th) gives only the msgid
  pair. A plural form left empty -> Dropped(untranslated).

polib reads the whole catalogue into memory (catalogues are kilobytes to a few megabytes); a file polib cannot
parse raises InputError naming the file and polib's message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from bertfactory.errors import InputError

from ..langcodes import normalise_lang_code
from ..records import Dropped, SentencePair
from .lines import open_input

_LOCALE_PATH = re.compile(r"(?:^|/)locale/([^/]+)/LC_MESSAGES/")
_CONTEXT_SEPARATOR = "\x04"


def load_catalogue(path: str | Path, name: str):
    """The polib.POFile of `path` (local or fsspec URL, optionally compressed)."""
    import polib

    with open_input(path, name) as stream:
        data = stream.read()
    try:
        # polib detects the charset from the header when given text; decoding as UTF-8 first would break latin-1
        # catalogues, so hand it the bytes' text via its own detection
        text = data.decode(polib.detect_encoding(data.decode("latin-1"), binary_mode=False) or "utf-8")
        return polib.pofile(text, wrapwidth=0)
    except (OSError, ValueError, LookupError) as e:
        raise InputError(f"{name}: not a gettext .po file polib can read ({e})") from None


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


def po_pairs(path: str | Path, source: int, name: str, options) -> Iterator[SentencePair | Dropped]:
    catalogue = load_catalogue(path, name)
    src_lang = options.src_lang or "en"
    tgt_lang = _target_language(catalogue, path, name, options.tgt_lang)
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
            english = (entry.msgid, entry.msgid_plural)[index] if index < 2 else None
            if english is None:
                yield Dropped(source, ordinal, "extra_plural_form")
            elif not forms[index]:
                yield Dropped(source, ordinal, "untranslated")
            else:
                yield pair(english, forms[index], entry.msgctxt, index)
            ordinal += 1


__all__ = ["po_pairs", "load_catalogue"]
