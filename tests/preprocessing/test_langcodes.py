"""Language-code normalisation: source spellings and py3langid's labels meet on one code per language."""

from __future__ import annotations

import pytest

from preprocessing.langcodes import normalise_lang_code


@pytest.mark.parametrize("given,expected", [
    ("en", "en"), ("en-GB", "en"), ("EN_us", "en"), ("eng", "en"), ("deu_1996", "de"), ("de-1996", "de"),
    ("cmn_hans", "zh"), ("zh-Hant-TW", "zh"), ("zho", "zh"), ("zh_Hans", "zh"), ("arb", "ar"), ("pes", "fa"),
    ("nb", "no"), ("nob", "no"), ("nn", "nn"), ("fil", "tl"), ("iw", "he"), ("yue", "yue"), ("kwi", "kwi"),
    (" fr ", "fr"), ("", None), (None, None), ("not a code", None), ("english", None), ("e", None), ("12", None),
])
def test_normalise_lang_code(given, expected):
    assert normalise_lang_code(given) == expected
