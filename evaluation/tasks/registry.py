"""The task readers, by name: the built-in tasks on the real samples, any user task file, and GLUE.

    from evaluation.tasks.registry import BUILTIN_TASKS, load_task_file, load_glue
    data = BUILTIN_TASKS["trec_coarse"](None)        # None = the cached sample (`bertfactory samples fetch`)
    data = BUILTIN_TASKS["movie_sentiment"](Path("my_copy.txt"))
    data = load_task_file(Path("train.jsonl"), "pair-classification", dev_path=Path("dev.jsonl"))
    data = load_glue("mnli", Path("glue_data"))

Every loader returns a TaskData (evaluation/tasks/base.py). docs/tasks.md documents each task (source, licence,
split, sizes) and each file layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bertfactory.samples import sample_path

from .base import TaskData
from .files import load_task_file
from .glue import GLUE_TASKS, load_glue
from .movie_sentiment import load_movie_sentiment
from .movie_valence import load_movie_valence
from .trec import load_trec_coarse, load_trec_fine
from .uci_sentences import load_uci_sentences
from .wnut16 import load_wnut16

__all__ = ["BUILTIN_TASKS", "BUILTIN_SAMPLES", "GLUE_TASKS", "TaskLoader", "load_glue", "load_task_file"]

TaskLoader = Callable[[Path | None], TaskData]

# task name -> (sample it reads, reader of a path); the sample's path is a directory when it has several files
BUILTIN_SAMPLES: dict[str, str] = {
    "movie_sentiment": "movie_reviews",
    "movie_valence": "movie_reviews",
    "uci_sentences": "uci_sentences",
    "trec_coarse": "trec",
    "trec_fine": "trec",
    "wnut16": "wnut16",
}
_READERS: dict[str, Callable[[Path], TaskData]] = {
    "movie_sentiment": load_movie_sentiment,
    "movie_valence": load_movie_valence,
    "uci_sentences": load_uci_sentences,
    "trec_coarse": load_trec_coarse,
    "trec_fine": load_trec_fine,
    "wnut16": load_wnut16,
}


def _builtin(name: str) -> TaskLoader:
    def load(path: Path | None = None) -> TaskData:
        return _READERS[name](Path(path) if path is not None else sample_path(BUILTIN_SAMPLES[name]))

    load.__name__ = f"load_{name}"
    load.__doc__ = f"The {name} task from `path`, or from the cached `{BUILTIN_SAMPLES[name]}` sample when None."
    return load


BUILTIN_TASKS: dict[str, TaskLoader] = {name: _builtin(name) for name in _READERS}
