"""Assembly of manifest.json (the contract in preprocessing.shards, docs/shards.md) from a run's counts, splits,
sources and tokenizer: the instance format's layout, the masking section, the config hash.

    python -c "from preprocessing.manifest import FORMAT_LAYOUTS; print(list(FORMAT_LAYOUTS))"
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from bertfactory import __version__
from bertfactory.io import content_hash
from bertfactory.portable_paths import portable_values

from .config import CorpusConfig, PreprocessConfig
from .masking_policies import SPAN_BOUND_POLICIES
from .planning import corpus_languages
from .runners import describe
from .shards import SCHEMA_VERSION, SPAN_COLUMN, Manifest, SourceInfo, SplitInfo, TokenizerInfo


def config_hash(corpus: CorpusConfig, cfg: PreprocessConfig, run_dir: Path | None = None) -> str:
    """Hash of everything that decides the outputs (the runner section does not, so it is left out), with paths
    inside the run directory or the samples cache named as on every machine (bertfactory/portable_paths.py)."""
    return content_hash(portable_values({"corpus": corpus.model_dump(mode="json"),
                                         "preprocess": cfg.model_dump(mode="json", exclude={"runner"})}, run_dir))


def is_lowercase(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases, asked of the normalizer itself: an adopted tokenizer may
    lowercase with a `Lowercase` step inside a `Sequence` rather than with BertNormalizer(lowercase=True)."""
    normalizer = tokenizer.normalizer
    return normalizer is not None and normalizer.normalize_str("ABC") == "abc"


# what the rows of each instance format hold (the manifest's instance_format; docs/shards.md)
_NO_LABEL = {"0": "unused"}
FORMAT_LAYOUTS = {
    "nsp-pairs": {"segments": "sentences", "layout": "[CLS] A [SEP] B [SEP]",
                  "nsp_label": {"0": "IsNext", "1": "NotNext"}},
    "sop-pairs": {"segments": "sentences", "layout": "[CLS] A [SEP] B [SEP]",
                  "nsp_label": {"0": "in order", "1": "swapped"}},
    "full-sentences": {"segments": "packed sentences across documents ([SEP] between documents)",
                       "layout": "[CLS] text [SEP]", "nsp_label": _NO_LABEL},
    "doc-sentences": {"segments": "packed sentences of one document", "layout": "[CLS] text [SEP]",
                      "nsp_label": _NO_LABEL},
    "single-segment": {"segments": "a contiguous span of one document", "layout": "[CLS] text [SEP]",
                       "nsp_label": _NO_LABEL},
    "clm": {"segments": "consecutive fixed-length segments of one document (segment_index)", "layout": "text",
            "nsp_label": _NO_LABEL},
    "tlm-pairs": {"segments": "an aligned sentence pair (lang_a, lang_b; positions restart at the target)",
                  "layout": "[CLS] source [SEP] target [SEP]", "nsp_label": _NO_LABEL},
}


def build_manifest(corpus: CorpusConfig, cfg: PreprocessConfig, tokenizer: Tokenizer, tokenizer_sha256: str,
                   specials: dict[str, int], counts: dict, buckets: dict, splits: dict[str, SplitInfo],
                   sources: list[SourceInfo], run_dir: Path | None = None) -> Manifest:
    """The run's manifest (preprocessing.shards.Manifest), every field but the dedup index and lineage, which the
    pipeline adds."""
    languages = corpus_languages(counts)
    inst, masking = cfg.instances, cfg.masking
    return Manifest(
        schema_version=SCHEMA_VERSION,
        created_by=f"bertfactory {__version__} preprocessing.pipeline",
        tokenizer=TokenizerInfo(path="../tokenizer/tokenizer.json", sha256=tokenizer_sha256,
                                vocab_size=tokenizer.get_vocab_size(with_added_tokens=True), special_ids=specials,
                                lowercase=is_lowercase(tokenizer)),
        instance_format={
            "name": inst.format, "max_seq_len": inst.max_seq_len, "short_seq_prob": inst.short_seq_prob,
            "nsp_random_prob": inst.nsp_random_prob, "dupe_factor": inst.dupe_factor,
            "docs_per_bucket": inst.docs_per_bucket, "random_buckets": buckets,
            **FORMAT_LAYOUTS[inst.format],
            "languages": languages,
        },
        masking={**masking.model_dump(mode="json"),
                 "keep_prob": round(1.0 - masking.mask_token_prob - masking.random_token_prob, 10),
                 "seeding": "counter-hash v2: splitmix64 keys of variant_seeds(seed, doc_id, instance_index)[variant] "
                            "(preprocessing.masking)",
                 # only span shards say it (every other manifest keeps its bytes)
                 **({"span_bounds": f"{SPAN_COLUMN}: per variant, each masked span's length in mask_positions "
                                    "order" + (" (dynamic: made at read time)" if masking.dynamic else "")}
                    if masking.policy in SPAN_BOUND_POLICIES else {})},
        seed=cfg.seed,
        config_hash=config_hash(corpus, cfg, run_dir),
        counts=counts,
        splits=splits,
        sources=sources,
        runner=describe(cfg.runner),
    )
