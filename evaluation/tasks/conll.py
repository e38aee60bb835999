"""CoNLL / BIO token-tagging files: one token per line, `word<TAB>tag` or `word tag` (whitespace separated; with
more than two fields, as in CoNLL-2003's `word POS chunk NER`, the first is the word and the last the tag), a blank
(or whitespace-only) line between sentences, `-DOCSTART-` lines skipped. Tags are BIO: `O`, `B-<type>`,
`I-<type>`. Any UTF-8 text; LF or CRLF.

    sentences = read_conll(Path("train.conll"))       # [ConllSentence(line, words, tags)]
    labels = bio_label_set(s.tags for s in sentences)  # O, B-loc, I-loc, B-org, I-org, ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bertfactory.errors import InputError

from .reading import LabelSet, read_text, split_lines

BIO_TAG = re.compile(r"^(O|[BI]-\S+)$")
DOCSTART = "-DOCSTART-"


@dataclass(frozen=True)
class ConllSentence:
    line: int  # where the sentence's first token is
    words: tuple[str, ...]
    tags: tuple[str, ...]
    tag_lines: tuple[int, ...]  # the line of each token, for errors about its tag


def read_conll(path: Path) -> list[ConllSentence]:
    sentences: list[ConllSentence] = []
    words: list[str] = []
    tags: list[str] = []
    lines: list[int] = []

    def close() -> None:
        if words:
            sentences.append(ConllSentence(lines[0], tuple(words), tuple(tags), tuple(lines)))
            words.clear()
            tags.clear()
            lines.clear()

    for lineno, line in enumerate(split_lines(read_text(path)), start=1):
        if not line.strip():
            close()
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [f.strip() for f in fields]
        if fields[0] == DOCSTART:
            close()
            continue
        if len(fields) < 2 or not fields[0] or not fields[-1]:
            raise InputError(f"{path}:{lineno}: expected a word and its tag (`word<TAB>tag`), found {line[:80]!r}")
        if not BIO_TAG.match(fields[-1]):
            raise InputError(f"{path}:{lineno}: tag {fields[-1]!r} is not BIO (O, B-<type> or I-<type>)")
        words.append(fields[0])
        tags.append(fields[-1])
        lines.append(lineno)
    close()
    if not sentences:
        raise InputError(f"{path}: no tagged tokens")
    return sentences


def bio_label_set(tag_sequences: Iterable[Iterable[str]]) -> LabelSet:
    """`O`, then `B-<type>`, `I-<type>` for every entity type seen (types sorted), both prefixes always present."""
    types = sorted({tag[2:] for tags in tag_sequences for tag in tags if tag != "O"})
    return LabelSet(("O", *(f"{prefix}-{t}" for t in types for prefix in "BI")))


def tag_ids(sentence: ConllSentence, labels: LabelSet, path: Path) -> tuple[int, ...]:
    return tuple(labels.index(tag, path, lineno) for tag, lineno in zip(sentence.tags, sentence.tag_lines))
