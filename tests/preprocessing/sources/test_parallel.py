"""Parallel reader: Django's real gettext catalogues, the real UDHR declarations (31 segments per language), TSV
and Moses files written by the test from those real pairs, and every kind of bad input."""

from __future__ import annotations

import gzip
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from bertfactory.errors import InputError
from bertfactory.samples import sample_dir, sample_path
from preprocessing.records import Dropped, Quarantined, SentencePair
from preprocessing.sources.parallel import ParallelOptions, detect_format, iter_records, validate_file

UDHR_LANGS = {"fra": "fr", "deu_1996": "de", "rus": "ru", "cmn_hans": "zh", "jpn": "ja", "kor": "ko", "arb": "ar",
              "hin": "hi", "tha": "th", "spa": "es", "mya": "my"}


def by_kind(records) -> Counter:
    return Counter(type(r).__name__ + ("" if isinstance(r, SentencePair) else ":" + r.reason) for r in records)


def po(lang: str) -> Path:
    return sample_path("django_po", f"locale/{lang}/LC_MESSAGES/django.po")


def udhr(code: str) -> Path:
    return sample_path("udhr", f"{code}.html")


# ---------------------------------------------------------------------------------------------------- gettext


def test_django_catalogues_give_english_to_translation_pairs():
    french = list(iter_records(po("fr"), source=2))
    # 348 entries, 15 of them plural with three French forms: 333 + 15 x 2 pairs, the 15 third forms dropped
    assert by_kind(french) == Counter({"SentencePair": 363, "Dropped:extra_plural_form": 15})
    assert [r.ordinal for r in french] == list(range(378))
    pairs = {r.key: r for r in french if isinstance(r, SentencePair)}
    assert pairs["Bulgarian"].tgt_text == "Bulgare"
    assert (pairs["Bulgarian"].src_lang, pairs["Bulgarian"].tgt_lang, pairs["Bulgarian"].source) == ("en", "fr", 2)
    assert pairs["abbrev. month\x04Jan."].tgt_text == "jan." and pairs["abbrev. month\x04Jan."].src_text == "Jan."
    singular = pairs["Ensure this value has at least %(limit_value)d character (it has %(show_value)d)."]
    plural = pairs["Ensure this value has at least %(limit_value)d characters (it has %(show_value)d)."]
    assert "caractère " in singular.tgt_text and "caractères " in plural.tgt_text
    assert (singular.meta["plural_form"], plural.meta["plural_form"]) == (0, 1)
    # zh_Hans's header says zh_CN; one-form languages give the msgid pair only
    chinese = list(iter_records(po("zh_Hans"), 0))
    assert by_kind(chinese) == Counter({"SentencePair": 347, "Dropped:untranslated": 1})
    assert {r.tgt_lang for r in chinese if isinstance(r, SentencePair)} == {"zh"}
    assert by_kind(iter_records(po("hi"), 0))["Dropped:untranslated"] == 87
    assert by_kind(iter_records(po("ar"), 0))["Dropped:extra_plural_form"] == 15 * 4  # six Arabic forms


def test_plural_entries_pair_english_with_the_forms_for_one_and_two():
    """Forms 0/1 are not singular/plural in every language: the Plural-Forms rule says which form n=1 and n=2 take
    (Arabic: 0 is zero, 1 the singular, 2 the dual; Spanish: 1 is for millions, 2 the ordinary plural)."""
    import polib

    for lang, one, two in (("ar", 1, 2), ("es", 0, 2), ("fr", 0, 1), ("ru", 0, 1)):
        catalogue = polib.pofile(str(po(lang)))
        entry = next(e for e in catalogue if e.msgid == "Ensure that there are no more than %(max)s digit in total.")
        pairs = {r.key: r for r in iter_records(po(lang), 0) if isinstance(r, SentencePair)}
        singular, plural = pairs[entry.msgid], pairs[entry.msgid_plural]
        assert (singular.meta["plural_form"], plural.meta["plural_form"]) == (one, two), lang
        assert (singular.tgt_text, plural.tgt_text) == (entry.msgstr_plural[one], entry.msgstr_plural[two]), lang
    # the Arabic singular is the one-digit sentence, not form 0 (n = 0, "أرقام" digits)
    arabic = {r.key: r for r in iter_records(po("ar"), 0) if isinstance(r, SentencePair)}
    assert "رقم %(max)s" in arabic["Ensure that there are no more than %(max)s digit in total."].tgt_text


def test_plural_forms_of_a_catalogue_without_a_usable_rule_are_0_and_1(tmp_path):
    entry = 'msgid "%(n)d file"\nmsgid_plural "%(n)d files"\nmsgstr[0] "A"\nmsgstr[1] "B"\nmsgstr[2] "C"\n'
    for header in ("", '"Plural-Forms: nplurals=3; plural=n ==;\\n"\n'):
        path = tmp_path / "x.po"
        path.write_text(f'msgid ""\nmsgstr ""\n"Language: sl\\n"\n{header}\n{entry}', encoding="utf-8")
        assert [(r.src_text, r.tgt_text) if isinstance(r, SentencePair) else r.reason for r in iter_records(path, 0)] \
            == [("%(n)d file", "A"), ("%(n)d files", "B"), "extra_plural_form"]
    # Slovenian: form 1 is the singular, 2 the dual (n = 2), 0 the general plural
    rule = "nplurals=4; plural=(n%100==1 ? 1 : n%100==2 ? 2 : n%100==3 || n%100==4 ? 3 : 0);"
    path.write_text(f'msgid ""\nmsgstr ""\n"Language: sl\\n"\n"Plural-Forms: {rule}\\n"\n\n{entry}msgstr[3] "D"\n',
                    encoding="utf-8")
    assert [(r.src_text, r.tgt_text) if isinstance(r, SentencePair) else r.reason for r in iter_records(path, 0)] \
        == ["extra_plural_form", ("%(n)d file", "B"), ("%(n)d files", "C"), "extra_plural_form"]


PO_HEADER = '''msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=4; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<12 || n%100>14) ? 1 : 2);\\n"
{language}
'''

PO_ENTRIES = '''
msgid "Save"
msgstr "Сохранить"

#, fuzzy
msgid "Delete"
msgstr "Удалить?"

msgid "Cancel"
msgstr ""

msgctxt "month name"
msgid "May"
msgstr "Май"

msgid "%(count)d file"
msgid_plural "%(count)d files"
msgstr[0] "%(count)d файл"
msgstr[1] "%(count)d файла"
msgstr[2] "%(count)d файлов"
msgstr[3] "%(count)d файла"

msgid "%(count)d day"
msgid_plural "%(count)d days"
msgstr[0] "%(count)d день"
msgstr[1] ""
msgstr[2] ""
msgstr[3] ""

#~ msgid "Old"
#~ msgstr "Старый"
'''


def test_po_written_by_the_test_fuzzy_plural_obsolete_context(tmp_path):
    path = tmp_path / "app.po"
    path.write_text(PO_HEADER.format(language='"Language: ru\\n"') + PO_ENTRIES, encoding="utf-8")
    validate_file(path)
    records = list(iter_records(path, 0))
    assert [type(r).__name__ + ":" + (r.key if isinstance(r, SentencePair) else r.reason) for r in records] == [
        "SentencePair:Save", "Dropped:fuzzy", "Dropped:untranslated", "SentencePair:month name\x04May",
        "SentencePair:%(count)d file", "SentencePair:%(count)d files", "Dropped:extra_plural_form",
        "Dropped:extra_plural_form", "SentencePair:%(count)d day", "Dropped:untranslated",
        "Dropped:extra_plural_form", "Dropped:extra_plural_form", "Dropped:obsolete"]
    assert records[5].tgt_text == "%(count)d файла" and records[5].src_text == "%(count)d files"
    assert records[3].meta == {"format": "po", "msgctxt": "month name", "plural_form": None}
    assert records[0].tgt_lang == "ru"


def test_po_language_from_the_locale_path_and_errors(tmp_path):
    nested = tmp_path / "locale" / "pt_BR" / "LC_MESSAGES" / "app.po"
    nested.parent.mkdir(parents=True)
    nested.write_text(PO_HEADER.format(language="") + PO_ENTRIES, encoding="utf-8")
    assert {r.tgt_lang for r in iter_records(nested, 0) if isinstance(r, SentencePair)} == {"pt"}
    assert {r.tgt_lang for r in iter_records(nested, 0, ParallelOptions(tgt_lang="pt-PT"))
            if isinstance(r, SentencePair)} == {"pt"}
    bare = tmp_path / "app.po"
    bare.write_text(PO_HEADER.format(language="") + PO_ENTRIES, encoding="utf-8")
    with pytest.raises(InputError, match=r"app\.po: cannot tell the target language"):
        list(iter_records(bare, 0))
    broken = tmp_path / "broken.po"
    broken.write_text('msgid "Save"\nmsgstr "Enregistrer"\nthis is not gettext\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.po: not a gettext \.po file polib can read \(Syntax error"):
        validate_file(broken)


def test_po_string_not_closed_on_its_line_names_file_and_line(tmp_path):
    """polib reads `msgid "Bad` as 'Ba' and `msgstr "B` + `"C"` as 'C' without a word: pairs not in the file."""
    head = PO_HEADER.format(language='"Language: ru\\n"') + '\nmsgid "Save"\nmsgstr "Сохранить"\n\n'
    for body, shown in (('msgid "Bad\nmsgstr "x"\n', 'msgid "Bad'), ('msgid "A"\nmsgstr "B\n"C"\n', 'msgstr "B'),
                        ('msgid "A"\nmsgstr ""\n"end \\"quoted\\"\n', '"end \\"quoted\\"')):
        path = tmp_path / "app.po"
        path.write_text(head + body, encoding="utf-8")
        line = (head + body).splitlines().index(shown) + 1
        shown = re.escape(repr(shown))
        with pytest.raises(InputError, match=rf"app\.po:{line}: a string not closed on its line \({shown}\)"):
            validate_file(path)
        with pytest.raises(InputError, match=rf"app\.po:{line}: "):
            list(iter_records(path, 0))
    # escaped quotes and backslashes, obsolete and previous-msgid comments are fine
    path.write_text(head + 'msgid "a \\"b\\""\n"c"\nmsgstr ""\n"x\\\\" \n\n#~ msgid "old\n#| msgid "prev\n',
                    encoding="utf-8")
    assert [(r.src_text, r.tgt_text) for r in iter_records(path, 0) if isinstance(r, SentencePair)] == [
        ("Save", "Сохранить"), ('a "b"c', "x\\")]


# ------------------------------------------------------------------------------------------------------- UDHR


@pytest.mark.parametrize("code", sorted(UDHR_LANGS))
def test_udhr_declarations_align_article_by_article_with_english(code):
    records = list(iter_records(udhr(code), source=1))
    assert len(records) == 31 and all(isinstance(r, SentencePair) for r in records)
    assert [r.key for r in records] == ["preamble"] + [f"article {n}" for n in range(1, 31)]
    assert {(r.src_lang, r.tgt_lang) for r in records} == {("en", UDHR_LANGS[code])}
    assert records[1].src_text.startswith("All human beings are born free and equal in dignity and rights.")
    assert records[0].src_text.startswith("Whereas recognition of the inherent dignity")
    assert records[0].meta == {"format": "udhr", "src_code": "eng", "tgt_code": code}
    assert all(r.tgt_text and r.tgt_text != r.src_text for r in records)


def test_udhr_known_pairs_and_paragraph_structure():
    french = {r.key: r for r in iter_records(udhr("fra"), 0)}
    assert french["article 1"].tgt_text.startswith("Tous les êtres humains naissent libres et égaux en dignité")
    # article 11 has two numbered paragraphs in both languages, kept as two lines
    assert len(french["article 11"].src_text.split("\n")) == 2 == len(french["article 11"].tgt_text.split("\n"))
    assert "Article" not in french["article 11"].tgt_text.split("\n")[0][:10]  # the heading is not text
    chinese = {r.key: r for r in iter_records(udhr("cmn_hans"), 0)}
    assert chinese["article 1"].tgt_text.startswith("人人生而自由")
    # another pivot: French -> German
    german = list(iter_records(udhr("deu_1996"), 0, ParallelOptions(pivot="fra")))
    assert {(r.src_lang, r.tgt_lang) for r in german} == {("fr", "de")}
    assert german[1].src_text == french["article 1"].tgt_text


def test_udhr_pivot_itself_unaligned_and_missing_pivot(tmp_path):
    assert by_kind(iter_records(udhr("eng"), 0)) == Counter({"Dropped:pivot_language": 31})
    # kwi (Awa-Cuaiquer) in the package has the preamble and articles 2-30 only: 30 segments
    with pytest.raises(InputError, match=r"unaligned declarations: .*kwi\.html has 30 segments, the pivot "
                                         r".*eng\.html has 31; missing: article 1"):
        validate_file(udhr("kwi"))
    lone = tmp_path / "fra.html"
    shutil.copy(udhr("fra"), lone)
    with pytest.raises(InputError, match=r"fra\.html: its pivot declaration .*eng\.html does not exist"):
        list(iter_records(lone, 0))
    (tmp_path / "eng.html").write_text("<html lang='en'><body><p>Not a declaration</p></body></html>",
                                       encoding="utf-8")
    with pytest.raises(InputError, match=r"eng\.html: no <article> elements"):
        list(iter_records(lone, 0))


# ------------------------------------------------------------------------------------------------ TSV and Moses


@pytest.fixture(scope="module")
def german_pairs() -> list[SentencePair]:
    return [r for r in iter_records(po("de"), 0) if isinstance(r, SentencePair) and "\n" not in r.src_text + r.tgt_text
            and "\t" not in r.src_text + r.tgt_text and r.src_text.strip() == r.src_text
            and r.tgt_text.strip() == r.tgt_text]


def test_tsv_pairs_languages_from_the_name(tmp_path, german_pairs):
    assert len(german_pairs) > 300
    path = tmp_path / "django.en-de.tsv.gz"
    path.write_bytes(gzip.compress("".join(f"{p.src_text}\t{p.tgt_text}\n" for p in german_pairs).encode()))
    assert detect_format(path) == "tsv"
    validate_file(path)
    records = list(iter_records(path, 4))
    assert [(r.src_text, r.tgt_text) for r in records] == [(p.src_text, p.tgt_text) for p in german_pairs]
    assert {(r.src_lang, r.tgt_lang) for r in records} == {("en", "de")} and records[9].key == "line 10"
    reverse = list(iter_records(path, 4, ParallelOptions(src_lang="deu", tgt_lang="eng")))
    assert (reverse[0].src_lang, reverse[0].tgt_lang) == ("de", "en")


def test_tsv_bad_lines(tmp_path):
    path = tmp_path / "bad.en-fr.tsv"
    data = (b"Save\tEnregistrer\nno tab here\na\tb\tc\n\tvide\nCaf\xe9\tcaf\xc3\xa9\n" + b"x" * 40 + b"\ty\n"
            + b"Yes\tOui\n")
    path.write_bytes(data)
    records = list(iter_records(path, 0, ParallelOptions(max_pair_chars=30)))
    assert by_kind(records) == Counter({"SentencePair": 2, "Quarantined:bad_columns": 2, "Dropped:empty_side": 1,
                                        "Quarantined:invalid_utf8": 1, "Quarantined:too_long": 1})
    assert records[1].record_id == "line 2" and records[2].detail.startswith("3 tab-separated columns")
    bad_byte = data.index(bytes([0xE9]))
    assert f"byte offset {bad_byte} " in records[4].detail
    unnamed = tmp_path / "pairs.tsv"
    unnamed.write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"pairs\.tsv: cannot tell the languages"):
        validate_file(unnamed)
    assert [r.tgt_lang for r in iter_records(unnamed, 0, ParallelOptions(src_lang="en", tgt_lang="fr"))] == ["fr"]


def test_moses_files_are_read_in_step_and_must_align(tmp_path, german_pairs):
    en, de = tmp_path / "django.de-en.en.gz", tmp_path / "django.de-en.de.gz"
    en.write_bytes(gzip.compress("".join(p.src_text + "\n" for p in german_pairs).encode()))
    de.write_bytes(gzip.compress("".join(p.tgt_text + "\n" for p in german_pairs).encode()))
    assert detect_format(de) == "moses"
    validate_file(de)
    records = list(iter_records(de, 0))
    assert [(r.src_text, r.tgt_text) for r in records] == [(p.tgt_text, p.src_text) for p in german_pairs]
    assert {(r.src_lang, r.tgt_lang) for r in records} == {("de", "en")}
    short = tmp_path / "django.de-en.en"
    short.write_text("".join(p.src_text + "\n" for p in german_pairs[:-3]), encoding="utf-8")
    (tmp_path / "django.de-en.de").write_text("".join(p.tgt_text + "\n" for p in german_pairs), encoding="utf-8")
    n = len(german_pairs)
    message = rf"unaligned parallel files: .*django\.de-en\.en has {n - 3} lines, .*django\.de-en\.de has {n}"
    with pytest.raises(InputError, match=message):
        validate_file(short)
    with pytest.raises(InputError, match=message):
        list(iter_records(short, 0))
    (tmp_path / "orphan.fr-it.fr").write_text("Bonjour\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"orphan\.fr-it\.it: no such file"):
        validate_file(tmp_path / "orphan.fr-it.fr")
    with pytest.raises(InputError, match="cannot tell the parallel format"):
        detect_format(tmp_path / "notes.txt")


def test_sample_directory_layout_matches_the_reader():
    # the reader finds the pivot next to the file: the sample keeps the package's flat declaration/ layout
    assert (sample_dir("udhr") / "eng.html").is_file() and udhr("fra").parent == sample_dir("udhr")
    assert isinstance(next(iter(iter_records(udhr("eng"), 0))), Dropped)
    assert not any(isinstance(r, Quarantined) for r in iter_records(po("ko"), 0))
