"""Turn task texts into model inputs with the checkpoint's own tokenizer: `[CLS] tokens [SEP]`, truncated to
max_seq_len, and pad lists of such sequences into batches.

Special tokens are added here from their ids (looked up by name in the tokenizer) rather than by the tokenizer's
post-processor, so a tokenizer saved without a BERT post-processor gives the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from bertfactory.errors import ContractError
from bertfactory.io import sha256_file

SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


@dataclass
class TextEncoder:
    tokenizer: object  # tokenizers.Tokenizer
    path: Path
    sha256: str
    special_ids: dict[str, int]

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
        ids = {name: tok.token_to_id(token) for name, token in SPECIAL_TOKENS.items()}
        missing = [SPECIAL_TOKENS[n] for n in ("pad", "cls", "sep") if ids[n] is None]
        if missing:
            raise ContractError(f"tokenizer {path} has no {', '.join(missing)} token; it is not a BERT tokenizer")
        return cls(tok, path, sha256_file(path), {k: v for k, v in ids.items() if v is not None})

    def encode(self, texts: Sequence[str], max_seq_len: int) -> list[np.ndarray]:
        """Each text -> int64 ids `[CLS] ... [SEP]` of at most max_seq_len tokens (the text's tail is cut)."""
        if max_seq_len < 3:
            raise ValueError(f"max_seq_len must leave room for [CLS], a token and [SEP] (got {max_seq_len})")
        encodings = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        cls_id, sep_id = self.special_ids["cls"], self.special_ids["sep"]
        return [np.array([cls_id, *e.ids[: max_seq_len - 2], sep_id], dtype=np.int64) for e in encodings]


def pad_batch(sequences: Sequence[np.ndarray], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence -> input_ids, token_type_ids (all 0: one segment), attention_mask."""
    width = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)
    for i, s in enumerate(sequences):
        input_ids[i, : len(s)] = s
        attention_mask[i, : len(s)] = 1
    return {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.zeros_like(torch.from_numpy(input_ids)),
        "attention_mask": torch.from_numpy(attention_mask),
    }
