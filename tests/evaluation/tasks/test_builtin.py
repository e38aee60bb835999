"""The built-in tasks on the real samples: the registry's names, exact split sizes of the pinned files, every line
accounted for (kept + dropped), splits that follow the documented stable key only, and labels read correctly."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from bertfactory.samples import sample_path
from evaluation.tasks.base import split_of
from evaluation.tasks.registry import BUILTIN_SAMPLES, BUILTIN_TASKS
from evaluation.tasks.wnut16 import ENTITY_TYPES

SIZES = {  # measured on the pinned sample files (sha256 in bertfactory/samples.py)
    "movie_sentiment": {"train": 8452, "dev": 1042, "test": 1074},
    "movie_valence": {"train": 8480, "dev": 1046, "test": 1079},
    "uci_sentences": {"train": 2418, "dev": 273, "test": 291},
    "trec_coarse": {"train": 4325, "dev": 525, "test": 531},
    "trec_fine": {"train": 4324, "dev": 525, "test": 531},
    "wnut16": {"train": 1862, "dev": 211, "test": 208},
}
DROPPED = {
    "movie_sentiment": {"zero_valence": 37},
    "movie_valence": {},
    "uci_sentences": {"empty_record": 3, "duplicate": 18, "conflicting_labels": 0},
    "trec_coarse": {"duplicate": 10071, "conflicting_labels": 0},
    "trec_fine": {"duplicate": 10066, "conflicting_labels": 6},
    "wnut16": {"duplicate": 85, "conflicting_tags": 28},
}
TYPES = {"movie_sentiment": "classification", "movie_valence": "regression", "uci_sentences": "classification",
         "trec_coarse": "classification", "trec_fine": "classification", "wnut16": "tagging"}


@pytest.fixture(scope="module")
def tasks():
    return {name: load(None) for name, load in BUILTIN_TASKS.items()}


def examples(data):
    return data.train + data.dev + data.test


def test_registry_names_sizes_and_dropped(tasks):
    assert set(BUILTIN_TASKS) == set(SIZES) == set(BUILTIN_SAMPLES)
    for name, data in tasks.items():
        assert data.name == name and data.task_type == TYPES[name] and data.language == "en"
        assert data.sizes() == SIZES[name], name
        assert data.dropped == DROPPED[name], name
        assert len({e.id for e in examples(data)}) == len(examples(data)), name
        assert {"path", "sha256", "lines"} <= set(data.source) and data.split_method.startswith("sha256(")
    # an explicit path reads the same thing as the cached sample
    assert BUILTIN_TASKS["trec_coarse"](sample_path("trec")) == tasks["trec_coarse"]
    assert BUILTIN_TASKS["uci_sentences"](sample_path("uci_sentences")) == tasks["uci_sentences"]


def test_movie_valence_is_the_valence_with_the_movie_sentiment_split(tasks):
    valence = {}
    for line in sample_path("movie_reviews").read_text(encoding="utf-8").splitlines():
        sid, value, _ = line.split("\t", 2)
        valence[sid] = float(value)
    data = tasks["movie_valence"]
    assert {e.id: e.target for e in examples(data)} == valence  # every line, zero valence included
    binary = tasks["movie_sentiment"]
    for split in ("train", "dev", "test"):
        assert {e.id for e in getattr(binary, split)} <= {e.id for e in getattr(data, split)}
        assert all(split_of(e.id) == split for e in getattr(data, split))


def test_uci_sentences_labels_domains_and_text_split(tasks):
    data = tasks["uci_sentences"]
    raw = {}
    for domain in ("imdb", "yelp", "amazon"):
        for index, record in enumerate(json.loads(sample_path("uci_sentences", f"{domain}.json").read_text())):
            raw[f"{domain}-{index:03d}"] = record
    for e in examples(data):
        assert e.text == raw[e.id]["text"].strip() and e.label == raw[e.id]["class"]
    for split in ("train", "dev", "test"):
        assert all(split_of(e.text) == split for e in getattr(data, split))
        assert {e.label for e in getattr(data, split)} == {0, 1}
    assert data.label_names == ("negative", "positive")
    per_domain = {d: sum(c.values()) for d, c in data.source["domains"].items()}
    assert sum(per_domain.values()) == 3000 - 18 and all(980 <= n <= 1000 for n in per_domain.values())


def test_trec_deduplicated_every_line_accounted_for(tasks):
    lines = sample_path("trec").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 15452 and len(set(lines)) == 5382
    coarse, fine = tasks["trec_coarse"], tasks["trec_fine"]
    for data in (coarse, fine):
        assert len(examples(data)) + sum(data.dropped.values()) == 15452
        questions = [e.text for e in examples(data)]
        assert len(questions) == len(set(questions))  # no question twice, so none in two splits
        for split in ("train", "dev", "test"):
            assert all(split_of(e.text) == split for e in getattr(data, split))
    assert coarse.label_names == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM") and len(fine.label_names) == 50
    by_id = {e.id: e for e in examples(coarse)}
    for e in examples(fine):  # the fine label refines the coarse one, on the same question and line
        lineno = int(e.id.split("-")[1])
        assert lines[lineno - 1] == f"{fine.label_names[e.label]} {e.text}"
        assert fine.label_names[e.label].split(":")[0] == coarse.label_names[by_id[e.id].label]
    conflicting = "What is the chromosome number of an elephant ?"  # NUM:count and NUM:other
    assert conflicting in {e.text for e in examples(coarse)} and conflicting not in {e.text for e in examples(fine)}
    assert set(Counter(coarse.label_names[e.label] for e in coarse.test)) == set(coarse.label_names)


def test_wnut16_bio_tags_read_back(tasks):
    data = tasks["wnut16"]
    assert data.label_names[0] == "O" and len(data.label_names) == 21
    assert data.source["tweets"] == 2394 and data.source["tokens"] == 46469
    assert len(examples(data)) + sum(data.dropped.values()) == 2394
    raw, current = [], []
    for line in sample_path("wnut16").read_text(encoding="utf-8").splitlines():
        if line.strip():
            current.append(tuple(line.split("\t")))
        else:
            raw.append(current)
            current = []
    for e in examples(data):
        number = int(e.id.split("-")[1])
        assert list(zip(e.words, (data.label_names[t] for t in e.tags))) == raw[number - 1]
        assert split_of(" ".join(e.words)) in {"train", "dev", "test"}
    for split in ("train", "dev", "test"):
        assert all(split_of(" ".join(e.words)) == split for e in getattr(data, split))
    seen_types = {re.sub(r"^[BI]-", "", data.label_names[t]) for e in data.train for t in e.tags} - {"O"}
    assert seen_types == set(ENTITY_TYPES)
