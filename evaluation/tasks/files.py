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
as `O, B-x, I-x, ...` — and a dev/test label outside that set is an error too. A record of a table whose label is
missing (empty, JSON null, NaN, `null`, `n/a`, ...: tabular.MISSING_LABELS) is dropped and counted
(`dropped.missing_label`, with a warning naming the lines). Without `label_names`, a label with fewer than 5 % of
the most frequent label's training examples (RARE_LABEL_FRACTION) is kept but warned about and listed in
`TaskData.suspicious_labels` (results.json: `data.suspicious_labels`): typically a typo such as `maybe`.

    data = load_task_file(Path("reviews.csv"), "classification", text_column="review", label_column="stars")
    data = load_task_file(Path("train.conll"), "tagging", dev_path=Path("dev.conll"), test_path=Path("test.conll"))
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bertfactory.errors import ConfigError, InputError

from .base import TASK_TYPES, AnyExample, TaggingExample, TaskData
from .conll import bio_label_set, read_conll, tag_ids
from .reading import SPLIT_PLANS, LabelSet, assign_splits, describe_sources, plan_description, require_filled
from .squad import read_squad, usable_for_training
from .tabular import Columns, Records, build_examples, check_columns, is_missing_label, label_value, read_records

logger = logging.getLogger(__name__)

SQUAD_SPLIT_KEYS = ("title", "id", "context")
# A label with fewer examples than this fraction of the most frequent label's is reported as suspicious (kept as a
# class; warned about in the log and listed in results.json) when the label set is inferred from the file.
RARE_LABEL_FRACTION = 0.05


def unread_columns(task_type: str, text_column: str | None, text_b_column: str | None,
                   label_column: str | None, label_names: Sequence[str] | None = None) -> str | None:
    """Why a column (or label set) named for this task type would not be read (a second text of a `classification`
    task, any column of a CoNLL or SQuAD file, label names of a task without classes), or None. Left out without a
    word, such a setting changed what the user evaluated: `--task-type classification --text-b-column hypothesis`
    fine-tuned on the premises alone."""
    if label_names is not None and task_type in ("regression", "squad", "multiple-choice"):
        what = {"regression": "its labels are numbers", "squad": "its answers are spans of the context",
                "multiple-choice": "its label is an option (index or letter)"}[task_type]
        return f"label_names (--label-names) {list(label_names)}: a {task_type} task has no label set ({what})"
    if task_type == "classification" and text_b_column is not None:
        return (f"text_b_column (--text-b-column) {text_b_column!r}: a classification task reads one text; a task of "
                "two texts is task type pair-classification")
    named = [f"{key} (--{key.replace('_', '-')}) {value!r}" for key, value in
             (("text_column", text_column), ("text_b_column", text_b_column), ("label_column", label_column))
             if value is not None]
    if task_type in ("tagging", "squad") and named:
        layout = ("a CoNLL/BIO file has no named columns: the first field of a line is the word, the last its tag"
                  if task_type == "tagging" else "a SQuAD file has no columns: its JSON keys are fixed")
        return f"{', '.join(named)}: {layout}"
    return None


def _plan(dev_path: Path | None, test_path: Path | None) -> str:
    if dev_path is None:
        return "train/dev/test" if test_path is None else "train/dev"
    return "train/test" if test_path is None else "train"


def _split_method(plan: str, what: str, dev_path: Path | None, test_path: Path | None) -> str:
    parts = [plan_description(plan, what) if plan != "train" else "the first file is all train"]
    parts += [f"{split} = {p}" for split, p in (("dev", dev_path), ("test", test_path)) if p is not None]
    return "; ".join(parts)


def _few_keys(train: Sequence[tuple[str, AnyExample]], plan: str, key_what: str) -> str:
    """Why a split drawn from the first file can be empty although it has many examples: they share few split keys
    (duplicates, or a SQuAD file of one article or without titles), each key's examples going to one split."""
    keys = len({key for key, _ in train})
    if plan == "train" or keys >= 20 or keys == len(train):
        return ""
    return (f": its {len(train)} examples have {keys} distinct split key(s) ({key_what}), and the examples of a key "
            "share a split; give the missing splits their own files (dev_path / test_path; --dev-file / --test-file)")


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


def _without_missing_labels(records: Records, column: str, label_names: Sequence[str] | None) -> tuple[Records, int]:
    """The records whose label is a label (not empty / NaN / null), and how many were not; logged naming lines."""
    kept, missing = [], []
    for lineno, row in records.rows:
        if column in row and is_missing_label(label_value(records, lineno, row, column), label_names):
            missing.append(lineno)
        else:
            kept.append((lineno, row))
    if missing:
        lines = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        logger.warning("%s: %d example(s) with no label (empty, NaN or null in column %r; line(s) %s) dropped "
                       "(counted as dropped.missing_label)", records.path, len(missing), column, lines)
    return Records(records.path, records.columns, tuple(kept)), len(missing)


def suspicious_labels(counts: Counter) -> dict[str, int]:
    """Labels with fewer than RARE_LABEL_FRACTION of the most frequent label's examples: in a file whose label set
    was inferred, these are often typos or stray values (`maybe` among 150 `pos` and 150 `neg`)."""
    most = max(counts.values(), default=0)
    return {label: n for label, n in sorted(counts.items()) if n < RARE_LABEL_FRACTION * most}


def _table_items(paths: dict[str, Path], task_type: str, columns: Columns, label_names: Sequence[str] | None,
                 split_key: str | None, dropped: dict[str, int]
                 ) -> tuple[dict[str, list], tuple[str, ...], dict[str, int]]:
    """-> (split -> [(split key, example)], label names, suspicious labels of the training file)."""
    records = {split: read_records(p) for split, p in paths.items()}
    for r in records.values():
        check_columns(r, task_type, columns, split_key)
    labels = None
    suspicious: dict[str, int] = {}
    if task_type in ("classification", "pair-classification"):
        column = columns.label or "label"
        missing = 0
        for split, r in records.items():
            records[split], n = _without_missing_labels(r, column, label_names)
            missing += n
        if missing:
            dropped["missing_label"] = missing
        train = records["train"]
        if label_names is not None:
            labels = LabelSet(tuple(label_names))
        else:
            counts = Counter(label_value(train, n, row, column) for n, row in train.rows)
            if len(counts) < 2:
                raise _too_few_labels(train.path, sorted(counts))
            labels = LabelSet.infer(set(counts))
            suspicious = suspicious_labels(counts)
            for label, n in suspicious.items():
                logger.warning("%s: label %r has only %d example(s), against %d of the most frequent label: a typo "
                               "or a stray value? It is kept as a class (results.json: data.suspicious_labels); give "
                               "label_names (--label-names) to fix the label set", train.path, label, n,
                               max(counts.values()))
    items = {split: build_examples(r, task_type, columns, labels, split_key) for split, r in records.items()}
    return items, labels.names if labels else (), suspicious


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
                   split_seed_key: str | None = None, test_only: bool = False) -> TaskData:
    """`test_only`: every example of the one file is a test example (a cross-lingual target, never trained on): the
    file is not split, so no split has to be filled."""
    if task_type not in TASK_TYPES:
        raise ConfigError(f"task type {task_type!r} is not one of {', '.join(TASK_TYPES)}")
    if (problem := unread_columns(task_type, text_column, text_b_column, label_column, label_names)) is not None:
        raise ConfigError(problem)
    if test_only and (dev_path is not None or test_path is not None):
        raise ConfigError("test_only reads one file as test examples; it takes no dev_path / test_path")
    paths = {"train": Path(path)}
    paths.update({split: Path(p) for split, p in (("dev", dev_path), ("test", test_path)) if p is not None})
    plan = _plan(paths.get("dev"), paths.get("test"))
    dropped: dict[str, int] = {}
    suspicious: dict[str, int] = {}
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
        items, names, suspicious = _table_items(paths, task_type, columns, label_names, split_seed_key, dropped)
        key_what = (f"the {split_seed_key!r} column" if split_seed_key else
                    "the id column, else the text(s)")
    if task_type != "squad":
        _check_unique_ids({str(paths[s]): v for s, v in items.items()})
    splits = assign_splits(items["train"], lambda item: item[0], SPLIT_PLANS[plan])
    for split in ("dev", "test"):
        if split in items:
            splits[split] = items[split]
    examples = {split: [item[1] for item in splits.get(split, [])] for split in ("train", "dev", "test")}
    if test_only:  # kept in the order of the reader's splits, as before test_only existed (which examples a
        # max_eval_examples subset takes depends on it)
        examples = {"train": [], "dev": [], "test": [e for split in examples.values() for e in split]}
        if task_type == "squad":
            examples["test"] = [q.example for q in examples["test"]]
        if not examples["test"]:
            raise InputError(f"{paths['train']}: no examples")
    elif task_type == "squad":
        usable = [usable_for_training(q) for q in examples["train"]]
        dropped["train_question_without_valid_answer"] = sum(e is None for e in usable)
        examples = {"train": [e for e in usable if e is not None],
                    "dev": [q.example for q in examples["dev"]], "test": [q.example for q in examples["test"]]}
    if task_type == "squad":
        _check_unique_ids({"the SQuAD files": [(e.id, e) for split in examples.values() for e in split]})
    if not test_only:
        require_filled(examples, str(paths["train"]), _few_keys(items["train"], plan, key_what))
    if task_type == "regression":  # scored by Pearson / Spearman, undefined for one pair (was a ValueError traceback
        # after the fine-tuning)
        targets = {e.target for e in examples["train"]}
        if len(targets) == 1:  # nothing to learn, and every correlation undefined: results.json had no pearson at all
            raise InputError(f"{paths['train']}: every training target is {targets.pop()}: a regression task needs "
                             "targets that differ (is the label column the right one?)")
        short = [split for split in ("dev", "test") if len(examples[split]) == 1]
        if short:
            where = ", ".join(dict.fromkeys(str(paths.get(split, paths["train"])) for split in short))
            raise InputError(f"{where}: a regression task scores its dev and test splits by Pearson and Spearman "
                             f"correlation, which need at least 2 examples ({', '.join(f'{s} 1' for s in short)})")
    source = describe_sources(list(paths.values()))
    source.update(source_extra)
    return TaskData.from_splits(
        examples,
        name=name or paths["train"].stem,
        label_names=tuple(names),
        source=source,
        split_method=("every example is a test example (not split)" if test_only else
                      _split_method(plan, key_what, paths.get("dev"), paths.get("test"))),
        dropped=dropped,
        suspicious_labels=suspicious,
        task_type=task_type,
        language=language,
    )
