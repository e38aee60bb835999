"""XLM's settings (`model.xlm`) and the default language XlmConfig shares, declared without torch: the sub-section
of a recipe's `model` that xlm.py's architecture reads, which loading a recipe validates (training/config.py,
settings_registry.py) without importing the model. xlm.py imports it from here; either module is fine to import it
from.

    from training.models.xlm_settings import XlmSettings
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from .config_schema import RECIPE_SECTION


@dataclass(frozen=True, config=RECIPE_SECTION)
class XlmLanguage:
    """The default language, in the recipe's `model.xlm` and in XlmConfig."""

    language_id: int = Field(0, ge=0, description="language id (row of the language embeddings, < num_languages) of "
                             "every token of shards without languages per row and of fine-tuning inputs")


@dataclass(frozen=True, config=RECIPE_SECTION)
class XlmSettings(XlmLanguage):
    """The recipe's `model.xlm`: the model's languages (embedding rows) and the default language (the rest of
    `model`, whose `num_languages` sizes the language embeddings, is the encoder).

        model:
          num_languages: 3
          xlm:
            languages: [en, es, fr]   # XLM's --lgs: language code of each embedding row (0, 1, 2)
            language_id: 0            # shards without languages per row (schema v1, or one language) and fine-tuning

    Which embedding a token gets:
    - multilingual shards (schema v2, two or more `instance_format.languages`): each row its own language (`lang_a`,
      `lang_b`); with `languages` set, a row's language code picks the row of that code (a code the list lacks is
      refused, naming it), without it the manifest's ids are the embedding rows (training/xlm_data.py);
    - shards of one language or schema v1 (no language column): every token `language_id`;
    - tlm-pairs rows: each side its language, as above."""

    languages: list[str] | None = Field(
        None, description="language code of each embedding row (XLM's --lgs), mapping the shards' per-row languages "
        "(manifest instance_format.languages) onto the model, so that two shard sets (MLM and TLM) or a later "
        "corpus agree; null = the train shards' own ids")

    @field_validator("languages")
    @classmethod
    def _distinct(cls, languages: list[str] | None) -> list[str] | None:
        if languages is not None:
            if not languages:
                raise ValueError("model.xlm.languages must name at least one language (or be null)")
            repeated = sorted({code for code in languages if languages.count(code) > 1})
            if repeated:
                raise ValueError(f"model.xlm.languages lists {', '.join(repeated)} more than once")
        return languages


# the recipe key of these settings and their dataclass (Architecture.settings of xlm.py)
MODEL_SUBSECTION: tuple[str, type] = ("xlm", XlmSettings)
