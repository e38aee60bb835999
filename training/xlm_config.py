"""The recipe's XLM settings: `model.xlm` (XlmSettings), read by the XlmForPreTraining architecture
(training/models/xlm.py) together with the rest of `model` (whose `num_languages` sizes the language embeddings).

    model:
      num_languages: 2
      xlm: {language_id: 0}      # the language of the (monolingual) shards: every token gets embedding 0

Why a setting: shard schema v1 has no language column (schema v2 of the corpora issue adds one), so the objectives
that read shards (xlm_mlm, clm) give every token the language `language_id`; it is also the language the
fine-tuning encoder (`backbone()`) uses when its caller passes no language ids. TLM batches carry their own
per-token language ids (training/tlm.py).
"""

from __future__ import annotations

from pydantic import Field

from bertfactory.config import StrictModel


class XlmSettings(StrictModel):
    """Which language embedding monolingual batches and the fine-tuning encoder use."""

    language_id: int = Field(0, ge=0, description="language id (row of the language embeddings, < num_languages) of "
                             "every token of shard batches and of fine-tuning inputs")
