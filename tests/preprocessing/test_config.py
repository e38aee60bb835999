"""preprocessing.config: paper-scale defaults, strict keys, impossible values refused with the key named."""

import pytest

from bertfactory.config import validate
from bertfactory.errors import ConfigError
from preprocessing.config import CorpusConfig, PreprocessConfig


def test_defaults_are_bert_paper_scale():
    cfg = PreprocessConfig()
    assert cfg.tokenizer.vocab_size == 30522 and cfg.tokenizer.lowercase
    assert cfg.instances.max_seq_len == 128 and cfg.instances.short_seq_prob == 0.1 and cfg.instances.dupe_factor == 10
    assert cfg.masking.masked_lm_prob == 0.15 and cfg.masking.max_predictions_per_seq == 20
    assert cfg.runner.preset == "local" and cfg.heldout_fraction == 0.02
    assert CorpusConfig().namespaces == [0]


def test_unknown_nested_key_names_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        validate(PreprocessConfig, {"masking": {"variant": 2}}, "recipe.yaml: preprocess")
    assert "masking.variant" in str(err.value) and "variants" in str(err.value)


@pytest.mark.parametrize("data, key", [
    ({"masking": {"mask_token_prob": 0.9, "random_token_prob": 0.2}}, "masking"),
    ({"heldout_fraction": 1.0}, "heldout_fraction"),
    ({"runner": {"preset": "dask"}}, "runner.preset"),
    ({"instances": {"max_seq_len": 4}}, "instances.max_seq_len"),
])
def test_impossible_values_are_refused(data, key):
    with pytest.raises(ConfigError) as err:
        validate(PreprocessConfig, data, "recipe.yaml: preprocess")
    assert key in str(err.value)


@pytest.mark.parametrize("lang", ["en", "eng", "en-US", "zh_Hans", "yue", "auto", None])
def test_corpus_lang_takes_codes_auto_and_null(lang):
    assert CorpusConfig(lang=lang).lang == lang


@pytest.mark.parametrize("lang", ["english", "English language", "", "e"])
def test_corpus_lang_refuses_what_is_not_a_code(lang):
    with pytest.raises(ValueError, match=f"lang {lang!r} is not a language code: give an ISO 639 code"):
        CorpusConfig(lang=lang)
