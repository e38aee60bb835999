"""What every downstream task reader returns: typed examples split into train/dev/test, plus the facts about the
source that the results record (path, sha256, how the split was made, what was dropped).

Task types and their example classes (one reader per file layout; one head per type in the fine-tuning loop):

| task_type             | example            | label                                   | metrics (primary first)            |
|-----------------------|--------------------|-----------------------------------------|------------------------------------|
| classification        | Example            | `label` index into `label_names`        | accuracy, f1 (binary) / macro_f1, mcc |
| pair-classification   | Example (text_b)   | `label`                                 | accuracy, f1 / macro_f1, mcc       |
| regression            | RegressionExample  | `target` float                          | pearson, spearman                  |
| tagging               | TaggingExample     | `tags` indices into `label_names` (BIO) | entity_f1 (seqeval semantics)      |
| squad                 | SquadExample       | answers (text, char start) / impossible | exact, f1 (v2: best_exact, best_f1)|
| multiple-choice       | ChoiceExample      | `label` index into `options`            | accuracy                           |
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

TaskType = Literal["classification", "pair-classification", "regression", "tagging", "squad", "multiple-choice"]
TASK_TYPES: tuple[str, ...] = ("classification", "pair-classification", "regression", "tagging", "squad",
                               "multiple-choice")


@dataclass(frozen=True)
class Example:
    """A (single or pair) classification example: `label` indexes TaskData.label_names."""

    id: str
    text: str
    label: int
    text_b: str | None = None


@dataclass(frozen=True)
class RegressionExample:
    id: str
    text: str
    target: float
    text_b: str | None = None


@dataclass(frozen=True)
class TaggingExample:
    """Pre-split words with one tag index per word (the first sub-token of a word carries its label)."""

    id: str
    words: tuple[str, ...]
    tags: tuple[int, ...]


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset of `text` in the context (validated by the reader)


@dataclass(frozen=True)
class SquadExample:
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]  # empty when is_impossible (SQuAD v2.0)
    is_impossible: bool = False
    title: str = ""


@dataclass(frozen=True)
class ChoiceExample:
    """RACE-style: a passage (`context`, may be empty), a question and the options; `label` indexes options."""

    id: str
    context: str
    question: str
    options: tuple[str, ...]
    label: int


AnyExample = Union[Example, RegressionExample, TaggingExample, SquadExample, ChoiceExample]


@dataclass(frozen=True)
class TaskData:
    name: str
    label_names: tuple[str, ...]  # class / tag names; empty for regression, squad and multiple-choice
    train: tuple[AnyExample, ...]
    dev: tuple[AnyExample, ...]
    test: tuple[AnyExample, ...]
    source: dict[str, Any]  # path, sha256, lines
    split_method: str
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    suspicious_labels: dict[str, int] = field(default_factory=dict)  # rare label -> training examples (see files.py)
    task_type: str = "classification"  # one of TASK_TYPES
    language: str = "en"  # ISO 639 code of the text (cross-lingual transfer evaluates on other languages)

    @classmethod
    def from_splits(cls, splits: Mapping[str, Sequence[AnyExample]], **fields: Any) -> TaskData:
        """The task whose train, dev and test are the examples of `splits` ("train", "dev", "test" -> examples, each
        made a tuple); `fields`: the other fields (name, label_names, source, split_method, ...) as given."""
        return cls(train=tuple(splits["train"]), dev=tuple(splits["dev"]), test=tuple(splits["test"]), **fields)

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "dev": len(self.dev), "test": len(self.test)}


def hash_bucket(key: str, buckets: int = 100) -> int:
    """A stable bucket in [0, buckets) from the sha256 of `key` (UTF-8): the first 8 digest bytes as a big-endian
    integer, modulo `buckets`. Independent of file order, Python's hash seed and the platform."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % buckets


def split_of(key: str, train_pct: int = 80, dev_pct: int = 10) -> str:
    """'train' for buckets [0, train_pct), 'dev' for the next dev_pct, 'test' for the rest."""
    bucket = hash_bucket(key)
    if bucket < train_pct:
        return "train"
    return "dev" if bucket < train_pct + dev_pct else "test"
