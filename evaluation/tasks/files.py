"""Any user task from files: `load_task_file(path, task_type, ...)` reads TSV/CSV/JSONL (classification,
pair-classification, regression, multiple-choice), CoNLL/BIO (tagging) or SQuAD JSON (squad) into a TaskData.

Splits: the file at `path` supplies every split that has no file of its own, by hash of a stable key
(reading.SPLIT_PLANS): no dev/test file -> 80/10/10 train/dev/test; a dev file only -> 90/10 train/test; a test
file only -> 90/10 train/dev; both -> all of `path` is train. The key (`split_seed_key`):
- None (default): tables -> the `id` column when there is one, else the text(s) (so duplicates share a split);
  tagging -> the sentence's words; squad -> the article title (questions on one article never straddle splits).
- a column / JSONL key name (tables); "id" (tagging: the sentence id; squad: the question id); "title" or
  "context" (squad).
Labels: `label_names` fixes the label set (a label outside it is an error naming the file, line and value);
without it the set is what the training file (`path`) uses — integers in numeric order, else sorted text, BIO tags
as `O, B-x, I-x, ...` — and a dev/test label outside that set is an error too.

    data = load_task_file(Path("reviews.csv"), "classification", text_column="review", label_column="stars")
    data = load_task_file(Path("train.conll"), "tagging", dev_path=Path("dev.conll"), test_path=Path("test.conll"))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bertfactory.errors import ConfigError, InputError

from .base import TASK_TYPES, AnyExample, TaggingExample, TaskData
from .conll import bio_label_set, read_conll, tag_ids
from .reading import SPLIT_PLANS, LabelSet, assign_splits, describe_sources, plan_description, require_filled
from .squad import read_squad, usable_for_training
from .tabular import Columns, build_examples, check_columns, label_value, read_records

SQUAD_SPLIT_KEYS = ("title", "id", "context")


def _plan(dev_path: Path | None, test_path: Path | None) -> str:
    if dev_path is None:
        return "train/dev/test" if test_path is None else "train/dev"
    return "train/test" if test_path is None else "train"


def _split_method(plan: str, what: str, dev_path: Path | None, test_path: Path | None) -> str:
    parts = [plan_description(plan, what) if plan != "train" else "the first file is all train"]
    parts += [f"{split} = {p}" for split, p in (("dev", dev_path), ("test", test_path)) if p is not None]
    return "; ".join(parts)


def _check_unique_ids(files: dict[str, Sequence[tuple[str, AnyExample]]]) -> None:
    seen: dict[str, str] = {}
    for file, items in files.items():
        for _, example in items:
            if example.id in seen:
                raise InputError(f"{file}: example id {example.id!r} is also used in {seen[example.id]}; ids must be "
                                 "unique across the task's files (add an `id` column or rename the files)")
            seen[example.id] = file


def _too_few_labels(path: Path, found: Sequence[str]) -> InputError:
    return InputError(f"{path}: the training file uses fewer than 2 distinct labels ({', '.join(found) or 'none'}); "
                      "pass label_names to fix the label set")


def _table_items(paths: dict[str, Path], task_type: str, columns: Columns, label_names: Sequence[str] | None,
                 split_key: str | None) -> tuple[dict[str, list], tuple[str, ...]]:
    records = {split: read_records(p) for split, p in paths.items()}
    for r in records.values():
        check_columns(r, task_type, columns, split_key)
    labels = None
    if task_type in ("classification", "pair-classification"):
        train = records["train"]
        column = columns.label or "label"
        if label_names is not None:
            labels = LabelSet(tuple(label_names))
        else:
            found = {label_value(train, n, row, column) for n, row in train.rows}
            if len(found) < 2:
                raise _too_few_labels(train.path, sorted(found))
            labels = LabelSet.infer(found)
    items = {split: build_examples(r, task_type, columns, labels, split_key) for split, r in records.items()}
    return items, labels.names if labels else ()


def _tagging_items(paths: dict[str, Path], label_names: Sequence[str] | None,
                   split_key: str | None) -> tuple[dict[str, list], tuple[str, ...]]:
    if split_key not in (None, "id"):
        raise ConfigError(f"split_seed_key {split_key!r}: a tagging file has no columns; use None (the words) or 'id'")
    sentences = {split: read_conll(p) for split, p in paths.items()}
    if label_names is not None:
        labels = LabelSet(tuple(label_names))
    else:
        found = {tag for s in sentences["train"] for tag in s.tags}
        if found == {"O"}:
            raise _too_few_labels(paths["train"], ["O"])
        labels = bio_label_set([found])
    items = {}
    for split, path in paths.items():
        items[split] = []
        for n, s in enumerate(sentences[split], start=1):
            example = TaggingExample(f"{path.stem}-{n}", s.words, tag_ids(s, labels, path))
            items[split].append((example.id if split_key == "id" else " ".join(s.words), example))
    return items, labels.names


def load_task_file(path: str | Path, task_type: str, text_column: str | None = None, text_b_column: str | None = None,
                   label_column: str | None = None, label_names: Sequence[str] | None = None, language: str = "en",
                   name: str | None = None, dev_path: str | Path | None = None, test_path: str | Path | None = None,
                   split_seed_key: str | None = None) -> TaskData:
    if task_type not in TASK_TYPES:
        raise ConfigError(f"task type {task_type!r} is not one of {', '.join(TASK_TYPES)}")
    paths = {"train": Path(path)}
    paths.update({split: Path(p) for split, p in (("dev", dev_path), ("test", test_path)) if p is not None})
    plan = _plan(paths.get("dev"), paths.get("test"))
    dropped: dict[str, int] = {}
    source_extra: dict = {}
    if task_type == "tagging":
        items, names = _tagging_items(paths, label_names, split_seed_key)
        key_what = "sentence id" if split_seed_key == "id" else "the sentence's words joined by spaces"
    elif task_type == "squad":
        key = split_seed_key or "title"
        if key not in SQUAD_SPLIT_KEYS:
            raise ConfigError(f"split_seed_key {key!r} for a SQuAD file must be one of {', '.join(SQUAD_SPLIT_KEYS)}")
        parsed = {split: read_squad(p) for split, p in paths.items()}
        source_extra["squad_version"] = parsed["train"].version
        key_of = {"title": lambda q: q.article, "id": lambda q: q.example.id, "context": lambda q: q.example.context}
        items = {split: [(key_of[key](q), q) for q in f.questions] for split, f in parsed.items()}
        names = ()
        key_what = {"title": "article title", "id": "question id", "context": "paragraph context"}[key]
        dropped["answer_start_mismatch"] = sum(f.mismatched for f in parsed.values())
    else:
        columns = Columns(text_column, text_b_column, label_column)
        items, names = _table_items(paths, task_type, columns, label_names, split_seed_key)
        key_what = (f"the {split_seed_key!r} column" if split_seed_key else
                    "the id column, else the text(s)")
    if task_type != "squad":
        _check_unique_ids({str(paths[s]): v for s, v in items.items()})
    splits = assign_splits(items["train"], lambda item: item[0], SPLIT_PLANS[plan])
    for split in ("dev", "test"):
        if split in items:
            splits[split] = items[split]
    examples = {split: [item[1] for item in splits.get(split, [])] for split in ("train", "dev", "test")}
    if task_type == "squad":
        usable = [usable_for_training(q) for q in examples["train"]]
        dropped["train_question_without_valid_answer"] = sum(e is None for e in usable)
        examples = {"train": [e for e in usable if e is not None],
                    "dev": [q.example for q in examples["dev"]], "test": [q.example for q in examples["test"]]}
        _check_unique_ids({"the SQuAD files": [(e.id, e) for split in examples.values() for e in split]})
    require_filled(examples, str(paths["train"]))
    source = describe_sources(list(paths.values()))
    source.update(source_extra)
    return TaskData(
        name=name or paths["train"].stem,
        label_names=tuple(names),
        train=tuple(examples["train"]),
        dev=tuple(examples["dev"]),
        test=tuple(examples["test"]),
        source=source,
        split_method=_split_method(plan, key_what, paths.get("dev"), paths.get("test")),
        dropped=dropped,
        task_type=task_type,
        language=language,
    )
