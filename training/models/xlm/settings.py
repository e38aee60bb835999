"""XLM's settings and row, declared without torch: `XlmSettings` and the default language XlmConfig shares (XlmLanguage)
(the recipe's `model.xlm`, which loading a recipe validates through training/models/members.py without importing the
model; model.py adds its fields to the model's config) and `MEMBER`, XLM's row (core/member.py: architecture,
capabilities, objectives, FLOPs terms, HF adapter), from which members.py builds the family's tables.

    from training.models.xlm.settings import XlmSettings
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from ..core.config_schema import RECIPE_SECTION
from ..bert.settings import bert_flops_terms
from ..core.capabilities import STACKING
from ..core.member import MASKED_TEXT_FORMATS, HfRow, Member, ObjectiveInfo


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


# the recipe key of these settings and their dataclass (Member.settings, Architecture.settings)
MODEL_SUBSECTION: tuple[str, type] = ("xlm", XlmSettings)

def flops_terms(info: ObjectiveInfo, c: Any, s: float, f: float, stage: str, rows: int | None,
                carried: bool) -> list[tuple[str, float, float]]:
    """BERT's formula (the language embeddings are a gather); clm predicts every next token (S - 1 positions)."""
    return bert_flops_terms(info, c, s, (s - 1) if info.name == "clm" else f * s)


# XLM (objectives in training/objectives/xlm.py). clm and xlm_mlm read monolingual shards of contiguous text
# (each row's language from multilingual shards, else model.xlm.language_id); tlm reads tlm-pairs shards
# (schema v2: lang_a/lang_b per row, turned into per-token language and restarting position ids by
# training.data.translation_inputs); xlm_mlm_tlm alternates the two (training/xlm_data.py: languages mapped
# onto model.xlm.languages, the pair set pretrain.tlm_shards).
MEMBER = Member(
    name="XLM", architecture="XlmForPreTraining", model="training.models.xlm.model",
    supports=frozenset({STACKING}), settings=MODEL_SUBSECTION,
    objectives=(
        ObjectiveInfo(
            name="clm", architecture="XlmForPreTraining",
            instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
            needs="text in order (shard field input_ids; the masks are undone)",
            description="XLM: causal LM, predicting the next token at every position (each row's language)",
            loss_function="clm", batches="xlm"),
        ObjectiveInfo(
            name="xlm_mlm", architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
            needs="masked tokens (shard fields mask_positions/mask_tokens)",
            description="XLM: monolingual masked LM with language embeddings (each row's language)",
            loss_function="xlm_mlm", batches="xlm"),
        ObjectiveInfo(
            name="tlm", architecture="XlmForPreTraining", instance_formats=("tlm-pairs",),
            needs="aligned sentence pairs with a language per side (shard fields lang_a/lang_b, schema v2)",
            description="XLM: translation LM, masked LM over [CLS] source [SEP] target [SEP] with per-token "
                        "languages and positions restarting at the target", loss_function="tlm", batches="xlm"),
        ObjectiveInfo(
            name="xlm_mlm_tlm", architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
            needs="masked tokens of monolingual text (shard fields mask_positions/mask_tokens; the pairs come from "
                  "pretrain.tlm_shards)",
            description="XLM: MLM on the run's shards and TLM on the pair shards pretrain.tlm_shards in alternate "
                        "steps", loss_function="xlm_mlm_tlm", batches="xlm"),
    ),
    flops=flops_terms,
    hf=HfRow(adapter="xlm", reads="XLMModel or XLMWithLMHeadModel (the encoder)", export="export_xlm_to_hf",
             exports=("XLMModel (the encoder)",), layouts=("xlm-encoder",), imports=(("xlm", "import_xlm_from_hf"),)),
)
