"""The unlabeled text of downstream tasks as a pretraining corpus: each task's TRAINING split with its labels
dropped, one JSONL document per example (`{"id", "text", "lang"}`, the corpus format `jsonl` reads), for
task-adaptive pretraining (TAPT, Gururangan et al. 2020: continued MLM on the task's own unlabeled text).

Only the train split is written: the dev and test texts a model is scored on never enter its pretraining. What an
example contributes: its text (and text_b of a pair, as a second paragraph); a tagging example its words joined by
spaces; a SQuAD example its context and question; a multiple-choice example its passage, question and options.
The order is the tasks' order, then the split's: the same tasks and files give a byte-identical corpus.

    python -m evaluation.task_corpus OUT.jsonl movie_sentiment trec_coarse    # built-in tasks, cached samples
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator, Mapping

from bertfactory.errors import ConfigError
from bertfactory.io import atomic_write_text

from .config import TaskConfig
from .tasks.base import ChoiceExample, SquadExample, TaggingExample, TaskData


def example_text(example) -> str:
    """The unlabeled text of one example (module docstring); paragraphs separated by a line break."""
    if isinstance(example, TaggingExample):
        return " ".join(example.words)
    if isinstance(example, SquadExample):
        return f"{example.context}\n{example.question}"
    if isinstance(example, ChoiceExample):
        return "\n".join(p for p in (example.context, example.question, *example.options) if p)
    text_b = getattr(example, "text_b", None)
    return example.text if not text_b else f"{example.text}\n{text_b}"


def task_documents(name: str, data: TaskData) -> Iterator[dict]:
    """The JSONL documents of one task's training split (empty texts left out)."""
    for example in data.train:
        text = example_text(example).strip()
        if text:
            yield {"id": f"{name}/{example.id}", "text": text, "lang": data.language}


def write_task_corpus(tasks: Mapping[str, TaskConfig], out: Path) -> dict:
    """Write the training texts of `tasks` (name -> settings, as evaluate.tasks holds them) to `out` (JSONL,
    atomically). Returns per task the documents and characters written, its source file and its split method."""
    from .run import load_task

    if not tasks:
        raise ConfigError("no task to build a task corpus from; name at least one evaluate task")
    lines: list[str] = []
    summary: dict[str, dict] = {}
    for name, task in tasks.items():
        data = load_task(name, task)
        docs = list(task_documents(name, data))
        if not docs:
            raise ConfigError(f"task {name}: its training split holds no text ({data.source.get('path')}); nothing to "
                              "adapt to")
        lines += [json.dumps(d, ensure_ascii=False, sort_keys=True) for d in docs]
        summary[name] = {"documents": len(docs), "characters": sum(len(d["text"]) for d in docs),
                         "split": "train", "train_examples": len(data.train), "source": data.source.get("path"),
                         "split_method": data.split_method}
    atomic_write_text(Path(out), "\n".join(lines) + "\n")
    return summary


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m evaluation.task_corpus OUT.jsonl TASK [TASK ...]")
    print(json.dumps(write_task_corpus({n: TaskConfig() for n in sys.argv[2:]}, Path(sys.argv[1])), indent=2))
