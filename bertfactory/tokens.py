"""The special tokens of each tokenizer family and their roles (pad, unk, cls, sep, mask): one table read by every
stage that opens a tokenizer.json (preprocessing writes shards with it, training records it in checkpoints,
evaluation encodes task inputs with it).

    wordpiece  BERT            [PAD] [UNK] [CLS] [SEP] [MASK]
    bpe        RoBERTa         <s> <pad> </s> <unk> <mask>       (cls = <s>, sep = </s>)
    unigram    ALBERT / XLM    <pad> <unk> [CLS] [SEP] [MASK]

    python -m bertfactory.tokens RUN/tokenizer/tokenizer.json
"""

from __future__ import annotations

import sys

ROLES = ("pad", "unk", "cls", "sep", "mask")
# role -> token; in id order (ids 0..4) for the tokenizers bertfactory trains: BERT's, RoBERTa's (<s> <pad> </s>
# <unk> <mask>, as its fairseq dictionary starts), ALBERT's SentencePiece layout.
SPECIAL_TOKENS_BY_KIND: dict[str, dict[str, str]] = {
    "wordpiece": {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    "bpe": {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"},
    "unigram": {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
}
# wordpiece before unigram before bpe: an ALBERT vocabulary has <pad> <unk> but [CLS] [SEP] [MASK]
_KIND_ORDER = ("wordpiece", "unigram", "bpe")


def tokenizer_kind(tokenizer) -> str | None:
    """The family whose five special tokens the tokenizer has all of; None if none is complete."""
    for kind in _KIND_ORDER:
        if all(tokenizer.token_to_id(t) is not None for t in SPECIAL_TOKENS_BY_KIND[kind].values()):
            return kind
    return None


def special_token_ids(tokenizer) -> dict[str, int]:
    """{role: id} of the special tokens the tokenizer has: the complete family when there is one, else the roles
    of the family it has most of (an imported tokenizer may lack [MASK]); roles it lacks are left out."""
    kind = tokenizer_kind(tokenizer)
    if kind is None:
        kind = max(_KIND_ORDER, key=lambda k: sum(tokenizer.token_to_id(t) is not None
                                                  for t in SPECIAL_TOKENS_BY_KIND[k].values()))
    ids = {role: tokenizer.token_to_id(token) for role, token in SPECIAL_TOKENS_BY_KIND[kind].items()}
    return {role: ids[role] for role in ROLES if ids[role] is not None}


def role_tokens(tokenizer) -> dict[str, str]:
    """{role: token string} (e.g. cls -> "<s>" for a RoBERTa tokenizer), for the roles it has."""
    return {role: tokenizer.id_to_token(i) for role, i in special_token_ids(tokenizer).items()}


def role_tokens_of_file(path) -> dict[str, str]:
    from tokenizers import Tokenizer

    return role_tokens(Tokenizer.from_file(str(path)))


if __name__ == "__main__":
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(sys.argv[1])
    print(tokenizer_kind(tok), special_token_ids(tok))
