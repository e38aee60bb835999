"""Train (or adopt) the tokenizer, deterministically, and save it as RUN/tokenizer/tokenizer.json.

Three kinds (TokenizerConfig.kind; docs/tokenizers.md), each with its family's special tokens and post-processor,
so `Tokenizer.encode(text)` / `encode(a, b)` is directly usable by evaluation:

- wordpiece (BERT): BertNormalizer (lowercase; strip accents = `strip_accents`, None = as lowercase; Chinese
  characters isolated, as BERT does), BertPreTokenizer, WordPiece with `##` continuations, WordPiece decoder,
  [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1. [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
- bpe (RoBERTa): optional lowercase / accent stripping, ByteLevel pre-tokenizer (GPT-2 regex, prefix space: each
  sentence's first word is spelled `Ġword` and starts a word, as in the text) and decoder, byte-level BPE over the
  256 byte symbols (no <unk> is ever produced), RobertaProcessing <s> $A </s> / <s> $A </s> </s> $B </s> (type
  ids all 0). <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4.
- unigram (ALBERT / XLM-R): SentencePiece Unigram, NFKC, Metaspace ▁ (preprocessing.tokenizer_unigram), the BERT
  template like ALBERT. <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4 (ALBERT's layout).

Roles: everything downstream (shards, masking, training, evaluation) looks the special tokens up by role
(pad/unk/cls/sep/mask) through `special_ids`, which recognises each family's set (SPECIAL_TOKENS_BY_KIND).

Determinism (two trainings on the same words give byte-identical tokenizer.json, whatever the document order,
thread count or process; tested per kind):

WordPiece (measured with tokenizers 0.23: two runs on the same text gave different ids to 544 of 8,000 tokens; at
30,522 the vocabularies themselves differed in a few entries): the Rust trainer walks its word-count HashMap,
whose order is randomised per process, in two places. (1) With `limit_alphabet`, characters of equal frequency at
the cut are kept or dropped in that order (an unstable sort). (2) The `##c` continuation tokens get their ids in
that order, and merges of equal count are tie-broken by token ids, so which merges make it into the vocabulary at
the end, and every id, depend on it. Thread count (RAYON_NUM_THREADS) does not matter: the parallel parts only sum
counts. The fix: count words and characters here (Python, order-independent), choose the alphabet ourselves with a
stable tie-break (frequency, then code point), hand it to the trainer as `initial_alphabet` with `limit_alphabet`
equal to its size (so nothing else survives the cut), and pre-register every `##c` token as a trainer special
token in sorted order so their ids are fixed before training. Afterwards the `##c` tokens are turned back into
ordinary vocabulary entries. The result is a pure function of the multiset of words.

Byte-level BPE needs no workaround, for the same reasons turned around: there is no continuation prefix, and the
alphabet is the 256 byte symbols handed over as `initial_alphabet` (the trainer sorts its alphabet by code point
before giving ids), so every id before the first merge is fixed; merges are chosen by (count, then pair ids) and
counts are integer sums, so the HashMap order never decides anything. Tested across processes, orders and threads.

Unigram: the Rust UnigramTrainer is order-dependent (float sums and tie cuts in HashMap order); we train with
SentencePiece on sorted word counts instead (preprocessing.tokenizer_unigram says why that is deterministic).

Adopting (preprocess.tokenizer.path, `adopt_tokenizer`): a tokenizers JSON file (e.g. a Hugging Face model's
tokenizer.json) is validated and copied byte for byte, unless it carries padding or truncation settings (MiniLM's
pads and truncates every encoding to 128 tokens): those are for feeding a model, they would put pad ids into every
sentence the pipeline encodes, so they are dropped and the file rewritten. A bare BERT `vocab.txt` (one WordPiece
token per line, the line number its id) becomes the WordPiece tokenizer HF's BertTokenizerFast builds from it:
BertNormalizer lowercasing as preprocess.tokenizer.lowercase says (a tokenizer_config.json beside it that says
otherwise is refused), `##` continuations, words of up to 100 characters, [CLS] A [SEP] (B [SEP]).

    python -m preprocessing.tokenizer OUT.json FILE.txt [vocab_size] [kind]    # train on a text file
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
from bertfactory.tokens import ROLES, SPECIAL_TOKENS_BY_KIND, tokenizer_kind  # noqa: F401 (re-exported)
from bertfactory.io import atomic_write_bytes, atomic_write_text, decode_utf8

from .config import TokenizerConfig
from .tokenizer_unigram import blank_unigram, train_unigram_pieces, unigram_from_pieces

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = SPECIAL_TOKENS_BY_KIND["wordpiece"]  # BERT's; kept for existing callers
CONTINUATION = "##"
MAX_WORDPIECE_WORD_CHARS = 1000


def _strip_accents(cfg: TokenizerConfig) -> bool:
    return cfg.lowercase if cfg.strip_accents is None else cfg.strip_accents


def _blank_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    """An untrained tokenizer of the configured kind: normaliser, pre-tokenizer, decoder."""
    if cfg.kind == "unigram":
        return blank_unigram(cfg.lowercase, _strip_accents(cfg))
    if cfg.kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=None))
        steps = ([normalizers.Lowercase()] if cfg.lowercase else []) + (
            [normalizers.NFD(), normalizers.StripAccents(), normalizers.NFC()] if _strip_accents(cfg) else [])
        if steps:
            tokenizer.normalizer = normalizers.Sequence(steps)
        # add_prefix_space: every text (the pipeline tokenises one sentence at a time) starts with the space GPT-2's
        # BPE reads as a word start, so a sentence's first word is `ĠThe` as it is inside a sentence: one spelling
        # per word, and the masking policies (word_continuation_ids) see it start a word instead of continuing the
        # previous sentence's last word (the Unigram kind's Metaspace prepends `▁` for the same reason). The
        # decoder drops that one leading space again.
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
        return tokenizer
    # BERT's max_input_chars_per_word is 100: a longer word becomes one [UNK]. Thai, Lao, Khmer, Burmese and kana
    # runs have no spaces; on the newspaper4k Thai article 2 runs of 104 and 110 chars (0.42% of its tokens) were
    # [UNK]. Longest-match over a longer word costs only time linear in it.
    tokenizer = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"], continuing_subword_prefix=CONTINUATION,
                                           max_input_chars_per_word=MAX_WORDPIECE_WORD_CHARS))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=_strip_accents(cfg), lowercase=cfg.lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return tokenizer


def _word_counts(tokenizer: Tokenizer, texts: Iterable[str]) -> Counter:
    counts: Counter = Counter()
    normalizer, pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
    for text in texts:
        normal = normalizer.normalize_str(text) if normalizer is not None else text
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normal))
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
    """Train a tokenizer of kind `cfg.kind` on the texts that `texts_factory()` yields (called once to count the
    words and, for wordpiece and bpe, once more to train). The result depends only on the multiset of words."""
    tokenizer = _blank_tokenizer(cfg)
    words = _word_counts(tokenizer, texts_factory())
    if not words:
        raise InputError("no words to train the tokenizer on: the training documents are empty")
    specials = list(SPECIAL_TOKENS_BY_KIND[cfg.kind].values())
    if cfg.kind == "unigram":
        pieces = train_unigram_pieces(words, cfg.vocab_size - len(specials))
        return _finish(unigram_from_pieces(tokenizer, specials, SPECIAL_TOKENS_BY_KIND["unigram"]["unk"], pieces),
                       "unigram", set())
    if cfg.kind == "bpe":
        trainer = trainers.BpeTrainer(
            vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
        )
        tokenizer.train_from_iterator(texts_factory(), trainer=trainer)
        return _finish(tokenizer, "bpe", set())
    kept, continuation = _alphabet(words, cfg.limit_alphabet)
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
    return _finish(tokenizer, "wordpiece", set(continuation))


def _finish(trained: Tokenizer, kind: str, demote: set[str]) -> Tokenizer:
    """Demote the pre-registered ## tokens to ordinary vocabulary and add the family's post-processor."""
    spec = json.loads(trained.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in demote]
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokens = SPECIAL_TOKENS_BY_KIND[kind]
    cls, sep = tokens["cls"], tokens["sep"]
    if kind == "bpe":
        tokenizer.post_processor = processors.RobertaProcessing(
            (sep, tokenizer.token_to_id(sep)), (cls, tokenizer.token_to_id(cls)), trim_offsets=True,
            add_prefix_space=True)
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}",
            pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
        )
    return tokenizer


def special_ids(tokenizer: Tokenizer, source: str) -> dict[str, int]:
    """{role: id} for pad, unk, cls, sep, mask, whichever family's tokens the tokenizer carries (BERT [CLS]...,
    RoBERTa <s>..., ALBERT <pad> <unk> [CLS]...); InputError naming `source` if it has no complete set."""
    kind = tokenizer_kind(tokenizer)
    if kind is None:
        missing = "; ".join(
            f"{k}: {', '.join(t for t in toks.values() if tokenizer.token_to_id(t) is None)}"
            for k, toks in SPECIAL_TOKENS_BY_KIND.items())
        raise InputError(f"{source}: tokenizer has no complete set of special tokens (missing for {missing}); a "
                         "BERT, RoBERTa or ALBERT-style tokenizer is required")
    return {role: tokenizer.token_to_id(SPECIAL_TOKENS_BY_KIND[kind][role]) for role in ROLES}  # type: ignore


def save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    # Tokenizer.to_str is deterministic (vocab serialised by id); written atomically.
    atomic_write_text(path, tokenizer.to_str(pretty=True))


def adopt_tokenizer(source: Path, path: Path, cfg: TokenizerConfig | None = None) -> Tokenizer:
    """Use an existing tokenizer: a tokenizers JSON file (validated, copied byte for byte unless it pads or
    truncates: module docstring) or a BERT `vocab.txt` (built as WordPiece; `cfg.lowercase` / `strip_accents`
    decide the normaliser, cfg None = TokenizerConfig's defaults). Writes it to `path` as tokenizer.json."""
    if not source.is_file():
        raise InputError(f"{source}: tokenizer file not found (preprocess.tokenizer.path)")
    data = source.read_bytes()  # read once: the bytes validated are the bytes copied
    if source.suffix == ".txt":
        tokenizer = wordpiece_from_vocab(source, data, cfg or TokenizerConfig())
        special_ids(tokenizer, str(source))
        atomic_write_text(path, tokenizer.to_str(pretty=True))
        return tokenizer
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # tokenizers raises plain Exception subclasses for bad JSON
        raise InputError(f"{source}: not a valid tokenizers JSON file ({err})") from None
    special_ids(tokenizer, str(source))
    spec = json.loads(data)
    if _byte_level_without_prefix_space(spec.get("pre_tokenizer")):
        logger.warning("%s: byte-level pre-tokenizer without add_prefix_space: each sentence's first word is spelled "
                       "without the word-start marker, so whole-word / n-gram / span / entity masking joins it to the "
                       "previous sentence's last word (set \"add_prefix_space\": true to avoid it)", source)
    if spec.get("padding") or spec.get("truncation"):
        # the pipeline encodes one sentence at a time and packs the ids itself: a file's fixed padding would add
        # pad ids to every sentence, its truncation cut long ones; the vocabulary and ids are unchanged
        logger.info("%s: its padding / truncation settings (%s / %s) are dropped from the adopted copy: preprocessing "
                    "packs sentences itself", source, spec.get("padding"), spec.get("truncation"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        atomic_write_text(path, tokenizer.to_str(pretty=True))
        return tokenizer
    atomic_write_bytes(path, data)
    return tokenizer


HF_WORDPIECE_MAX_WORD_CHARS = 100  # BertTokenizerFast's max_input_chars_per_word: the same ids as the model's own


def wordpiece_from_vocab(source: Path, data: bytes, cfg: TokenizerConfig) -> Tokenizer:
    """A BERT vocab.txt (its bytes `data`) -> the WordPiece tokenizer BertTokenizerFast builds from it; InputError
    naming the file and line for a file that is not one."""
    text = decode_utf8(data, source, hint="; a vocab.txt is UTF-8, one token a line")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    vocab: dict[str, int] = {}
    for number, raw in enumerate(lines, 1):
        token = raw.rstrip("\r")
        if not token or token != token.strip():
            raise InputError(f"{source}:{number}: {'empty line' if not token else repr(token) + ' has surrounding whitespace'}"
                             "; a vocab.txt holds one WordPiece token per line, its id the line number - 1")
        if token in vocab:
            raise InputError(f"{source}:{number}: token {token!r} repeats line {vocab[token] + 1}; each token must be "
                             "listed once (its line gives its id)")
        vocab[token] = number - 1
    if not vocab:
        raise InputError(f"{source}: empty vocab.txt; expected one WordPiece token per line")
    _check_vocab_casing(source, cfg)
    specials = SPECIAL_TOKENS_BY_KIND["wordpiece"]
    missing = [t for t in specials.values() if t not in vocab]
    if missing:
        raise InputError(f"{source}: vocab.txt lacks BERT's special token(s) {', '.join(missing)}; a BERT WordPiece "
                         "vocabulary lists [PAD], [UNK], [CLS], [SEP] and [MASK]")
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=specials["unk"], continuing_subword_prefix=CONTINUATION,
                                           max_input_chars_per_word=HF_WORDPIECE_MAX_WORD_CHARS))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=_strip_accents(cfg), lowercase=cfg.lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    tokenizer.add_special_tokens(list(specials.values()))  # never split, never normalised: as HF's file marks them
    cls, sep = specials["cls"], specials["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    return tokenizer


def _check_vocab_casing(source: Path, cfg: TokenizerConfig) -> None:
    """A HF tokenizer_config.json beside the vocab.txt says whether the vocabulary is cased; a recipe lowercasing
    otherwise would map text onto the wrong tokens, so the two must agree."""
    config_path = source.parent / "tokenizer_config.json"
    if not config_path.is_file():
        return
    try:
        doc = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{config_path}: not a readable JSON file ({err}); it describes {source}") from None
    says = doc.get("do_lower_case") if isinstance(doc, dict) else None
    if isinstance(says, bool) and says != cfg.lowercase:
        raise InputError(f"{config_path}: do_lower_case is {str(says).lower()} but preprocess.tokenizer.lowercase is "
                         f"{str(cfg.lowercase).lower()}; set preprocess.tokenizer.lowercase: {str(says).lower()} to "
                         f"adopt {source}")


def _byte_level_without_prefix_space(pre_tokenizer: dict | None) -> bool:
    """Whether a tokenizer.json pre_tokenizer (possibly a Sequence) has a ByteLevel step without a prefix space."""
    if not pre_tokenizer:
        return False
    steps = pre_tokenizer.get("pretokenizers", [pre_tokenizer])
    return any(step.get("type") == "ByteLevel" and not step.get("add_prefix_space", False) for step in steps)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    lines = Path(sys.argv[2]).read_text(encoding="utf-8").splitlines()
    cfg = TokenizerConfig(vocab_size=int(sys.argv[3]) if len(sys.argv) > 3 else 30522,
                          kind=sys.argv[4] if len(sys.argv) > 4 else "wordpiece")
    save_tokenizer(train_tokenizer(lambda: iter(lines), cfg), Path(sys.argv[1]))
