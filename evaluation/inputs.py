"""Model inputs of a task split, per task type (`build_features`), and batches of them (`collate`).

- classification / pair-classification / regression: one row `[CLS] text [SEP] (text_b [SEP])` per example.
- tagging: one row per sentence; each word's first sub-token carries the word's tag, every other position the
  ignore index (-100); `word_starts` remembers where each word starts so predictions map back to words. Words cut
  off by max_seq_len (or that tokenise to nothing) get no prediction: the decoder tags them O (and they still count
  in the gold entities, so truncation costs recall rather than being hidden).
- squad: `[CLS] question [SEP] context window [SEP]` rows: the context is cut into windows of
  max_seq_len - len(question) - 3 tokens starting every doc_stride tokens (BERT's run_squad). A window's target is
  the first gold answer's token span when the window holds it whole, else [CLS] (index 0 = "no answer here").
  Each row keeps its context tokens' character spans and whether the window is the token's "max context" one.
- multiple-choice: per example one row per option, `[CLS] passage [SEP] question option [SEP]` (without a passage:
  `[CLS] question [SEP] option [SEP]`); a feature is the example with its rows.

    features = build_features(data.task_type, data.train, text_encoder, cfg.finetune, label_names=...)
    batch = collate(features, indices=[0, 5, 7], pad_id=text_encoder.pad_id)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from bertfactory.errors import ContractError

from .config import FinetuneConfig
from .encode import TextEncoder, join_pair, pad_batch, truncate_pair
from .tasks.base import ChoiceExample, Example, RegressionExample, SquadExample, TaggingExample

IGNORE_INDEX = -100
CLASSIFICATION_TYPES = ("classification", "pair-classification")


@dataclass
class Features:
    """The encoded split. A *feature* is what one training example is: a row, or (multiple choice) an example's
    option rows. `labels` is per feature (class id, float target or correct option); SQuAD's targets are the
    per-row start/end positions."""

    task_type: str
    ids: list[np.ndarray]
    segments: list[np.ndarray]
    labels: np.ndarray
    num_examples: int
    feature_rows: list[np.ndarray] | None = None  # multiple-choice: rows of each feature
    token_labels: list[np.ndarray] | None = None  # tagging: per row, tag at word starts, -100 elsewhere
    word_starts: list[np.ndarray] | None = None  # tagging: per row, token index of each word's first token (-1 none)
    start_positions: np.ndarray | None = None  # squad: per row
    end_positions: np.ndarray | None = None
    row_example: np.ndarray | None = None  # squad: example index of each row
    token_spans: list[np.ndarray] | None = None  # squad: per row [T, 2] character span in the context (-1: not context)
    max_context: list[np.ndarray] | None = None  # squad: per row, token is scored in this window
    truncated: int = 0  # examples whose input was cut (tagging: words left without a prediction)
    notes: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.feature_rows) if self.feature_rows is not None else len(self.ids)

    def rows(self, indices: Sequence[int]) -> list[int]:
        if self.feature_rows is None:
            return [int(i) for i in indices]
        return [int(r) for i in indices for r in self.feature_rows[i]]


def build_features(task_type: str, examples: Sequence, encoder: TextEncoder, cfg: FinetuneConfig,
                   num_labels: int = 0) -> Features:
    if task_type in CLASSIFICATION_TYPES or task_type == "regression":
        return _sequence_features(task_type, examples, encoder, cfg.max_seq_len)
    if task_type == "tagging":
        return _tagging_features(examples, encoder, cfg.max_seq_len)
    if task_type == "squad":
        return _squad_features(examples, encoder, cfg.max_seq_len, cfg.max_query_len, cfg.doc_stride)
    if task_type == "multiple-choice":
        return _choice_features(examples, encoder, cfg.max_seq_len)
    raise ContractError(f"no inputs for task type {task_type!r}")


def _check_examples(examples: Sequence, kind: type, task_type: str) -> None:
    wrong = next((e for e in examples if not isinstance(e, kind)), None)
    if wrong is not None:
        raise ContractError(f"task type {task_type} needs {kind.__name__} examples, got {type(wrong).__name__} "
                            f"(id {getattr(wrong, 'id', '?')!r})")


def _sequence_features(task_type: str, examples: Sequence, encoder: TextEncoder, max_seq_len: int) -> Features:
    kind = RegressionExample if task_type == "regression" else Example
    _check_examples(examples, kind, task_type)
    encoded = encoder.encode_pairs([e.text for e in examples], [e.text_b for e in examples], max_seq_len)
    lengths = [len(t) for t in encoder.tokenize([e.text for e in examples])]
    lengths_b = [len(t) for t in encoder.tokenize([e.text_b or "" for e in examples])]
    truncated = sum(a + b + (3 if e.text_b is not None else 2) > max_seq_len
                    for a, b, e in zip(lengths, lengths_b, examples))
    if task_type == "regression":
        labels = np.array([e.target for e in examples], dtype=np.float32)
    else:
        labels = np.array([e.label for e in examples], dtype=np.int64)
    return Features(task_type, [i for i, _ in encoded], [s for _, s in encoded], labels, len(examples),
                    truncated=truncated)


def _tagging_features(examples: Sequence, encoder: TextEncoder, max_seq_len: int) -> Features:
    _check_examples(examples, TaggingExample, "tagging")
    ids, segments, token_labels, word_starts = [], [], [], []
    unpredicted = 0
    for e, (tokens, word_of) in zip(examples, encoder.tokenize_words([e.words for e in examples])):
        keep = max_seq_len - 2
        row = np.array([encoder.cls_id, *tokens[:keep], encoder.sep_id], dtype=np.int64)
        labels = np.full(len(row), IGNORE_INDEX, dtype=np.int64)
        starts = np.full(len(e.words), -1, dtype=np.int64)
        for t, w in enumerate(word_of[:keep]):
            if w >= 0 and starts[w] < 0:
                starts[w] = t + 1  # +1: [CLS]
                labels[t + 1] = e.tags[w]
        unpredicted += int((starts < 0).sum())
        ids.append(row)
        segments.append(np.zeros(len(row), dtype=np.int64))
        token_labels.append(labels)
        word_starts.append(starts)
    return Features("tagging", ids, segments, np.zeros(len(examples), dtype=np.int64), len(examples),
                    token_labels=token_labels, word_starts=word_starts, truncated=unpredicted)


def answer_token_span(spans: Sequence[tuple[int, int]], char_start: int, char_end: int) -> tuple[int, int] | None:
    """The first and last token overlapping [char_start, char_end), or None when no token does."""
    inside = [t for t, (s, e) in enumerate(spans) if s < char_end and e > char_start and e > s]
    return (inside[0], inside[-1]) if inside else None


def _squad_features(examples: Sequence, encoder: TextEncoder, max_seq_len: int, max_query_len: int,
                    doc_stride: int) -> Features:
    _check_examples(examples, SquadExample, "squad")
    questions = encoder.tokenize([e.question for e in examples])
    contexts = encoder.tokenize_with_offsets([e.context for e in examples])
    ids, segments, starts, ends, row_example, token_spans, max_context = [], [], [], [], [], [], []
    unaligned = 0
    for index, (e, q, (ctx, spans)) in enumerate(zip(examples, questions, contexts)):
        q = q[:max_query_len]
        window = max_seq_len - len(q) - 3
        if window < 1:
            raise ContractError(f"max_seq_len={max_seq_len} leaves no room for context after a {len(q)}-token "
                                f"question (max_query_len={max_query_len})")
        gold = None
        # readers mark a dev/test answer whose position did not check out with start -1 (its text is still scored)
        located = [a for a in e.answers if a.start >= 0] if not e.is_impossible else []
        if located:
            a = located[0]
            gold = answer_token_span(spans, a.start, a.start + len(a.text))
            unaligned += gold is None
        offsets = window_offsets(len(ctx), window, doc_stride)
        for w, begin in enumerate(offsets):
            end = min(len(ctx), begin + window)
            row, seg = join_pair(encoder.cls_id, encoder.sep_id, q, ctx[begin:end])
            base = len(q) + 2  # [CLS] q [SEP]
            span = np.full((len(row), 2), -1, dtype=np.int64)
            span[base: base + end - begin] = spans[begin:end]
            best = np.zeros(len(row), dtype=bool)
            for t in range(begin, end):
                best[base + t - begin] = _is_max_context(offsets, window, len(ctx), w, t)
            if gold is not None and gold[0] >= begin and gold[1] < end:
                starts.append(base + gold[0] - begin)
                ends.append(base + gold[1] - begin)
            else:
                starts.append(0)
                ends.append(0)
            ids.append(row)
            segments.append(seg)
            row_example.append(index)
            token_spans.append(span)
            max_context.append(best)
    return Features("squad", ids, segments, np.zeros(len(ids), dtype=np.int64), len(examples),
                    start_positions=np.array(starts, dtype=np.int64), end_positions=np.array(ends, dtype=np.int64),
                    row_example=np.array(row_example, dtype=np.int64), token_spans=token_spans,
                    max_context=max_context, notes={"answers_without_tokens": unaligned})


def window_offsets(length: int, window: int, doc_stride: int) -> list[int]:
    """Start tokens of the context windows (BERT's run_squad): the next window starts min(window, doc_stride)
    tokens later, until one reaches the end."""
    offsets, begin = [], 0
    while True:
        offsets.append(begin)
        if begin + window >= length:
            return offsets
        begin += min(window, doc_stride)


def _is_max_context(offsets: list[int], window: int, length: int, current: int, token: int) -> bool:
    """BERT's _check_is_max_context: a token is scored in the window where it has the most context on its
    shorter side (ties: more total length)."""
    best, best_score = None, -1.0
    for w, begin in enumerate(offsets):
        end = min(length, begin + window) - 1
        if token < begin or token > end:
            continue
        score = min(token - begin, end - token) + 0.01 * (end - begin + 1)
        if score > best_score:
            best, best_score = w, score
    return best == current


def _choice_features(examples: Sequence, encoder: TextEncoder, max_seq_len: int) -> Features:
    _check_examples(examples, ChoiceExample, "multiple-choice")
    ids, segments, feature_rows = [], [], []
    truncated = 0
    for e in examples:
        first = e.context if e.context else e.question
        a = encoder.tokenize([first])[0]
        rows = []
        for option in e.options:
            second = f"{e.question} {option}" if e.context else option
            b = encoder.tokenize([second])[0]
            truncated += len(a) + len(b) > max_seq_len - 3
            ta, tb = truncate_pair(a, b, max_seq_len - 3)
            row, seg = join_pair(encoder.cls_id, encoder.sep_id, ta, tb)
            rows.append(len(ids))
            ids.append(row)
            segments.append(seg)
        feature_rows.append(np.array(rows, dtype=np.int64))
    labels = np.array([e.label for e in examples], dtype=np.int64)
    return Features("multiple-choice", ids, segments, labels, len(examples), feature_rows=feature_rows,
                    truncated=truncated)


def collate(features: Features, indices: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """The batch of features `indices`: input_ids / token_type_ids / attention_mask over their rows, plus the
    targets the task type's loss needs (labels, token_labels, start/end positions, choice_index)."""
    rows = features.rows(indices)
    batch = pad_batch([features.ids[r] for r in rows], pad_id, [features.segments[r] for r in rows])
    t = features.task_type
    if t == "tagging":
        width = batch["input_ids"].shape[1]
        labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)
        for i, r in enumerate(rows):
            labels[i, : len(features.token_labels[r])] = features.token_labels[r]
        batch["token_labels"] = torch.from_numpy(labels)
    elif t == "squad":
        batch["start_positions"] = torch.from_numpy(features.start_positions[rows])
        batch["end_positions"] = torch.from_numpy(features.end_positions[rows])
    else:
        batch["labels"] = torch.from_numpy(features.labels[np.asarray(indices, dtype=np.int64)])
    if t == "multiple-choice":
        counts = [len(features.feature_rows[i]) for i in indices]
        choice = np.full((len(indices), max(counts)), -1, dtype=np.int64)
        start = 0
        for i, c in enumerate(counts):
            choice[i, :c] = np.arange(start, start + c)
            start += c
        batch["choice_index"] = torch.from_numpy(choice)
    return batch
