"""SQuAD v1.1 / v2.0 JSON: `{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible" (v2.0)}]}]}]}`.

Every answer's `answer_start` is checked against its context (`context[start:start + len(text)] == text`). An answer
that does not match is counted (`answer_start_mismatch`) and never trained on: in the training split it is removed,
and a question left without a usable answer is dropped (`train_question_without_valid_answer`). In dev/test the gold
*texts* are what is scored, so mismatched answers stay there with `start = -1` ("position unknown") — a consumer
that needs character positions on dev/test (e.g. a dev loss) must skip answers with a negative start.
v2.0 questions with `is_impossible: true` have no answers (their `plausible_answers` are not used).

    parsed = read_squad(Path("train-v2.0.json"))  # SquadFile(version, questions, mismatched answer count)
    train = [usable_for_training(q) for q in parsed.questions]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bertfactory.errors import InputError

from .base import Answer, SquadExample
from .reading import read_text

UNKNOWN_START = -1


@dataclass(frozen=True)
class SquadQuestion:
    example: SquadExample  # mismatched answers have start = UNKNOWN_START
    article: str  # the article's title (the paragraph's context when untitled): the default split unit
    mismatched: int  # answers whose answer_start did not match the context


@dataclass(frozen=True)
class SquadFile:
    version: str  # "1.1" or "2.0"
    questions: tuple[SquadQuestion, ...]

    @property
    def mismatched(self) -> int:
        return sum(q.mismatched for q in self.questions)


def _expect(value: Any, kind: type, path: Path, where: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{path}: {where} must be a JSON {kind.__name__}, found {json.dumps(value)[:80]}")
    return value


def _field(obj: dict, key: str, kind: type, path: Path, where: str) -> Any:
    if key not in obj:
        raise InputError(f"{path}: {where} has no {key!r} (keys: {', '.join(obj)})")
    return _expect(obj[key], kind, path, f"{where}.{key}")


def read_squad(path: Path) -> SquadFile:
    text = read_text(path, "SQuAD file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    doc = _expect(doc, dict, path, "the top level")
    articles = _field(doc, "data", list, path, "the top level")
    declared = str(doc.get("version", ""))
    is_v2 = declared.lstrip("v").startswith("2")
    questions: list[SquadQuestion] = []
    seen: dict[str, str] = {}
    for a, article in enumerate(articles):
        where_a = f"data[{a}]"
        article = _expect(article, dict, path, where_a)
        title = str(article.get("title", "")).strip()
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, where_a)):
            where_p = f"{where_a}.paragraphs[{p}]"
            paragraph = _expect(paragraph, dict, path, where_p)
            context = _field(paragraph, "context", str, path, where_p)
            for q, qa in enumerate(_field(paragraph, "qas", list, path, where_p)):
                where_q = f"{where_p}.qas[{q}]"
                qa = _expect(qa, dict, path, where_q)
                qid = str(qa.get("id", "")).strip()
                if not qid or isinstance(qa["id"], (bool, dict, list)):
                    raise InputError(f"{path}: {where_q} needs a non-empty 'id' string, found {qa.get('id')!r}")
                where_q = f"{where_q} (id {qid!r})"
                if qid in seen:
                    raise InputError(f"{path}: {where_q}: question id already used at {seen[qid]}")
                seen[qid] = where_q
                question = _field(qa, "question", str, path, where_q).strip()
                if not question:
                    raise InputError(f"{path}: {where_q}: empty question")
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise InputError(f"{path}: {where_q}.is_impossible must be true or false, found {impossible!r}")
                is_v2 = is_v2 or "is_impossible" in qa
                answers, mismatched = [], 0
                raw_answers = [] if impossible else _field(qa, "answers", list, path, where_q)
                for n, raw in enumerate(raw_answers):
                    where_n = f"{where_q}.answers[{n}]"
                    raw = _expect(raw, dict, path, where_n)
                    answer_text = _field(raw, "text", str, path, where_n)
                    start = _field(raw, "answer_start", int, path, where_n)
                    if not answer_text.strip():
                        raise InputError(f"{path}: {where_n}: empty answer text")
                    if context[start:start + len(answer_text)] != answer_text or start < 0:
                        mismatched += 1
                        start = UNKNOWN_START
                    answers.append(Answer(answer_text, start))
                if not impossible and not answers:
                    raise InputError(f"{path}: {where_q}: no answers, and not marked is_impossible")
                example = SquadExample(qid, question, context, tuple(answers), impossible, title)
                questions.append(SquadQuestion(example, title or context, mismatched))
    if not questions:
        raise InputError(f"{path}: no questions")
    return SquadFile("2.0" if is_v2 else "1.1", tuple(questions))


def usable_for_training(question: SquadQuestion) -> SquadExample | None:
    """The example without its mismatched answers; None when nothing usable is left."""
    example = question.example
    if not question.mismatched:
        return example
    kept = tuple(a for a in example.answers if a.start != UNKNOWN_START)
    return replace(example, answers=kept) if kept else None
