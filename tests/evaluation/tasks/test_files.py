"""User task files: TSV/CSV/JSONL for classification, pair-classification, regression and multiple-choice, CoNLL/BIO
for tagging, SQuAD v1.1/v2.0 JSON — read back exactly, split deterministically by a stable key, and bad input
refused naming the file, line and value (SQuAD answer_start mismatches counted and kept out of training)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bertfactory.errors import ConfigError, InputError
from evaluation.tasks.base import Answer, ChoiceExample, Example, RegressionExample, TaggingExample, hash_bucket
from evaluation.tasks.registry import load_task_file

WORDS = ["quiet", "bright", "slow", "funny", "cold", "long", "sharp", "warm", "odd", "plain"]


def review(i: int) -> str:
    return f"a {WORDS[i % 10]} film , scene {i} , {WORDS[(i * 3) % 10]} ending"


def all_examples(data):
    return data.train + data.dev + data.test


def write_tsv(path: Path, header: list[str], rows: list[list]) -> Path:
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in [header, *rows]), encoding="utf-8")
    return path


def write_jsonl(path: Path, records: list[dict], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + extra, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------- tables


def test_tsv_classification_inferred_labels_and_split_by_id(tmp_path):
    rows = [[f"r{i}", review(i), ("neg", "pos", "mixed")[i % 3]] for i in range(90)]
    path = write_tsv(tmp_path / "reviews.tsv", ["id", "text", "label"], rows)
    data = load_task_file(path, "classification")
    assert data.name == "reviews" and data.task_type == "classification"
    assert data.label_names == ("mixed", "neg", "pos")  # sorted text
    got = {e.id: (e.text, data.label_names[e.label], e.text_b) for e in all_examples(data)}
    assert got == {r[0]: (r[1], r[2], None) for r in rows}
    for split in ("train", "dev", "test"):
        bucket_range = {"train": range(0, 80), "dev": range(80, 90), "test": range(90, 100)}[split]
        assert all(hash_bucket(e.id) in bucket_range for e in getattr(data, split))
    # the same records in another order land in the same splits
    shuffled = write_tsv(tmp_path / "shuffled.tsv", ["id", "text", "label"], rows[::-1])
    again = load_task_file(shuffled, "classification", name="reviews")
    for split in ("train", "dev", "test"):
        assert sorted(e.id for e in getattr(again, split)) == sorted(e.id for e in getattr(data, split))
    assert data.source["sha256"] and data.source["lines"] == 91
    assert "sha256(the id column, else the text(s))" in data.split_method


def test_integer_labels_sort_numerically_and_label_names_fix_the_set(tmp_path):
    rows = [[review(i), (2, 10, 1)[i % 3]] for i in range(60)]
    path = write_tsv(tmp_path / "stars.tsv", ["text", "label"], rows)
    assert load_task_file(path, "classification").label_names == ("1", "2", "10")
    fixed = load_task_file(path, "classification", label_names=["10", "2", "1", "5"])
    assert fixed.label_names == ("10", "2", "1", "5")
    assert {fixed.label_names[e.label] for e in all_examples(fixed)} == {"1", "2", "10"}
    # without an id column the ids are <stem>-<line> and the split key is the text
    assert {e.id for e in all_examples(fixed)} == {f"stars-{n}" for n in range(2, 62)}


def test_csv_pair_classification_with_quoted_fields_and_named_columns(tmp_path):
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["premise", "hypothesis", "gold"])
        for i in range(60):
            w.writerow([f'He said "{review(i)}", then left', f"line one\nline two {i}", ("yes", "no")[i % 2]])
    data = load_task_file(path, "pair-classification", text_column="premise", text_b_column="hypothesis",
                          label_column="gold")
    first = next(e for e in all_examples(data) if e.id == "pairs-2")
    assert first == Example("pairs-2", f'He said "{review(0)}", then left', 1, "line one\nline two 0")
    assert data.label_names == ("no", "yes")
    # a record spanning two lines: the next one starts two lines later
    assert {e.id for e in all_examples(data)} == {f"pairs-{2 + 2 * i}" for i in range(60)}


def test_jsonl_regression_and_explicit_split_key(tmp_path):
    records = [{"id": f"s{i}", "text": review(i), "text_b": review(i + 1), "label": i / 10, "doc": f"d{i % 30}"}
               for i in range(70)]
    path = write_jsonl(tmp_path / "sts.jsonl", records, extra="\n\n")  # trailing blank lines are fine
    data = load_task_file(path, "regression", split_seed_key="doc")
    assert data.task_type == "regression" and data.label_names == ()
    got = {e.id: e for e in all_examples(data)}
    assert got["s13"] == RegressionExample("s13", review(13), 1.3, review(14))
    for split in ("train", "dev", "test"):  # all records of one doc share a split
        docs = {records[int(e.id[1:])]["doc"] for e in getattr(data, split)}
        assert all(hash_bucket(d) in {"train": range(80), "dev": range(80, 90), "test": range(90, 100)}[split]
                   for d in docs)
    single = load_task_file(write_jsonl(tmp_path / "single.jsonl", [{"text": review(i), "label": i} for i in range(60)]),
                            "regression")
    assert all(e.text_b is None for e in all_examples(single))


def test_multiple_choice_jsonl_letters_and_tsv_option_columns(tmp_path):
    records = [{"id": f"q{i}", "context": f"Passage {i}: {review(i)}.", "question": f"What is scene {i} like?",
                "options": [WORDS[i % 10], WORDS[(i + 1) % 10], WORDS[(i + 2) % 10], "none"], "label": "ABCD"[i % 4]}
               for i in range(60)]
    data = load_task_file(write_jsonl(tmp_path / "race.jsonl", records), "multiple-choice")
    got = {e.id: e for e in all_examples(data)}
    assert got["q5"] == ChoiceExample("q5", f"Passage 5: {review(5)}.", "What is scene 5 like?",
                                      (WORDS[5], WORDS[6], WORDS[7], "none"), 1)
    rows = [[f"q{i}", f"Which ending fits {i}?", "left", "right", "up", i % 3] for i in range(60)]
    tsv = write_tsv(tmp_path / "swag.tsv", ["id", "question", "option0", "option1", "option2", "label"], rows)
    table = load_task_file(tsv, "multiple-choice")
    assert {e.id: (e.context, e.options, e.label) for e in all_examples(table)}["q4"] == ("", ("left", "right", "up"), 1)
    bad = write_tsv(tmp_path / "bad.tsv", ["question", "option0", "option1", "label"], [["Which?", "a", "b", 2]] * 60)
    with pytest.raises(InputError, match=rf"{bad}:2: label '2' is not an option index 0-1 or letter A-B"):
        load_task_file(bad, "multiple-choice")


def test_dev_and_test_files(tmp_path):
    def make(name, start, n):
        return write_jsonl(tmp_path / f"{name}.jsonl",
                           [{"id": f"{name}{i}", "text": review(i), "label": ("a", "b")[i % 2]} for i in range(start, start + n)])

    train, dev, test = make("train", 0, 60), make("dev", 100, 9), make("test", 200, 11)
    both = load_task_file(train, "classification", dev_path=dev, test_path=test)
    assert both.sizes() == {"train": 60, "dev": 9, "test": 11}
    assert both.split_method.startswith("the first file is all train") and str(dev) in both.split_method
    dev_only = load_task_file(train, "classification", dev_path=dev)
    assert len(dev_only.dev) == 9 and len(dev_only.train) + len(dev_only.test) == 60
    assert all(hash_bucket(e.id) >= 90 for e in dev_only.test)
    assert len(both.source["files"]) == 3
    # a dev label the training file never uses is refused
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"id": "x1", "text": "fine", "label": "c"}])
    with pytest.raises(InputError, match=rf"{odd}:1: label 'c' is not in the label set \(a, b\)"):
        load_task_file(train, "classification", dev_path=odd)
    clash = write_jsonl(tmp_path / "clash.jsonl", [{"id": "train3", "text": "again", "label": "a"}])
    with pytest.raises(InputError, match="example id 'train3' is also used in"):
        load_task_file(train, "classification", test_path=clash)


@pytest.mark.parametrize("name, content, args, message", [
    ("no_label.tsv", "id\ttext\n1\tgood\n", {}, r":1: no label column 'label' in the header \(columns: id, text\)"),
    ("no_text.csv", "id,review,label\n1,good,a\n", {}, r":1: no text column 'text' in the header"),
    ("no_key.jsonl", '{"text": "good", "label": "a"}\n{"text": "bad"}\n', {}, r":2: no label key 'label'"),
    ("outside.tsv", "text\tlabel\ngood\tpos\nbad\tneg\nmeh\tneutral\n", {"label_names": ["neg", "pos"]},
     r":4: label 'neutral' is not in the label set \(neg, pos\)"),
    ("broken.jsonl", '{"text": "good", "label": "a"}\n{"text": "bad", "label": \n', {},
     r":2: not valid JSON \(Expecting value at column 26\)"),
    ("array.jsonl", '["good", "a"]\n', {}, r":1: expected a JSON object, found list \(a JSON array of records\? write "
     r"one object per line\)"),
    # was: `cannot tell the layout from the extension '.json'; name the file .csv, .jsonl, ...`, and renamed to .jsonl
    # the usual JSON array was refused at line 1
    ("records.json", '[{"text": "good", "label": "a"}]', {}, r"records.json: a .json file is no table layout: write "
     r"one JSON object per line and name it .jsonl \(a JSON array of records: pandas to_json\(orient='records', "
     r"lines=True\)\); a SQuAD file is task type squad$"),
    ("empty.tsv", "", {}, r": the file is empty"),
    ("blank.jsonl", "\n  \n", {}, r": the file is empty"),
    ("header_only.tsv", "text\tlabel\n", {}, r": a header but no records"),
    ("short.tsv", "text\tlabel\ngood\tpos\nbad\n", {}, r":3: expected 2 tab-separated fields \(as in the header\), found 1"),
    ("empty_text.tsv", "text\tlabel\ngood\tpos\n  \tneg\n", {}, r":3: empty text in column 'text'"),
    # a quote not closed takes the lines after it into its field: said, not just "found 1" (was: nothing more)
    ("unclosed_last.csv", 'text,label\ngood,pos\n"bad,neg\n', {},
     r':3: expected 2 comma-separated fields \(as in the header\), found 1: a `"` is opened and not closed$'),
    ("unclosed.csv", 'text,label\ngood,pos\n"bad,neg\nfine,pos\nmeh,neg\n', {},
     r':3: expected 2 comma-separated fields \(as in the header\), found 1: a `"` is opened and not closed '
     r"\(the record runs to line 5\)$"),
    ("ragged.csv", 'text,label\ngood,pos\n"bad, really",neg,extra\n', {},
     r":3: expected 2 comma-separated fields \(as in the header\), found 3$"),
    ("one_label.tsv", "text\tlabel\ngood\tpos\nfine\tpos\n", {}, r"fewer than 2 distinct labels \(pos\)"),
    ("target.jsonl", '{"text": "good", "label": "high"}\n', {"task_type": "regression"},
     r":1: target 'high' in 'label' is not a finite number"),
    ("reviews.txt", "text\tlabel\n", {}, r"cannot tell the layout from the extension '.txt'"),
])
def test_bad_table_input_names_file_line_and_value(tmp_path, name, content, args, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    task_type = args.pop("task_type", "classification")
    with pytest.raises(InputError, match=message) as err:
        load_task_file(path, task_type, **args)
    assert str(path) in str(err.value)


def test_unknown_task_type_and_too_few_examples(tmp_path):
    path = write_tsv(tmp_path / "t.tsv", ["text", "label"], [["good", "a"], ["bad", "b"]])
    with pytest.raises(ConfigError, match="task type 'ner' is not one of"):
        load_task_file(path, "ner")
    with pytest.raises(InputError, match="too few examples to fill every split"):
        load_task_file(path, "classification")


# ---------------------------------------------------------------------------------------------------- CoNLL


def conll_sentences(n: int) -> list[list[tuple[str, str]]]:
    out = []
    for i in range(n):
        sent = [("Yesterday", "O"), (f"Anna{i}", "B-per"), ("Berg", "I-per"), ("visited", "O"),
                (f"Oslo{i % 9}", "B-loc"), (".", "O")]
        out.append(sent if i % 4 else sent[:4] + [("home", "O")])
    return out


def test_conll_tab_space_crlf_docstart_and_four_columns(tmp_path):
    sentences = conll_sentences(60)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for k, sent in enumerate(sentences):
        for word, tag in sent:
            lines.append(f"{word}\t{tag}" if k % 3 == 0 else f"{word} NNP B-NP {tag}" if k % 3 == 1 else f"{word} {tag}")
        lines.append("" if k % 2 else "\t")  # blank or whitespace-only separators
        if k == 30:
            lines += ["-DOCSTART-\tO", ""]
    path = tmp_path / "ner.conll"
    path.write_bytes("\r\n".join(lines).encode("utf-8"))  # CRLF, no final line end
    data = load_task_file(path, "tagging")
    assert data.task_type == "tagging"
    assert data.label_names == ("O", "B-loc", "I-loc", "B-per", "I-per")
    got = sorted(all_examples(data), key=lambda e: int(e.id.rsplit("-", 1)[1]))
    assert len(got) == 60
    for example, sent in zip(got, sentences):
        assert isinstance(example, TaggingExample)
        assert example.words == tuple(w for w, _ in sent)
        assert tuple(data.label_names[t] for t in example.tags) == tuple(t for _, t in sent)
    assert all(hash_bucket(" ".join(e.words)) >= 90 for e in data.test)


@pytest.mark.parametrize("line, args, message", [
    ("Oslo\tLOC", {}, r":4: tag 'LOC' is not BIO"),
    ("Oslo", {}, r":4: expected a word and its tag"),
    ("Oslo\tB-org", {"label_names": ["O", "B-per", "I-per"]}, r":4: label 'B-org' is not in the label set"),
])
def test_bad_conll_names_line_and_value(tmp_path, line, args, message):
    path = tmp_path / "bad.bio"
    path.write_text("Anna\tB-per\nlives\tO\n\n" + line + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=message) as err:
        load_task_file(path, "tagging", **args)
    assert str(path) in str(err.value)
    only_o = tmp_path / "o.bio"
    only_o.write_text("a\tO\n\nb\tO\n", encoding="utf-8")
    with pytest.raises(InputError, match="fewer than 2 distinct labels"):
        load_task_file(only_o, "tagging")


# ---------------------------------------------------------------------------------------------------- SQuAD


def squad_doc(articles: int, v2: bool, corrupt: set[str] = frozenset()) -> dict:
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(2):
            context = f"The river {WORDS[a % 10]} runs through town {a}-{p}. It was built in {1800 + a + p} by Ada."
            qas = []
            for q, (question, answer) in enumerate([(f"When was it built ({a},{p})?", str(1800 + a + p)),
                                                    (f"Who built it ({a},{p})?", "Ada")]):
                qid = f"q{a}-{p}-{q}"
                start = context.index(answer) + (3 if qid in corrupt else 0)
                qas.append({"id": qid, "question": question,
                            "answers": [{"text": answer, "answer_start": start}] * (1 + q)})
            if v2:
                qas.append({"id": f"q{a}-{p}-x", "question": f"Who demolished it ({a},{p})?", "answers": [],
                            "plausible_answers": [{"text": "Ada", "answer_start": context.index("Ada")}],
                            "is_impossible": True})
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"Article_{a}", "paragraphs": paragraphs})
    return {"version": "v2.0" if v2 else "1.1", "data": data}


@pytest.mark.parametrize("v2", [False, True])
def test_squad_read_back_split_by_article(tmp_path, v2):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad_doc(80, v2)), encoding="utf-8")
    data = load_task_file(path, "squad")
    assert data.task_type == "squad" and data.source["squad_version"] == ("2.0" if v2 else "1.1")
    assert data.dropped == {"answer_start_mismatch": 0, "train_question_without_valid_answer": 0}
    examples = {e.id: e for e in all_examples(data)}
    assert len(examples) == 80 * 2 * (3 if v2 else 2)
    e = examples["q7-1-1"]
    assert e.title == "Article_7" and e.answers == (Answer("Ada", e.context.index("Ada")),) * 2
    assert not e.is_impossible
    if v2:
        assert examples["q7-1-x"].is_impossible and examples["q7-1-x"].answers == ()
    for split in ("train", "dev", "test"):  # every article's questions in one split
        titles = {x.title for x in getattr(data, split)}
        for other in {"train", "dev", "test"} - {split}:
            assert titles.isdisjoint({x.title for x in getattr(data, other)})
    by_question = load_task_file(path, "squad", split_seed_key="id")
    assert all(hash_bucket(x.id) >= 90 for x in by_question.test)


def test_squad_answer_start_mismatch_counted_and_kept_out_of_training(tmp_path):
    doc = squad_doc(80, v2=False)
    all_ids = [qa["id"] for art in doc["data"] for p in art["paragraphs"] for qa in p["qas"]]
    corrupt = {qid for qid in all_ids if qid.endswith("-0")}  # one answer each, wrong offset
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(squad_doc(80, v2=False, corrupt=corrupt)), encoding="utf-8")
    data = load_task_file(path, "squad")
    assert data.dropped["answer_start_mismatch"] == len(corrupt) == 160
    assert all(e.id not in corrupt for e in data.train)  # the question has no usable answer left
    train_articles = {e.title for e in data.train}
    assert data.dropped["train_question_without_valid_answer"] == 2 * len(train_articles)  # one per paragraph
    assert len(data.train) == 2 * len(train_articles)
    for e in data.dev + data.test:  # at test time the gold texts stay, with an unknown position
        if e.id in corrupt:
            assert [(a.text, a.start) for a in e.answers] == [(e.answers[0].text, -1)]
        else:
            assert all(e.context[a.start:a.start + len(a.text)] == a.text for a in e.answers)


@pytest.mark.parametrize("doc, message", [
    ("{not json", r":1: not valid JSON"),
    ('{"version": "1.1"}', r": the top level has no 'data'"),
    ('{"data": [{"title": "A", "paragraphs": [{"context": "x y", "qas": [{"id": "q1", "question": "?", "answers": []}]}]}]}',
     r"data\[0\].paragraphs\[0\].qas\[0\] \(id 'q1'\): no answers, and not marked is_impossible"),
    ('{"data": [{"title": "A", "paragraphs": [{"context": "x y", "qas": [{"id": "q1", "question": "?", '
     '"answers": [{"text": "x", "answer_start": "0"}]}]}]}]}', r"answers\[0\].answer_start must be a JSON int"),
])
def test_bad_squad_files_name_the_place(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(doc, encoding="utf-8")
    with pytest.raises(InputError, match=message) as err:
        load_task_file(path, "squad")
    assert str(path) in str(err.value)
    with pytest.raises(ConfigError, match="split_seed_key 'doc' for a SQuAD file"):
        load_task_file(path, "squad", split_seed_key="doc")


def test_integer_labels_written_as_floats_with_nulls_read_as_integers(tmp_path):
    """pandas writes an integer label column holding a missing value as floats: `"label": 1.0` and `"label": null`
    (df.to_json(orient="records", lines=True)). Was: refused at line 1, `label 0.0 in 'label' must be a string or an
    integer`, so the documented dropping of null labels never reached such a file."""
    records = [{"text": review(i), "label": float(i % 2)} for i in range(60)] + [{"text": "no label", "label": None}]
    data = load_task_file(write_jsonl(tmp_path / "pandas.jsonl", records), "classification")
    assert data.label_names == ("0", "1") and data.dropped == {"missing_label": 1}
    assert {e.text: data.label_names[e.label] for e in all_examples(data)} == \
        {r["text"]: str(int(r["label"])) for r in records[:-1]}
    with pytest.raises(InputError, match=r"half.jsonl:2: label 0.5 in 'label' must be a string or an integer"):
        load_task_file(write_jsonl(tmp_path / "half.jsonl", [records[0], {"text": "x", "label": 0.5}]), "classification")


def test_labels_that_look_like_integers_but_are_not_sort_as_text(tmp_path):
    """'²' passes str.isdigit and '--1' a lstrip('-') test, but int() refuses both: was a ValueError traceback."""
    for odd in ("²", "--1"):
        path = write_tsv(tmp_path / "odd.tsv", ["text", "label"], [[review(i), odd if i % 2 else "1"] for i in range(60)])
        assert load_task_file(path, "classification").label_names == tuple(sorted(["1", odd]))
    records = [{"question": f"q {i}", "options": ["a", "b"], "label": "²" if i == 3 else "1"} for i in range(40)]
    with pytest.raises(InputError, match=r"mc.jsonl:4: label '²' is not an option index 0-1 or letter A-B"):
        load_task_file(write_jsonl(tmp_path / "mc.jsonl", records), "multiple-choice")


def test_a_split_left_empty_by_few_split_keys_says_so(tmp_path):
    """A SQuAD file of one article (or without titles) puts every question in one split, as its key is the title.
    Was: `too few examples to fill every split (train 60, dev 0, test 0)` for 60 questions, without a why."""
    doc = {"data": [{"title": "Only", "paragraphs": [{"context": "abc", "qas": [
        {"id": str(i), "question": f"q {i}", "answers": [{"text": "b", "answer_start": 1}]} for i in range(60)]}]}]}
    path = tmp_path / "one.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"one.json: too few examples to fill every split \(train 60, dev 0, test 0\); "
                       r"dev, test is empty: its 60 examples have 1 distinct split key\(s\) \(article title\), and the "
                       r"examples of a key share a split; give the missing splits their own files"):
        load_task_file(path, "squad")
    few = write_tsv(tmp_path / "few.tsv", ["text", "label"], [[review(i), i % 2] for i in range(3)])
    with pytest.raises(InputError, match=r"few.tsv: too few examples to fill every split \(train 2, dev 0, test 1\); "
                       r"dev is empty$"):  # as many keys as examples: nothing more to say
        load_task_file(few, "classification")


def test_one_number_spelt_two_ways_gets_the_same_label_ids_in_every_process(tmp_path):
    """'1' and '01' (or '2' and '+2') are two labels of one number: their order came from a set, i.e. from Python's
    hash seed, so label ids (and label_names in results.json) changed between two runs of the same command."""
    import os
    import subprocess
    import sys

    path = write_tsv(tmp_path / "spelt.tsv", ["text", "label"], [[review(i), ("1", "01", "2", "+2")[i % 4]]
                                                                   for i in range(80)])
    code = ("from evaluation.tasks.registry import load_task_file; "
            f"print(load_task_file({str(path)!r}, 'classification').label_names)")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in range(8)}
    assert seen == {"('01', '1', '+2', '2')\n"}, seen


@pytest.mark.parametrize("task_type, columns, message", [
    ("classification", {"text_column": "premise", "text_b_column": "hypothesis"},
     r"^text_b_column \(--text-b-column\) 'hypothesis': a classification task reads one text; a task of two texts is "
     r"task type pair-classification$"),
    ("tagging", {"label_column": "ner"}, r"^label_column \(--label-column\) 'ner': a CoNLL/BIO file has no named "
                                         r"columns: the first field of a line is the word, the last its tag$"),
    ("squad", {"text_column": "context"}, r"^text_column \(--text-column\) 'context': a SQuAD file has no columns"),
    ("regression", {"text_column": "premise", "label_names": ["0", "1"]},
     r"^label_names \(--label-names\) \['0', '1'\]: a regression task has no label set \(its labels are numbers\)$"),
])
def test_a_column_the_task_type_does_not_read_is_refused(tmp_path, task_type, columns, message):
    """Was: left out without a word: `--task-type classification --text-b-column hypothesis` fine-tuned on the
    premises alone (Example(text='p 0', text_b=None)); `--task-type tagging --label-column ner` read the last field."""
    from evaluation.config import TaskConfig

    path = tmp_path / "pairs.csv"
    path.write_text("premise,hypothesis,label\n" + "".join(f"p {i},h {i},{i % 2}\n" for i in range(60)))
    with pytest.raises(ConfigError, match=message):
        load_task_file(path, task_type, **columns)
    with pytest.raises(ValueError, match=message[1:-1] if message.endswith("$") else message[1:]):  # recipe / CLI
        TaskConfig(input=str(path), task_type=task_type, **columns)
    assert load_task_file(path, "pair-classification", text_column="premise", text_b_column="hypothesis").train[0].text_b


def test_multiple_choice_rows_with_fewer_options_leave_the_last_cells_empty(tmp_path):
    """ARC-style CSV (3 to 5 options per question). Was: `arc.csv:2: empty option in column 'option3'` for every
    question with fewer options than the file's columns. An empty cell before a filled one is still refused."""
    rows = [[f"q {i}?", f"a{i}", f"b{i}", f"c{i}", "" if i % 3 == 0 else f"d{i}", "C" if i % 3 == 0 else "D"]
            for i in range(60)]
    path = tmp_path / "arc.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["question", "option0", "option1", "option2", "option3", "label"], *rows])
    data = load_task_file(path, "multiple-choice")
    got = {e.question: (e.options, e.label) for e in all_examples(data)}
    assert got == {r[0]: (tuple(o for o in r[1:5] if o), 2 if r[4] == "" else 3) for r in rows}
    rows[6][2] = ""  # b6 empty, c6 and d6 not
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["question", "option0", "option1", "option2", "option3", "label"], *rows])
    with pytest.raises(InputError, match=r"arc.csv:8: empty option in column 'option1'"):
        load_task_file(path, "multiple-choice")


def test_a_regression_split_of_one_example_is_refused_when_read(tmp_path):
    """Pearson / Spearman of one pair are undefined. Was: a ValueError traceback (`a correlation needs at least 2
    pairs, got 1`) from the scoring, after the first fine-tuning epoch."""
    train = write_tsv(tmp_path / "val.tsv", ["text", "label"], [[review(i), i / 10] for i in range(60)])
    one = write_tsv(tmp_path / "one.tsv", ["text", "label"], [["a single test sentence", 1.5]])
    with pytest.raises(InputError, match=rf"^{one}: a regression task scores its dev and test splits by Pearson and "
                       r"Spearman correlation, which need at least 2 examples \(test 1\)$"):
        load_task_file(train, "regression", test_path=one)
    two = write_tsv(tmp_path / "two.tsv", ["text", "label"], [["a test sentence", 1.5], ["another one", 0.5]])
    assert len(load_task_file(train, "regression", test_path=two).test) == 2


def test_a_regression_file_with_one_target_value_is_refused(tmp_path):
    """Was: evaluated to the end with no Pearson or Spearman anywhere (undefined for constant gold) and the summary
    `(nothing in RUN yet)`; the classification rule (fewer than 2 distinct labels) had no regression counterpart."""
    path = write_tsv(tmp_path / "const.tsv", ["text", "label"], [[review(i), "2.0"] for i in range(60)])
    with pytest.raises(InputError, match=rf"^{path}: every training target is 2.0: a regression task needs targets "
                       r"that differ \(is the label column the right one\?\)$"):
        load_task_file(path, "regression")


def test_a_csv_text_longer_than_the_csv_modules_default_field_limit_is_read(tmp_path):
    """A long document (150,000 characters) in a CSV cell. Was: `long.csv:9: malformed CSV (field larger than field
    limit (131072))`, though the file is well-formed."""
    long = "word " * 30000
    path = tmp_path / "long.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["text", "label"], *([f"doc {i} " + (long if i == 7 else "short"), i % 2]
                                                       for i in range(60))])
    data = load_task_file(path, "classification")
    assert max(len(e.text) for e in all_examples(data)) == len(f"doc 7 {long}".strip())
