"""Turn task texts into model inputs with the checkpoint's own tokenizer: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`
(segment ids 0 for A, 1 for B), truncated to max_seq_len, and pad lists of such sequences into batches.

Besides plain texts: `tokenize_words` keeps the word of every sub-token (tagging labels the first sub-token of each
word) and `tokenize_with_offsets` the character span of every token in the original text (SQuAD maps a predicted
token span back to the context's characters).

Special tokens are added here from their ids (looked up by name in the tokenizer) rather than by the tokenizer's
post-processor, so a tokenizer saved without a BERT post-processor gives the same inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file



@dataclass
class TextEncoder:
    tokenizer: object  # tokenizers.Tokenizer
    path: Path
    sha256: str
    special_ids: dict[str, int]
    # a byte-level pre-tokenizer without a prefix space (roberta-base's, ModernBERT's tokenizer.json): a word given
    # alone is spelt as at the start of a text ("f ilm"), not as within one ("Ġfilm"); tokenize_words then gives
    # each word its space, as transformers does for split words (add_prefix_space=True)
    space_words: bool = False

    @classmethod
    def from_file(cls, path: str | Path) -> "TextEncoder":
        from tokenizers import Tokenizer

        path = Path(path)
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as err:  # tokenizers raises a bare Exception for unreadable files
            raise ContractError(f"{path} is not a readable tokenizers JSON file: {err}") from None
        # Padding/truncation settings saved in the file would leak pad ids into encode_batch; we do both ourselves.
        tok.no_padding()
        tok.no_truncation()
        from bertfactory.tokens import special_token_ids

        ids = special_token_ids(tok)  # BERT [CLS]/[SEP]/[PAD], RoBERTa <s>/</s>/<pad> or ALBERT's set
        missing = [role for role in ("pad", "cls", "sep") if role not in ids]
        if missing:
            raise ContractError(f"tokenizer {path} has no {', '.join(missing)} token (none of the BERT, RoBERTa or "
                                f"ALBERT special-token sets); it cannot encode task inputs")
        from preprocessing.tokenizer import _byte_level_without_prefix_space

        spec = json.loads(tok.to_str())
        return cls(tok, path, sha256_file(path), ids, _byte_level_without_prefix_space(spec.get("pre_tokenizer")))

    @property
    def cls_id(self) -> int:
        return self.special_ids["cls"]

    @property
    def sep_id(self) -> int:
        return self.special_ids["sep"]

    @property
    def pad_id(self) -> int:
        return self.special_ids["pad"]

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize_words(self, sentences: Sequence[Sequence[str]]) -> list[tuple[list[int], list[int]]]:
        """Pre-split words -> (token ids, word index of each token). A word the tokenizer turns into nothing (an
        empty string, characters the normaliser strips) has no token and so cannot carry a prediction."""
        encodings = self.tokenizer.encode_batch([[f" {w}" if self.space_words else w for w in words]
                                                 for words in sentences], is_pretokenized=True,
                                                add_special_tokens=False)
        return [(e.ids, [w if w is not None else -1 for w in e.word_ids]) for e in encodings]

    def tokenize_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Token ids and each token's [start, end) character span in the original text."""
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [(e.ids, [tuple(o) for o in e.offsets]) for e in encodings]

    def encode_pairs(self, texts: Sequence[str], texts_b: Sequence[str | None], max_seq_len: int
                     ) -> list[tuple[np.ndarray, np.ndarray]]:
        """(text, text_b or None) -> (ids, segment ids). Pairs are cut longest-first as BERT's
        _truncate_seq_pair: one token at a time from the end of whichever side is longer."""
        if max_seq_len < 3:
            raise ValueError(f"max_seq_len must leave room for [CLS], a token and [SEP] (got {max_seq_len})")
        a_ids = self.tokenize(texts)
        has_b = [b is not None for b in texts_b]
        b_ids = self.tokenize([b if b is not None else "" for b in texts_b])
        out = []
        for a, b, pair in zip(a_ids, b_ids, has_b):
            if not pair:
                ids = [self.cls_id, *a[: max_seq_len - 2], self.sep_id]
                out.append((np.array(ids, dtype=np.int64), np.zeros(len(ids), dtype=np.int64)))
                continue
            a, b = truncate_pair(a, b, max_seq_len - 3)
            out.append(join_pair(self.cls_id, self.sep_id, a, b))
        return out

    def encode(self, texts: Sequence[str], max_seq_len: int) -> list[np.ndarray]:
        """Each text -> int64 ids `[CLS] ... [SEP]` of at most max_seq_len tokens (the text's tail is cut)."""
        if max_seq_len < 3:
            raise ValueError(f"max_seq_len must leave room for [CLS], a token and [SEP] (got {max_seq_len})")
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        cls_id, sep_id = self.special_ids["cls"], self.special_ids["sep"]
        return [np.array([cls_id, *e.ids[: max_seq_len - 2], sep_id], dtype=np.int64) for e in encodings]


def truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Cut the longer of a/b by one token at a time until len(a) + len(b) <= budget (BERT's rule)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return a, b


def join_pair(cls_id: int, sep_id: int, a: Sequence[int], b: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] a [SEP] b [SEP] with segment ids 0 ... 0 1 ... 1."""
    ids = [cls_id, *a, sep_id, *b, sep_id]
    segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return np.array(ids, dtype=np.int64), np.array(segments, dtype=np.int64)


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int,
              segments: Sequence[np.ndarray] | None = None) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence -> input_ids, token_type_ids (0 where no segments are given),
    attention_mask."""
    width = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((len(sequences), width), dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for i, s in enumerate(sequences):
        input_ids[i, : len(s)] = s
        attention_mask[i, : len(s)] = 1
        if segments is not None:
            token_type_ids[i, : len(s)] = segments[i]
    return {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(attention_mask),
    }
