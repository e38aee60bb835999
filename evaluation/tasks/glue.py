"""The nine GLUE tasks in the official TSV layouts (as `download_glue_data.py` writes them), so a user who has GLUE
on disk can run it:

| task | folder | train/dev header (columns used) | labels in the file -> label_names |
|---|---|---|---|
| cola | CoLA | none; 4 columns `source, label, original mark, sentence` | 0/1 -> unacceptable/acceptable |
| sst2 | SST-2 | `sentence, label` | 0/1 -> negative/positive |
| mrpc | MRPC | `Quality, #1 ID, #2 ID, #1 String, #2 String` (the header may start with a BOM) | 0/1 -> not_equivalent/equivalent |
| stsb | STS-B | 10 columns `index … sentence1, sentence2, score` | regression on score 0-5 |
| qqp | QQP | `id, qid1, qid2, question1, question2, is_duplicate` | 0/1 -> not_duplicate/duplicate |
| mnli, mnli_mismatched | MNLI | train 12 columns, dev 16 (`label1`-`label5`), `sentence1, sentence2`, last `gold_label` | contradiction/entailment/neutral |
| qnli | QNLI | `index, question, sentence, label` | entailment/not_entailment |
| rte | RTE | `index, sentence1, sentence2, label` | entailment/not_entailment |
| wnli | WNLI | `index, sentence1, sentence2, label` | 0/1 -> not_entailment/entailment |

Fields are split on TAB with no quoting (MRPC/QQP texts contain `"`). GLUE's test labels are hidden, so the
official dev file is our **test** split (mnli: dev_matched.tsv; mnli_mismatched: dev_mismatched.tsv) and our
**dev** split is 10 % of the official train file, chosen by sha256 of the row's text(s) (buckets 90-99), so
duplicate rows share a split. The official test.tsv files are not read. A row with another number of fields than
the header (QQP's train file has a few) or with an empty text is dropped and counted (`malformed_row`,
`empty_text`); a label outside the task's labels is an error naming the file, line and value.

    data = load_glue("rte", Path("glue_data/RTE"))   # or the glue_data folder itself
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertfactory.errors import ConfigError, InputError

from .base import AnyExample, Example, RegressionExample, TaskData
from .reading import (SPLIT_PLANS, LabelSet, assign_splits, describe_sources, plan_description, read_text,
                      require_filled, split_lines)

MNLI_COMMON = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
MNLI_TRAIN = (*MNLI_COMMON, "label1", "gold_label")
MNLI_DEV = (*MNLI_COMMON, "label1", "label2", "label3", "label4", "label5", "gold_label")
PAIR_NLI = ("index", "sentence1", "sentence2", "label")


@dataclass(frozen=True)
class GlueTask:
    name: str
    folder: str  # the official folder name under glue_data/
    task_type: str
    headers: tuple[tuple[str, ...], ...]  # accepted train/dev headers; () = no header line (CoLA)
    text: str | int  # column name, or position when there is no header
    text_b: str | int | None
    label: str | int
    file_labels: tuple[str, ...]  # label values as written in the files, in label_names order
    label_names: tuple[str, ...]
    test_file: str = "dev.tsv"  # the official dev file, our test split
    width: int = 0  # fields per row when there is no header


GLUE_TASKS: dict[str, GlueTask] = {t.name: t for t in [
    GlueTask("cola", "CoLA", "classification", (), 3, None, 1, ("0", "1"), ("unacceptable", "acceptable"), width=4),
    GlueTask("sst2", "SST-2", "classification", (("sentence", "label"),), "sentence", None, "label", ("0", "1"),
             ("negative", "positive")),
    GlueTask("mrpc", "MRPC", "pair-classification", (("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),),
             "#1 String", "#2 String", "Quality", ("0", "1"), ("not_equivalent", "equivalent")),
    GlueTask("stsb", "STS-B", "regression", (("index", "genre", "filename", "year", "old_index", "source1", "source2",
                                              "sentence1", "sentence2", "score"),),
             "sentence1", "sentence2", "score", (), ()),
    GlueTask("qqp", "QQP", "pair-classification", (("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),),
             "question1", "question2", "is_duplicate", ("0", "1"), ("not_duplicate", "duplicate")),
    GlueTask("mnli", "MNLI", "pair-classification", (MNLI_TRAIN, MNLI_DEV), "sentence1", "sentence2", "gold_label",
             ("contradiction", "entailment", "neutral"), ("contradiction", "entailment", "neutral"),
             test_file="dev_matched.tsv"),
    GlueTask("mnli_mismatched", "MNLI", "pair-classification", (MNLI_TRAIN, MNLI_DEV), "sentence1", "sentence2",
             "gold_label", ("contradiction", "entailment", "neutral"), ("contradiction", "entailment", "neutral"),
             test_file="dev_mismatched.tsv"),
    GlueTask("qnli", "QNLI", "pair-classification", (("index", "question", "sentence", "label"),), "question",
             "sentence", "label", ("entailment", "not_entailment"), ("entailment", "not_entailment")),
    GlueTask("rte", "RTE", "pair-classification", (PAIR_NLI,), "sentence1", "sentence2", "label",
             ("entailment", "not_entailment"), ("entailment", "not_entailment")),
    GlueTask("wnli", "WNLI", "pair-classification", (PAIR_NLI,), "sentence1", "sentence2", "label", ("0", "1"),
             ("not_entailment", "entailment")),
]}
ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "mnli_matched": "mnli", "mnli-m": "mnli", "mnli-mm": "mnli_mismatched"}
SPLIT_KEY = "the row's text (text_a<TAB>text_b for pairs)"


def glue_task(name: str) -> GlueTask:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in GLUE_TASKS:
        raise ConfigError(f"unknown GLUE task {name!r}; known: {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def task_directory(task: GlueTask, directory: Path) -> Path:
    """The task's folder: `directory` itself when it holds train.tsv, else `directory/<official folder>`."""
    for candidate in (directory, directory / task.folder):
        if (candidate / "train.tsv").is_file():
            return candidate
    raise InputError(f"no {task.folder} train.tsv in {directory} or {directory / task.folder}")


def _column(task: GlueTask, header: tuple[str, ...] | None, ref: str | int) -> int:
    return ref if isinstance(ref, int) else header.index(ref)  # headers were checked to contain every column


def read_glue_file(task: GlueTask, path: Path, labels: LabelSet | None,
                   dropped: dict[str, int]) -> list[tuple[str, AnyExample]]:
    """(split key, example) for every usable row of one official train/dev file."""
    lines = [(n, line) for n, line in enumerate(split_lines(read_text(path, f"GLUE {task.folder} file")), start=1)
             if line.strip()]
    header: tuple[str, ...] | None = None
    if task.headers:
        header = tuple(field.strip() for field in lines[0][1].split("\t"))
        if header not in task.headers:
            expected = " or ".join("\\t".join(h) for h in task.headers)
            raise InputError(f"{path}:1: not the official {task.folder} header: expected {expected!r}, "
                             f"found {lines[0][1][:200]!r}")
        lines = lines[1:]
    width = len(header) if header else task.width
    text, text_b, label = (None if ref is None else _column(task, header, ref)
                           for ref in (task.text, task.text_b, task.label))
    out: list[tuple[str, AnyExample]] = []
    for lineno, line in lines:
        fields = line.split("\t")
        if len(fields) != width:
            if header is None and lineno == 1:
                raise InputError(f"{path}:1: expected {width} tab-separated fields with no header line "
                                 f"(the official {task.folder} train/dev layout), found {len(fields)}: {line[:80]!r}")
            dropped["malformed_row"] = dropped.get("malformed_row", 0) + 1
            continue
        a = fields[text].strip()
        b = fields[text_b].strip() if text_b is not None else None
        if not a or b == "":
            dropped["empty_text"] = dropped.get("empty_text", 0) + 1
            continue
        eid = f"{task.folder}/{path.name}:{lineno}"  # by folder: mnli and mnli_mismatched share train ids
        raw = fields[label].strip()
        if labels is None:
            try:
                target = float(raw)
            except ValueError:
                raise InputError(f"{path}:{lineno}: score {raw!r} is not a number") from None
            example: AnyExample = RegressionExample(eid, a, target, b)
        else:
            example = Example(eid, a, labels.index(raw, path, lineno), b)
        out.append((a if b is None else f"{a}\t{b}", example))
    return out


def load_glue(task: str, directory: str | Path) -> TaskData:
    spec = glue_task(task)
    folder = task_directory(spec, Path(directory))
    train_path, test_path = folder / "train.tsv", folder / spec.test_file
    labels = LabelSet(spec.file_labels) if spec.file_labels else None
    dropped: dict[str, int] = {}
    train_items = read_glue_file(spec, train_path, labels, dropped)
    test_items = read_glue_file(spec, test_path, labels, dropped)
    splits = assign_splits(train_items, lambda item: item[0], SPLIT_PLANS["train/dev"])
    examples = {"train": [e for _, e in splits["train"]], "dev": [e for _, e in splits["dev"]],
                "test": [e for _, e in test_items]}
    require_filled(examples, str(folder))
    return TaskData.from_splits(
        examples,
        name=spec.name,
        label_names=spec.label_names,
        source=describe_sources([train_path, test_path], display=folder),
        split_method=f"test = the official {spec.test_file} (GLUE test labels are hidden); train/dev from train.tsv "
                     f"by {plan_description('train/dev', SPLIT_KEY)}",
        dropped=dropped,
        task_type=spec.task_type,
    )
