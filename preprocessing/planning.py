"""The instance plan: what the instances pipeline must know of the whole corpus before it starts, from the
documents' tally (preprocessing.document_results.DocTally) - random buckets and pre-shards per split, language copy
rates (language sampling) and language ids. Pure functions of (config, counts): the driver and the single Beam job
compute the same plan.

    python -c "from preprocessing.planning import PRESHARD_CHARS; print(PRESHARD_CHARS)"
"""

from __future__ import annotations

import math

from .config import PreprocessConfig
from .shards import SPLITS


def language_copy_rates(cfg: PreprocessConfig, counts: dict) -> dict[str, float]:
    """Expected copies of a training document per language under exponential smoothing (empty: no resampling).
    Shares are measured in characters of the training documents, the unit known before tokenising."""
    sampling = cfg.language_sampling
    if not sampling.enabled:
        return {}
    from .language_sampling import copy_rates

    languages = counts["languages"]
    taking_part = {lang: info.get("train_chars", 0) for lang, info in languages.items()
                   if (lang in sampling.languages if sampling.languages is not None
                       else info.get("train_docs", 0) >= sampling.min_docs) and info.get("train_chars", 0) > 0}
    if len(taking_part) < 2:
        return {}
    return copy_rates(taking_part, sampling.alpha)


def corpus_languages(counts: dict) -> list[str]:
    """The languages of the corpus in id order (the manifest's instance_format.languages): sorted codes, pairs
    split into their two languages."""
    return sorted({code for lang in counts["languages"] for code in lang.split("-")})


def split_chars(counts: dict) -> dict[str, int]:
    """Characters of text per split: the training documents' (counted per language by the documents stage), the
    held-out split's estimated from its share of documents."""
    train = sum(info.get("train_chars", 0) for info in counts["languages"].values())
    per_doc = train / max(1, counts["docs"]["train"])
    return {"train": train, "heldout": round(per_doc * counts["docs"]["heldout"])}


# instance text (characters x dupe_factor) per pre-shard at most: what DealAndMask sorts in one worker at a time
PRESHARD_CHARS = 16_000_000


def preshard_counts(cfg: PreprocessConfig, chars: dict[str, int]) -> dict[str, int]:
    """Pre-shards per split: a multiple of the split's shard count, growing with its text, so a pre-shard holds
    about PRESHARD_CHARS of instance text at most whatever the corpus size (peak memory stays flat)."""
    shards = {"train": cfg.shards.train_shards, "heldout": cfg.shards.heldout_shards}
    return {s: shards[s] * max(1, math.ceil(chars[s] * cfg.instances.dupe_factor / (PRESHARD_CHARS * shards[s])))
            for s in SPLITS}


def instance_plan(cfg: PreprocessConfig, counts: dict) -> dict:
    """What the instances pipeline needs to know of the whole corpus before it starts, from the document counts
    (`docs` and `languages`: DocTally.counts()): random buckets and pre-shards per split, language copy rates
    (language sampling) and language ids."""
    chars = split_chars(counts)
    return {
        "buckets": {s: max(1, math.ceil(counts["docs"][s] / cfg.instances.docs_per_bucket),
                           math.ceil(chars[s] / cfg.instances.max_bucket_chars)) for s in SPLITS},
        "copy_rates": language_copy_rates(cfg, counts),
        "lang_ids": {lang: i for i, lang in enumerate(corpus_languages(counts))},
        "preshards": preshard_counts(cfg, chars),
    }
