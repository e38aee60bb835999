"""Refuse a given tokenizer that does not fit the corpus: measured before the job runs, on a sample of the corpus.

A tokenizer made for other text (another language or script) maps much of this corpus to its unknown token, and
the model then learns from [UNK]s: a 633-token Bulgarian WordPiece on English news gave 37.7 % [UNK] and the stage
said nothing. `check_unk_rate` encodes the *UNK-check sample* with the tokenizer and refuses it (InputError, the
CLI's exit 2) when the share of tokens that are the unknown token exceeds `preprocess.tokenizer.max_unk_rate`
(default 5 %: a tokenizer trained on the corpus's own language is far below 1 %; byte-level BPE has no unknown
token and is never refused), unless `preprocess.tokenizer.allow_high_unk` (`--allow-high-unk`) says to go on,
which logs the rate instead.

The UNK-check sample (deterministic, bounded, read in the driver before any Beam work): the input files in
corpus order, up to SAMPLE_FILES of them, each read from its start by its reader (preprocessing.sources) until
FILE_CHARS characters of text, SAMPLE_CHARS in all; Wikipedia pages are cleaned to plain text as the pipeline
cleans them (namespaces and redirects skipped), sentence pairs give both sides. A file that breaks while being
sampled gives what it gave before the break (the job itself quarantines it).

    python -m preprocessing.tokenizer_check TOKENIZER.json configs/local.yaml    # prints the rate on its corpus
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from tokenizers import Tokenizer

from bertfactory.errors import InputError
from bertfactory.tokens import SPECIAL_TOKENS_BY_KIND, tokenizer_kind

from .config import CorpusConfig, TokenizerConfig

logger = logging.getLogger(__name__)

SAMPLE_FILES = 50  # input files read for the sample (the first ones, in corpus order)
FILE_CHARS = 50_000  # characters of text taken from one file at most
SAMPLE_CHARS = 200_000  # characters in the whole sample: ~40 k tokens, a rate stable to a fraction of a percent


@dataclass(frozen=True)
class UnkRate:
    """What the tokenizer made of the sample."""

    tokens: int
    unknown: int
    chars: int
    files: int
    examples: list[str]  # the words most often mapped to the unknown token (up to 5)

    @property
    def rate(self) -> float:
        return self.unknown / self.tokens if self.tokens else 0.0


def sample_texts(corpus: CorpusConfig, files: list[str]) -> Iterator[str]:
    """The UNK-check sample's texts (see the module docstring)."""
    from .sources import read_records

    total = 0
    for source, path in enumerate(files[:SAMPLE_FILES]):
        taken = 0
        try:
            for record in read_records(corpus, path, source):
                for text in _texts(record, corpus):
                    text = text[: min(FILE_CHARS - taken, SAMPLE_CHARS - total)]
                    taken, total = taken + len(text), total + len(text)
                    yield text
                if taken >= FILE_CHARS or total >= SAMPLE_CHARS:
                    break
        except InputError:  # a broken or unreadable file: what it gave counts; the job reports the file itself
            pass
        if total >= SAMPLE_CHARS:
            return


def _texts(record, corpus: CorpusConfig) -> list[str]:
    from .records import Document, SentencePair
    from .sources.wikipedia import Page

    if isinstance(record, Document):
        return [p for p in record.paragraphs if p.strip()]
    if isinstance(record, SentencePair):
        return [record.src_text, record.tgt_text]
    if isinstance(record, Page) and record.namespace in corpus.namespaces and not record.redirect:
        from .clean import wikitext_to_paragraphs

        try:
            return wikitext_to_paragraphs(record.text, corpus.drop_sections, corpus.keep_lists,
                                          corpus.min_paragraph_chars)
        except Exception:  # noqa: BLE001 - the job quarantines a page its parser fails on; the sample skips it
            return []
    return []


def measure_unk_rate(tokenizer: Tokenizer, texts: Iterator[str]) -> UnkRate:
    """Tokens and unknown tokens of `texts` (without special tokens), and the words most often unknown. A
    tokenizer that pads or truncates (a Hugging Face model's tokenizer.json: MiniLM's pads every text to 128) is
    measured without that, as the pipeline adopts it (preprocessing.tokenizer.adopt_tokenizer): its pad ids counted
    as tokens gave 2.3 % unknown on the tiny-mbert corpus, where the adopted copy makes 5.8 %."""
    if tokenizer.padding or tokenizer.truncation:
        tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.no_truncation()
    kind = tokenizer_kind(tokenizer)
    unk_id = tokenizer.token_to_id(SPECIAL_TOKENS_BY_KIND[kind]["unk"]) if kind is not None else None
    tokens = unknown = chars = 0
    words: Counter = Counter()
    batch: list[str] = []

    def encode(batch: list[str]) -> None:
        nonlocal tokens, unknown
        for text, encoding in zip(batch, tokenizer.encode_batch(batch, add_special_tokens=False)):
            ids = encoding.ids
            tokens += len(ids)
            if unk_id is None or unk_id not in ids:  # most texts: no walk over every token's offsets in Python
                continue
            for token_id, (start, end) in zip(ids, encoding.offsets):
                if token_id == unk_id:
                    unknown += 1
                    words[text[start:end]] += 1

    for text in texts:
        chars += len(text)
        batch.append(text)
        if len(batch) == 256:
            encode(batch)
            batch = []
    if batch:
        encode(batch)
    examples = [word for word, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:5]]
    return UnkRate(tokens, unknown, chars, 0, examples)


def check_unk_rate(tokenizer: Tokenizer, corpus: CorpusConfig, files: list[str], cfg: TokenizerConfig,
                   source: str) -> UnkRate:
    """Measure the given tokenizer on the UNK-check sample; InputError above cfg.max_unk_rate unless
    cfg.allow_high_unk (then a warning). Returns the measurement."""
    measured = measure_unk_rate(tokenizer, sample_texts(corpus, files))
    measured = UnkRate(measured.tokens, measured.unknown, measured.chars, min(len(files), SAMPLE_FILES),
                       measured.examples)
    if measured.rate <= cfg.max_unk_rate:
        logger.info("tokenizer %s: %.2f%% unknown tokens on a %d-character sample of the corpus", source,
                    100 * measured.rate, measured.chars)
        return measured
    what = (f"{source}: this tokenizer makes {measured.rate:.1%} of the tokens unknown ({measured.unknown:,} of "
            f"{measured.tokens:,} on {measured.chars:,} characters from the first {measured.files} input file(s); "
            f"e.g. {', '.join(repr(w) for w in measured.examples)}), above preprocess.tokenizer.max_unk_rate="
            f"{cfg.max_unk_rate:g}")
    if cfg.allow_high_unk:
        logger.warning("%s; going on as preprocess.tokenizer.allow_high_unk says", what)
        return measured
    raise InputError(f"{what}: it was made for other text (another language or script?). Train one on this corpus "
                     f"(--vocab-size N instead of --tokenizer), or pass --allow-high-unk "
                     f"(preprocess.tokenizer.allow_high_unk: true) to use it anyway")


def warn_unknown_languages(fertility: dict, cfg: TokenizerConfig, source: str | None,
                           inherited: bool = False) -> list[str]:
    """One warning per language of the manifest's fertility table (preprocessing/fertility.py: a bounded sample
    per language, after cleaning and language identification) whose share of unknown tokens is above
    cfg.max_unk_rate. The check before the job measures the corpus as a blend: an English tokenizer on a corpus
    that is mostly English passes it while a Burmese tenth of the corpus becomes [UNK]s (MiniLM's WordPiece: 92 %
    unknown on the Burmese news sample). `source`: the given tokenizer, None for one trained on this corpus (whose
    alphabet limit can leave a script out); `inherited`: it is a corpus version's parent's, which every version of
    the line keeps (token ids mean the same in all of them). Text of no language (`und`: digits, symbols) is not
    said. Returns the warnings."""
    if inherited:
        fix = ("start a new corpus line without --parent (a version keeps its parent's tokenizer, so that token ids "
               "mean the same in every version)")
    elif source is not None:
        fix = "train one on this corpus (--vocab-size N instead of --tokenizer)"
    else:
        fix = "raise preprocess.tokenizer.limit_alphabet (the characters it keeps) or vocab_size"
    said = []
    for lang, row in sorted(fertility.items()):
        if lang != "und" and row.get("tokens") and row.get("unk_rate", 0.0) > cfg.max_unk_rate:
            said.append(f"tokenizer {source or '(trained on this corpus)'}: {row['unk_rate']:.1%} of the tokens of "
                        f"the {lang!r} documents are unknown (the fertility sample: {row['tokens']:,} tokens of "
                        f"{row['texts']:,} texts), above preprocess.tokenizer.max_unk_rate={cfg.max_unk_rate:g}: "
                        f"its text reaches the model as unknown tokens; to cover {lang!r}, {fix}")
    for line in said:
        logger.warning("%s", line)
    return said


if __name__ == "__main__":
    from bertfactory.config import load_yaml, validate

    from .inputs import expand_inputs

    logging.basicConfig(level=logging.INFO)
    corpus_cfg = validate(CorpusConfig, load_yaml(sys.argv[2]).get("corpus") or {}, f"{sys.argv[2]}: corpus")
    paths = [f.location for f in expand_inputs(corpus_cfg)]
    result = measure_unk_rate(Tokenizer.from_file(sys.argv[1]), sample_texts(corpus_cfg, paths))
    print(f"{result.rate:.4%} unknown ({result.unknown} of {result.tokens} tokens, {result.chars} chars); "
          f"most often: {result.examples}")
