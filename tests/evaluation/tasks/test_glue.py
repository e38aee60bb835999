"""GLUE readers on small files written in the exact official layouts (header lines reproduced from the GLUE
distribution, CoLA's header-less 4 columns, MRPC's byte-order mark and quotes, MNLI's 12-column train and 16-column
dev files, QQP's malformed rows): every row comes back with the right texts and label, the official dev file is the
test split, and wrong files are refused naming the file, line and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertfactory.errors import ConfigError, InputError
from evaluation.tasks.base import Example, RegressionExample, hash_bucket
from evaluation.tasks.glue import GLUE_TASKS, MNLI_DEV, MNLI_TRAIN
from evaluation.tasks.registry import load_glue

STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
NLI = ("contradiction", "entailment", "neutral")


def sentence(i: int, side: str = "a") -> str:
    # distinct, realistic-looking texts; quotes and commas appear as they do in MRPC/QQP
    subjects = ["The committee", "A young child", "Shares of the company", 'The "witness"', "Bill, the gardener"]
    verbs = ["approved", "watched", "rose by", "described", "watered"]
    return f"{subjects[i % 5]} {verbs[(i // 5) % 5]} item {i}{side} on day {i % 7} ."


def rows(n: int, offset: int, make) -> tuple[list[str], list[tuple]]:
    lines, expected = [], []
    for i in range(offset, offset + n):
        line, exp = make(i)
        lines.append(line)
        expected.append(exp)
    return lines, expected


def cola(i):
    label = i % 2
    return f"gj04\t{label}\t{'' if label else '*'}\t{sentence(i)}", (sentence(i), None, ("unacceptable", "acceptable")[label])


def sst2(i):
    return f"{sentence(i).lower()} \t{i % 2}", (sentence(i).lower(), None, ("negative", "positive")[i % 2])


def mrpc(i):
    return (f"{i % 2}\t{702876 + i}\t{702977 + i}\t{sentence(i)}\t{sentence(i, 'b')}",
            (sentence(i), sentence(i, "b"), ("not_equivalent", "equivalent")[i % 2]))


def stsb(i):
    score = (i % 21) / 4
    return (f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{sentence(i)}\t{sentence(i, 'b')}\t{score:.3f}",
            (sentence(i), sentence(i, "b"), score))


def qqp(i):
    return (f"{201359 + i}\t{303345 + 2 * i}\t{303346 + 2 * i}\t{sentence(i)}?\t{sentence(i, 'b')}?\t{i % 2}",
            (f"{sentence(i)}?", f"{sentence(i, 'b')}?", ("not_duplicate", "duplicate")[i % 2]))


def mnli(i, dev=False):
    gold = NLI[i % 3]
    annotators = [gold, NLI[(i + 1) % 3], gold, gold, gold] if dev else [gold]
    fields = [str(i), str(63735 + i), f"{63735 + i}{gold[0]}", "slate", f"( ( {sentence(i)} ) )",
              f"( {sentence(i, 'b')} )", f"(ROOT (S {sentence(i)}))", f"(ROOT (S {sentence(i, 'b')}))",
              sentence(i), sentence(i, "b"), *annotators, gold]
    return "\t".join(fields), (sentence(i), sentence(i, "b"), gold)


def qnli(i):
    label = ("entailment", "not_entailment")[i % 2]
    return f"{i}\tWhat {sentence(i)}?\t{sentence(i, 'b')}\t{label}", (f"What {sentence(i)}?", sentence(i, "b"), label)


def rte(i):
    label = ("entailment", "not_entailment")[i % 2]
    return f"{i}\t{sentence(i)}\t{sentence(i, 'b')}\t{label}", (sentence(i), sentence(i, "b"), label)


def wnli(i):
    return f"{i}\t{sentence(i)}\t{sentence(i, 'b')}\t{i % 2}", (sentence(i), sentence(i, "b"),
                                                               ("not_entailment", "entailment")[i % 2])


LAYOUTS = {  # task -> (folder, header of train/dev (None = none), row maker, dev row maker, official dev file name)
    "cola": ("CoLA", None, cola, cola, "dev.tsv"),
    "sst2": ("SST-2", "sentence\tlabel", sst2, sst2, "dev.tsv"),
    "mrpc": ("MRPC", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String", mrpc, mrpc, "dev.tsv"),
    "stsb": ("STS-B", STSB_HEADER, stsb, stsb, "dev.tsv"),
    "qqp": ("QQP", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", qqp, qqp, "dev.tsv"),
    "mnli": ("MNLI", "\t".join(MNLI_TRAIN), mnli, lambda i: mnli(i, dev=True), "dev_matched.tsv"),
    "qnli": ("QNLI", "index\tquestion\tsentence\tlabel", qnli, qnli, "dev.tsv"),
    "rte": ("RTE", "index\tsentence1\tsentence2\tlabel", rte, rte, "dev.tsv"),
    "wnli": ("WNLI", "index\tsentence1\tsentence2\tlabel", wnli, wnli, "dev.tsv"),
}


def write_task(root: Path, task: str, n_train: int = 80, n_dev: int = 12) -> tuple[Path, list, list]:
    folder, header, make, make_dev, dev_name = LAYOUTS[task]
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    train_lines, train_exp = rows(n_train, 0, make)
    dev_lines, dev_exp = rows(n_dev, 1000, make_dev)
    dev_header = "\t".join(MNLI_DEV) if task == "mnli" else header
    for name, h, lines in (("train.tsv", header, train_lines), (dev_name, dev_header, dev_lines)):
        text = "".join(f"{line}\n" for line in ([h] if h else []) + lines)
        (d / name).write_bytes(text.encode("utf-8"))
    # the unlabelled official test file is present but never read
    (d / "test.tsv").write_text("index\tsentence\n0\tno label here\n", encoding="utf-8")
    return d, train_exp, dev_exp


def as_tuple(example, label_names):
    if isinstance(example, RegressionExample):
        return example.text, example.text_b, example.target
    assert isinstance(example, Example)
    return example.text, example.text_b, label_names[example.label]


@pytest.mark.parametrize("task", sorted(LAYOUTS))
def test_official_layout_round_trip(tmp_path, task):
    d, train_exp, dev_exp = write_task(tmp_path, task)
    data = load_glue(task, d)
    spec = GLUE_TASKS[task]
    assert data.name == task and data.task_type == spec.task_type and data.label_names == spec.label_names
    got_train = [as_tuple(e, data.label_names) for e in data.train + data.dev]
    assert sorted(got_train, key=str) == sorted(train_exp, key=str)  # every train row, in train or dev
    assert [as_tuple(e, data.label_names) for e in data.test] == dev_exp  # the official dev file = test, in order
    assert data.train and data.dev and data.dropped == {}
    for e in data.dev:  # dev = buckets 90-99 of the row's text(s)
        assert hash_bucket(e.text if e.text_b is None else f"{e.text}\t{e.text_b}") >= 90
    assert data.source["path"] == str(d) and len(data.source["files"]) == 2
    assert load_glue(task, d) == data


def test_glue_data_root_mnli_mismatched_and_aliases(tmp_path):
    d, _, _ = write_task(tmp_path, "mnli")
    _, mm_exp = rows(7, 5000, lambda i: mnli(i, dev=True))
    mm_lines, _ = rows(7, 5000, lambda i: mnli(i, dev=True))
    (d / "dev_mismatched.tsv").write_text("\t".join(MNLI_DEV) + "\n" + "".join(f"{x}\n" for x in mm_lines))
    matched = load_glue("MNLI-m", tmp_path)  # the glue_data folder: MNLI/ is found inside it
    mismatched = load_glue("mnli-mm", tmp_path)
    assert mismatched.name == "mnli_mismatched"
    assert matched.train == mismatched.train and matched.dev == mismatched.dev
    assert [as_tuple(e, NLI) for e in mismatched.test] == mm_exp
    assert "dev_mismatched.tsv" in mismatched.split_method
    with pytest.raises(ConfigError, match="unknown GLUE task 'squad'"):
        load_glue("squad", tmp_path)
    with pytest.raises(InputError, match="no RTE train.tsv"):
        load_glue("rte", tmp_path)


def test_quotes_are_ordinary_characters_and_bom_is_dropped(tmp_path):
    d, _, _ = write_task(tmp_path, "mrpc")
    data = load_glue("mrpc", d)
    texts = [e.text for e in data.train + data.dev + data.test]
    assert any(t.startswith('The "witness"') for t in texts)


def test_malformed_and_empty_rows_are_counted(tmp_path):
    d, train_exp, _ = write_task(tmp_path, "qqp")
    with (d / "train.tsv").open("a", encoding="utf-8") as f:
        f.write("363362\t713945\tHow do I get better at chess?\n")  # a row cut short, as in QQP's train file
        f.write("105780\t174363\t174364\tHow can I create an Android app?\t\t0\n")  # an empty question
    data = load_glue("qqp", d)
    assert data.dropped == {"malformed_row": 1, "empty_text": 1}
    assert len(data.train) + len(data.dev) == len(train_exp)


@pytest.mark.parametrize("task, edit, message", [
    ("rte", lambda t: t.replace("index\tsentence1", "idx\tsentence1", 1), "not the official RTE header"),
    ("mnli", lambda t: t.replace("\tlabel1\tgold_label", "\tgold_label", 1), "not the official MNLI header"),
    ("sst2", lambda t: t.replace("\t1\n", "\tpositive\n", 1), r":3: label 'positive' is not in the label set \(0, 1\)"),
    ("stsb", lambda t: t.replace("\t0.250\n", "\thigh\n", 1), r":3: score 'high' is not a number"),
    ("cola", lambda t: "index\tsentence\n" + t, r":1: expected 4 tab-separated fields with no header line"),
])
def test_wrong_files_are_refused_naming_file_and_line(tmp_path, task, edit, message):
    d, _, _ = write_task(tmp_path, task)
    train = d / "train.tsv"
    train.write_text(edit(train.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(InputError, match=message) as err:
        load_glue(task, d)
    assert str(train) in str(err.value)
