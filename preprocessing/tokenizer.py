"""Train (or adopt) the WordPiece tokenizer, deterministically, and save it as RUN/tokenizer/tokenizer.json.

The tokenizer is BERT's: BertNormalizer (lowercase + strip accents when uncased), BertPreTokenizer, WordPiece
with `##` continuation prefix, WordPiece decoder, and the BERT TemplateProcessing post-processor
([CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1), so `Tokenizer.encode(text)` is directly usable by evaluation.
Special tokens are [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.

Why the training is wrapped (measured with tokenizers 0.23: two runs on the same text gave different ids to 544
of 8,000 tokens; at 30,522 the vocabularies themselves differed in a few entries): the Rust trainer walks its
word-count HashMap, whose order is randomised per process, in two places. (1) With `limit_alphabet`, characters
of equal frequency at the cut are kept or dropped in that order (an unstable sort). (2) The `##c` continuation
tokens get their ids in that order, and merges of equal count are tie-broken by token ids, so which merges make it
into the vocabulary at the end, and every id, depend on it. Thread count (RAYON_NUM_THREADS) does not matter: the
parallel parts only sum counts. The fix: count words and characters here (Python, order-independent), choose the
alphabet ourselves with a stable tie-break (frequency, then code point), hand it to the trainer as
`initial_alphabet` with `limit_alphabet` equal to its size (so nothing else survives the cut), and pre-register
every `##c` token as a trainer special token in sorted order so their ids are fixed before training. Afterwards the
`##c` tokens are turned back into ordinary vocabulary entries. The result is a pure function of the multiset of
words: independent of document order, thread count and process.

    python -m preprocessing.tokenizer OUT.json FILE.txt [vocab_size]     # train on a text file
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertfactory.errors import InputError
from bertfactory.io import atomic_write_bytes, atomic_write_text

from .config import TokenizerConfig

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
CONTINUATION = "##"


def _blank_tokenizer(lowercase: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"], continuing_subword_prefix=CONTINUATION))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return tokenizer


def _word_counts(tokenizer: Tokenizer, texts: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _alphabet(words: Counter, limit: int | None) -> tuple[list[str], list[str]]:
    """(kept characters, ## continuation tokens) as the trainer would form them, with stable tie-breaks."""
    chars: Counter = Counter()
    for word, count in words.items():
        for c in word:
            chars[c] += count
    ranked = sorted(chars, key=lambda c: (-chars[c], ord(c)))
    kept = set(ranked[:limit] if limit is not None else ranked)
    continuation = {c for word in words for c in word[1:] if c in kept}
    return sorted(kept), [CONTINUATION + c for c in sorted(continuation)]


def train_tokenizer(texts_factory, cfg: TokenizerConfig) -> Tokenizer:
    """Train on the texts that `texts_factory()` yields (called twice: once to count, once to train)."""
    tokenizer = _blank_tokenizer(cfg.lowercase)
    words = _word_counts(tokenizer, texts_factory())
    if not words:
        raise InputError("no words to train the tokenizer on: the training documents are empty")
    kept, continuation = _alphabet(words, cfg.limit_alphabet)
    specials = list(SPECIAL_TOKENS.values())
    needed = len(specials) + len(kept) + len(continuation)
    if cfg.vocab_size < needed:
        logger.warning("vocab_size %d is smaller than specials + alphabet (%d); the vocabulary will be %d tokens",
                       cfg.vocab_size, needed, needed)
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=specials + continuation,
        initial_alphabet=kept,
        limit_alphabet=len(kept),
        continuing_subword_prefix=CONTINUATION,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts_factory(), trainer=trainer)
    return _finish(tokenizer, set(continuation))


def _finish(trained: Tokenizer, demote: set[str]) -> Tokenizer:
    """Demote the pre-registered ## tokens to ordinary vocabulary and add the BERT post-processor."""
    spec = json.loads(trained.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in demote]
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    ids = {name: tokenizer.token_to_id(tok) for name, tok in SPECIAL_TOKENS.items()}
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["cls"]), ("[SEP]", ids["sep"])],
    )
    return tokenizer


def special_ids(tokenizer: Tokenizer, source: str) -> dict[str, int]:
    """The ids of the five BERT special tokens; InputError naming `source` if any is missing."""
    ids = {name: tokenizer.token_to_id(tok) for name, tok in SPECIAL_TOKENS.items()}
    missing = [SPECIAL_TOKENS[n] for n, i in ids.items() if i is None]
    if missing:
        raise InputError(f"{source}: tokenizer has no {', '.join(missing)}; a BERT WordPiece tokenizer is required")
    return ids  # type: ignore[return-value]


def save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    # Tokenizer.to_str is deterministic (vocab serialised by id); written atomically.
    atomic_write_text(path, tokenizer.to_str(pretty=True))


def adopt_tokenizer(source: Path, path: Path) -> Tokenizer:
    """Use an existing tokenizer.json: validate it, then copy it byte for byte to `path`."""
    if not source.is_file():
        raise InputError(f"{source}: tokenizer file not found (preprocess.tokenizer.path)")
    data = source.read_bytes()  # read once: the bytes validated are the bytes copied
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # tokenizers raises plain Exception subclasses for bad JSON
        raise InputError(f"{source}: not a valid tokenizers JSON file ({err})") from None
    special_ids(tokenizer, str(source))
    atomic_write_bytes(path, data)
    return tokenizer


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    lines = Path(sys.argv[2]).read_text(encoding="utf-8").splitlines()
    cfg = TokenizerConfig(vocab_size=int(sys.argv[3]) if len(sys.argv) > 3 else 30522)
    save_tokenizer(train_tokenizer(lambda: iter(lines), cfg), Path(sys.argv[1]))
