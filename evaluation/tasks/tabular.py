"""Records from a user's task file in TSV, CSV or JSONL, turned into classification, pair-classification,
regression or multiple-choice examples. Layouts (docs/tasks.md has examples):

- `.tsv` / `.tab`: a header line of column names, then one record per line, fields split on TAB, no quoting
  (the GLUE convention: a `"` is an ordinary character).
- `.csv`: RFC 4180 (comma separated, `"` quoting, a quoted field may span lines), a header line first.
- `.jsonl` / `.ndjson`: one JSON object per line; blank lines are skipped.

Columns (defaults; `Columns` overrides the names):
- classification: `text`, `label`; pair-classification: `text`, `text_b`, `label`;
- regression: `text`, `label` (a number), and `text_b` when that column exists (or is named);
- multiple-choice: `question`, the options (`options`, a JSON list, in JSONL; columns `option0`, `option1`, ...
  in TSV/CSV), `label` (the option's 0-based index or its letter A, B, ...) and an optional `context` (passage).
An `id` column, when present, gives the example ids (which must be unique); otherwise `<file stem>-<line>`.
A classification label that is empty, JSON null / NaN, or a "no value" spelling (MISSING_LABELS) is missing:
files.load_task_file drops such records and counts them (`dropped.missing_label`).

    records = read_records(Path("train.jsonl"))
    examples = build_examples(records, "classification", Columns(text="review"), labels)
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertfactory.errors import InputError

from .base import AnyExample, ChoiceExample, Example, RegressionExample
from .reading import LabelSet, as_integer, read_text, split_lines

# Labels that mean "no label": what pandas writes for NaN/None/NA and spreadsheets for an empty or #N/A cell.
# ("none" and "na" are not here: they are real class names in some tasks.)
MISSING_LABELS = frozenset({"nan", "-nan", "null", "n/a", "#n/a", "<na>"})

TABLE_SUFFIXES = {".tsv": "tsv", ".tab": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


@dataclass(frozen=True)
class Records:
    """A file's records: each (line number where it starts, column -> value). `columns` is the header (TSV/CSV)
    or None (JSONL: every record has its own keys)."""

    path: Path
    columns: tuple[str, ...] | None
    rows: tuple[tuple[int, dict[str, Any]], ...]

    def has_column(self, name: str) -> bool:
        if self.columns is not None:
            return name in self.columns
        return any(name in row for _, row in self.rows)

    def require_column(self, name: str, role: str) -> None:
        """TSV/CSV: the header must name the column (JSONL records are checked one by one as they are read)."""
        if self.columns is not None and name not in self.columns:
            raise InputError(f"{self.path}:1: no {role} column {name!r} in the header "
                             f"(columns: {', '.join(self.columns)})")


@dataclass(frozen=True)
class Columns:
    text: str | None = None  # default "text" ("context" for multiple-choice)
    text_b: str | None = None  # default "text_b" ("question" for multiple-choice)
    label: str | None = None  # default "label"


def table_format(path: Path) -> str:
    fmt = TABLE_SUFFIXES.get(path.suffix.lower())
    if fmt is None and path.suffix.lower() == ".json":  # renamed to .jsonl, a JSON array was refused at line 1
        raise InputError(f"{path}: a .json file is no table layout: write one JSON object per line and name it .jsonl "
                         "(a JSON array of records: pandas to_json(orient='records', lines=True)); a SQuAD file is task "
                         "type squad")
    if fmt is None:
        raise InputError(f"{path}: cannot tell the layout from the extension {path.suffix!r}; "
                         f"name the file {', '.join(sorted(TABLE_SUFFIXES))}")
    return fmt


def read_records(path: Path) -> Records:
    fmt = table_format(path)
    text = read_text(path)
    if fmt == "jsonl":
        return _read_jsonl(path, text)
    return _read_delimited(path, text, fmt)


def _read_jsonl(path: Path, text: str) -> Records:
    rows = []
    for lineno, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(value, dict):
            array = " (a JSON array of records? write one object per line)" if isinstance(value, list) else ""
            raise InputError(f"{path}:{lineno}: expected a JSON object, found {type(value).__name__}{array}")
        rows.append((lineno, value))
    if not rows:
        raise InputError(f"{path}: no records")
    return Records(path, None, tuple(rows))


def _read_delimited(path: Path, text: str, fmt: str) -> Records:
    ends: dict[int, int] = {}  # CSV: first line of a record -> its last line
    if fmt == "tsv":
        numbered = [(n, line.split("\t")) for n, line in enumerate(split_lines(text), start=1) if line.strip()]
    else:
        # no field is longer than the file: the csv module's default limit (131,072 characters) refused a long
        # document as "malformed CSV (field larger than field limit)"
        csv.field_size_limit(max(csv.field_size_limit(), min(len(text), 2**31 - 1)))
        reader = csv.reader(io.StringIO(text, newline=""))
        numbered, end = [], 0
        try:
            for fields in reader:
                start, end = end + 1, reader.line_num
                if any(f.strip() for f in fields):
                    numbered.append((start, fields))
                    ends[start] = end
        except csv.Error as err:
            raise InputError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None
    if not numbered:
        raise InputError(f"{path}: no header line")
    _, header = numbered[0]
    columns = tuple(c.strip() for c in header)
    if len(set(columns)) != len(columns) or not all(columns):
        raise InputError(f"{path}:1: the header must name every column once, found {list(columns)}")
    sep = "tab-separated" if fmt == "tsv" else "comma-separated"
    rows = []
    for lineno, fields in numbered[1:]:
        if len(fields) != len(columns):
            raise InputError(f"{path}:{lineno}: expected {len(columns)} {sep} fields (as in the header), "
                             f"found {len(fields)}{_unclosed_quote(text, lineno, ends.get(lineno))}")
        rows.append((lineno, dict(zip(columns, fields))))
    if not rows:
        raise InputError(f"{path}: a header but no records")
    return Records(path, columns, tuple(rows))


def _unclosed_quote(text: str, first: int, last: int | None) -> str:
    """A CSV record with an odd number of `"`: a quote opened and never closed, which takes the rest of the record's
    line and the lines after it (to the next quote or the end of the file) into one field: said, as the field count
    alone ("found 1") does not tell why."""
    if last is None:
        return ""
    lines = split_lines(text)[first - 1:last]
    if sum(line.count('"') for line in lines) % 2 == 0:
        return ""
    upto = f" (the record runs to line {last})" if last > first else ""
    return f": a `\"` is opened and not closed{upto}"


def _value(records: Records, lineno: int, row: dict, name: str, role: str) -> Any:
    if name not in row:
        raise InputError(f"{records.path}:{lineno}: no {role} key {name!r} (keys: {', '.join(row)})")
    return row[name]


def text_value(records: Records, lineno: int, row: dict, name: str, role: str) -> str:
    value = _value(records, lineno, row, name, role)
    if not isinstance(value, str):
        raise InputError(f"{records.path}:{lineno}: {role} {name!r} must be a string, found {value!r}")
    if not value.strip():
        raise InputError(f"{records.path}:{lineno}: empty {role} in column {name!r}")
    return value.strip()


def label_value(records: Records, lineno: int, row: dict, name: str) -> str:
    """The label as text; '' for a JSON null or NaN (a missing label, see is_missing_label); a JSON number with no
    fraction as the integer (1.0 -> '1')."""
    value = _value(records, lineno, row, name, "label")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):  # JSON true/false, spelled as in the file
        return "true" if value else "false"
    if isinstance(value, int) or isinstance(value, str):
        return str(value).strip()
    if isinstance(value, float) and value.is_integer():  # pandas writes an integer column holding NaN as 1.0, null
        return str(int(value))
    raise InputError(f"{records.path}:{lineno}: label {value!r} in {name!r} must be a string or an integer")


def is_missing_label(label: str, label_names: Sequence[str] | None = None) -> bool:
    """Whether a classification label is a missing value rather than a class: empty, or a spelling that
    spreadsheets and pandas write for "no value" (MISSING_LABELS, any case) unless `label_names` lists it."""
    if not label.strip():
        return True
    return label.strip().lower() in MISSING_LABELS and (label_names is None or label not in label_names)


def number_value(records: Records, lineno: int, row: dict, name: str) -> float:
    value = _value(records, lineno, row, name, "target")
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise InputError(f"{records.path}:{lineno}: target {value!r} in {name!r} is not a finite number")
    return number


def example_id(records: Records, lineno: int, row: dict) -> str:
    if "id" in row:
        value = str(row["id"]).strip()
        if not value:
            raise InputError(f"{records.path}:{lineno}: empty id")
        return value
    return f"{records.path.stem}-{lineno}"


def option_values(records: Records, lineno: int, row: dict) -> tuple[str, ...]:
    if records.columns is None:
        options = _value(records, lineno, row, "options", "options")
        if not isinstance(options, list) or not all(isinstance(o, str) and o.strip() for o in options):
            raise InputError(f"{records.path}:{lineno}: 'options' must be a list of non-empty strings")
    else:
        # a record with fewer options than the file's columns (ARC: 3 to 5) leaves the last cells empty
        cells = []
        while f"option{len(cells)}" in row:
            cells.append(row[f"option{len(cells)}"])
        while cells and not str(cells[-1]).strip():
            cells.pop()
        options = [text_value(records, lineno, row, f"option{i}", "option") for i in range(len(cells))]
    if len(options) < 2:
        raise InputError(f"{records.path}:{lineno}: a multiple-choice record needs at least 2 options "
                         f"({'options list' if records.columns is None else 'columns option0, option1, ...'}), "
                         f"found {len(options)}")
    return tuple(o.strip() for o in options)


def choice_label(records: Records, lineno: int, row: dict, name: str, options: tuple[str, ...]) -> int:
    raw = label_value(records, lineno, row, name)
    if raw.isdigit() and as_integer(raw) is not None:
        index = int(raw)
    elif len(raw) == 1 and raw.isalpha() and raw.isupper():
        index = ord(raw) - ord("A")  # RACE's answers are letters
    else:
        index = -1
    if not 0 <= index < len(options):
        raise InputError(f"{records.path}:{lineno}: label {raw!r} is not an option index 0-{len(options) - 1} "
                         f"or letter A-{chr(ord('A') + len(options) - 1)}")
    return index


def check_columns(records: Records, task_type: str, columns: Columns,
                  split_key: str | None = None) -> tuple[str, str, str, bool]:
    """The (text or context, text_b or question, label) column names and whether the task is a pair; a TSV/CSV
    header that lacks one of the needed columns is refused here, before any record is read."""
    if split_key is not None:
        records.require_column(split_key, "split key")
    if task_type == "multiple-choice":
        context_col, question_col = columns.text or "context", columns.text_b or "question"
        if columns.text is not None:
            records.require_column(context_col, "context")
    else:
        context_col, question_col = columns.text or "text", columns.text_b or "text_b"
        records.require_column(context_col, "text")
    label_col = columns.label or "label"
    records.require_column(label_col, "label")
    pair = task_type == "pair-classification" or (task_type == "regression" and
                                                  (columns.text_b is not None or records.has_column("text_b")))
    if pair or task_type == "multiple-choice":
        records.require_column(question_col, "question" if task_type == "multiple-choice" else "second text")
    return context_col, question_col, label_col, pair


def build_examples(records: Records, task_type: str, columns: Columns, labels: LabelSet | None,
                   split_key: str | None = None) -> list[tuple[str, AnyExample]]:
    """(split key, example) per record. The split key is the value of the `split_key` column when one is named;
    otherwise the `id` when the file has an id column, else the example's text(s) (duplicates then share a split)."""
    path = records.path
    context_col, question_col, label_col, pair = check_columns(records, task_type, columns, split_key)
    has_ids = records.has_column("id")
    out: list[tuple[str, AnyExample]] = []
    for lineno, row in records.rows:
        eid = example_id(records, lineno, row)
        if task_type == "multiple-choice":
            context = (text_value(records, lineno, row, context_col, "context")
                       if context_col in row and str(row[context_col]).strip() else "")
            question = text_value(records, lineno, row, question_col, "question")
            options = option_values(records, lineno, row)
            example: AnyExample = ChoiceExample(eid, context, question, options,
                                                choice_label(records, lineno, row, label_col, options))
            key = "\t".join((context, question, *options))
        else:
            text = text_value(records, lineno, row, context_col, "text")
            text_b = text_value(records, lineno, row, question_col, "second text") if pair else None
            if task_type == "regression":
                example = RegressionExample(eid, text, number_value(records, lineno, row, label_col), text_b)
            else:
                assert labels is not None
                example = Example(eid, text, labels.index(label_value(records, lineno, row, label_col), path, lineno),
                                  text_b)
            key = text if text_b is None else f"{text}\t{text_b}"
        if split_key is not None:
            key = str(_value(records, lineno, row, split_key, "split key"))
        elif has_ids:
            key = eid
        out.append((key, example))
    return out
