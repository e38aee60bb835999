"""Config sections of the preprocessing stage: `corpus` (CorpusConfig: what to read and how to clean it) and
`preprocess` (PreprocessConfig: Beam runner, hold-out split, tokenizer, instances, masking, shards, seed).

Defaults are the paper-scale values of BERT (Devlin et al. 2019; google-research/bert create_pretraining_data):
WordPiece vocab 30,522 (lowercased), max_seq_len 128, short_seq_prob 0.1, masked_lm_prob 0.15,
max_predictions_per_seq 20, dupe_factor 10. configs/local.yaml overrides them down to a tiny config.

    python -c "from preprocessing.config import PreprocessConfig; print(PreprocessConfig().model_dump_json(indent=1))"
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from bertfactory.config import StrictModel

# Sections whose text is boilerplate rather than prose; everything from such a heading to the next heading of
# the same or a higher level is dropped.
DEFAULT_DROP_SECTIONS = [
    "See also", "References", "External links", "Further reading", "Notes", "Bibliography", "Sources",
    "Citations", "Footnotes", "Notes and references",
]


class CorpusConfig(StrictModel):
    """What to read and how to clean it."""

    inputs: list[str] = Field(
        default_factory=lambda: ["sample:enwiki"],
        min_length=1,
        description="input files (MediaWiki XML dumps, .bz2 or plain); `sample:<name>` names a fetched sample",
    )
    format: Literal["wikipedia"] = Field("wikipedia", description="input format: MediaWiki XML export (pages-articles)")
    namespaces: list[int] = Field(default_factory=lambda: [0], min_length=1, description="page namespaces to keep (0 = articles)")
    drop_sections: list[str] = Field(
        default_factory=lambda: list(DEFAULT_DROP_SECTIONS),
        description="section headings (case-insensitive) whose whole section is dropped as boilerplate",
    )
    keep_lists: bool = Field(False, description="keep bulleted/numbered list items as text (most are not prose)")
    min_paragraph_chars: int = Field(20, ge=0, description="drop paragraphs shorter than this after cleaning")
    min_doc_chars: int = Field(200, ge=0, description="drop documents with fewer characters of clean text (reason too_short)")
    min_doc_sentences: int = Field(2, ge=1, description="drop documents with fewer sentences (reason too_short)")


class RunnerConfig(StrictModel):
    """Which Beam runner executes the pipeline. Chosen explicitly: never Beam's default DirectRunner path, which
    may try to download a Prism binary."""

    preset: Literal["local", "in_process"] = Field(
        "local",
        description="local = FnApiRunner with worker subprocesses (multi_processing); "
        "in_process = FnApiRunner in the calling process (one worker; for debugging)",
    )
    num_workers: int = Field(2, ge=1, description="worker processes of the local preset (direct_num_workers)")
    extra_options: list[str] = Field(
        default_factory=list, description="additional Beam pipeline flags, e.g. ['--direct_runner_bundle_repeat=0']"
    )


class TokenizerConfig(StrictModel):
    """The WordPiece tokenizer, trained on the training documents (never the held-out ones)."""

    path: str | None = Field(None, description="use this existing tokenizer.json instead of training one")
    vocab_size: int = Field(30522, ge=16, description="vocabulary size including special tokens and the alphabet")
    lowercase: bool = Field(True, description="lowercase and strip accents (BERT uncased)")
    min_frequency: int = Field(2, ge=0, description="a merge must occur at least this often to enter the vocabulary")
    limit_alphabet: int | None = Field(1000, ge=1, description="keep only the most frequent characters (null = all)")


class InstancesConfig(StrictModel):
    """BERT sentence-pair instances, built as google-research/bert create_pretraining_data does."""

    format: Literal["nsp-pairs", "sop-pairs"] = Field(
        "nsp-pairs", description="nsp-pairs = BERT next-sentence pairs (B follows A or comes from another document); "
        "sop-pairs = ALBERT sentence-order pairs (A and B consecutive, swapped with probability 0.5; nsp_label 1 = "
        "swapped). Recorded as the manifest's instance_format.name")
    max_seq_len: int = Field(128, ge=8, le=65535, description="tokens per instance including [CLS] and two [SEP]")
    short_seq_prob: float = Field(0.1, ge=0.0, le=1.0, description="probability of a shorter target length (2..max_seq_len-3)")
    nsp_random_prob: float = Field(0.5, ge=0.0, le=1.0, description="probability that segment B comes from another document")
    dupe_factor: int = Field(10, ge=1, description="passes over the corpus, each with different pairings")
    docs_per_bucket: int = Field(
        10000, ge=2, description="documents per random-document bucket; NotNext B segments come from the same bucket"
    )


class MaskingConfig(StrictModel):
    """Precomputed masked-LM targets: K variants per instance."""

    policy: Literal["token", "ngram", "span"] = Field(
        "token", description="what is masked as a unit: token = single WordPiece tokens (BERT); ngram = n-grams of "
        "whole words, n <= 3 with p(n) proportional to 1/n (ALBERT); span = spans of whole words, length ~ "
        "Geometric(0.2) truncated to 1..10 words (SpanBERT)")
    variants: int = Field(4, ge=1, description="mask variants (K) stored per instance; epoch e uses variant e % K")
    masked_lm_prob: float = Field(0.15, gt=0.0, lt=1.0, description="fraction of tokens to predict")
    max_predictions_per_seq: int = Field(20, ge=1, description="at most this many predictions per instance")
    mask_token_prob: float = Field(0.8, ge=0.0, le=1.0, description="of the chosen tokens, replaced by [MASK]")
    random_token_prob: float = Field(0.1, ge=0.0, le=1.0, description="of the chosen tokens, replaced by a random token")
    replacement_per: Literal["token", "unit"] | None = Field(
        None, description="whether the [MASK]/random/keep choice is drawn for every chosen token or once per chosen "
        "unit (all tokens of a span alike, SpanBERT); null = the policy's own (unit for span, token otherwise)")

    @model_validator(mode="after")
    def _probabilities(self) -> "MaskingConfig":
        if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
            raise ValueError("mask_token_prob + random_token_prob must be <= 1 (the rest keeps the token)")
        return self


class ShardsConfig(StrictModel):
    """How instances are laid out on disk."""

    train_shards: int = Field(256, ge=1, le=99999, description="number of train shard files")
    heldout_shards: int = Field(4, ge=1, le=99999, description="number of held-out shard files")
    batch_rows: int = Field(4096, ge=1, description="rows per Arrow record batch inside a shard")


class PreprocessConfig(StrictModel):
    """Beam runner, hold-out split, tokenizer, instances, masking, shards and the seed of every random choice."""

    seed: int = Field(12345, ge=0, description="seed of instance building and masking")
    heldout_fraction: float = Field(0.02, ge=0.0, lt=1.0, description="fraction of documents held out (by a hash of the title)")
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Beam runner")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="WordPiece tokenizer")
    instances: InstancesConfig = Field(default_factory=InstancesConfig, description="sentence-pair instances")
    masking: MaskingConfig = Field(default_factory=MaskingConfig, description="precomputed masks")
    shards: ShardsConfig = Field(default_factory=ShardsConfig, description="shard layout")
