"""The dedup section of the corpus config (CorpusConfig.dedup): exact and near-duplicate removal settings. Pure
pydantic, no Beam: preprocessing.config (and so training) imports it without loading the pipeline.

    python -c "from preprocessing.dedup_config import DedupConfig; print(DedupConfig().model_dump_json(indent=1))"
"""

from __future__ import annotations

from pydantic import Field, model_validator

from bertfactory.config import StrictModel


class DedupConfig(StrictModel):
    """Exact and near-duplicate removal (preprocessing.dedup; docs/cleaning.md)."""

    exact: bool = Field(
        True, description="remove documents whose normalised text (case-folded, Unicode punctuation removed, "
        "whitespace collapsed) has the same 64-bit hash as a kept one (sentence pairs: src TAB tgt)")
    near: bool = Field(
        True, description="remove near-duplicates: MinHash + LSH candidates confirmed by estimated Jaccard >= "
        "threshold (Broder 1997; Leskovec, Rajaraman & Ullman, Mining of Massive Datasets, ch. 3)")
    shingle_size: int = Field(
        5, ge=1, description="shingles are this many consecutive words; in scripts without spaces (Han, kana, "
        "Thai, Myanmar, Khmer, ...) every character is a word, so these are 5-character shingles")
    num_perm: int = Field(128, ge=1, le=4096, description="MinHash permutations = signature length (uint32 each)")
    bands: int = Field(16, ge=1, description="LSH bands; a pair becomes a candidate when one band agrees entirely")
    rows: int = Field(8, ge=1, description="signature positions per band (bands * rows == num_perm)")
    threshold: float = Field(
        0.8, gt=0, le=1, description="estimated Jaccard similarity of 5-word shingle sets at which a candidate is "
        "a near-duplicate")
    seed: int = Field(1, ge=0, description="seed of the MinHash permutations (an index is only comparable with "
                                           "signatures of the same seed, num_perm and shingle_size)")

    @model_validator(mode="after")
    def _bands_cover_signature(self) -> "DedupConfig":
        if self.bands * self.rows != self.num_perm:
            raise ValueError(f"bands * rows must equal num_perm: {self.bands} * {self.rows} != {self.num_perm}")
        return self

    def index_params(self) -> dict:
        """What a signature depends on (stored in the index file and checked when it is read)."""
        return {"num_perm": self.num_perm, "seed": self.seed, "shingle_size": self.shingle_size}
