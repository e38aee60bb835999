"""TinyBERT's task data augmentation: M noisy copies of every training example, labels kept.

For each word of an example (a word = a token plus its WordPiece "##" continuation tokens), the N replacement
candidates are computed once:
- a single-piece word: the teacher's masked-LM top N at that position, the word replaced by [MASK] (one teacher
  pass per example, each word masked in its own row);
- a multi-piece word: TinyBERT takes GloVe nearest neighbours; GloVe is not available here (no downloads), so we
  take the N nearest whole-word tokens to the mean of the word's pieces in the teacher's input-embedding matrix
  (cosine). A teacher without a trained MLM head (MiniLM) uses this embedding rule for every word.
Candidates are never special tokens, "##" continuations or the word itself. Then each of the M copies replaces
every word with probability p by one of its candidates drawn uniformly (TinyBERT: p 0.4, N 15, M 20).

    augmenter = Augmenter(teacher.model, tokenizer, has_mlm_head=True, p=0.4, n_candidates=15, copies=20, seed=0)
    bigger = augment_features(task.train.features, augmenter)   # the originals first, then their copies
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from bertfactory.errors import ConfigError
from training.models.bert.model import BertForPreTraining

CONTINUATION_PREFIX = "##"


class Augmenter:
    def __init__(self, teacher: BertForPreTraining, tokenizer, has_mlm_head: bool, p: float = 0.4,
                 n_candidates: int = 15, copies: int = 20, seed: int = 0, batch_rows: int = 64):
        if not 0.0 <= p <= 1.0 or n_candidates < 1 or copies < 1:
            raise ConfigError(f"augmentation needs 0 <= p <= 1, n_candidates >= 1, copies >= 1 (got p {p}, "
                              f"n_candidates {n_candidates}, copies {copies})")
        self.teacher, self.has_mlm_head = teacher.eval(), has_mlm_head
        self.p, self.n, self.copies, self.seed, self.batch_rows = p, n_candidates, copies, seed, batch_rows
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        size = teacher.config.vocab_size
        tokens = [""] * size
        for token, i in vocab.items():
            if i < size:
                tokens[i] = token
        self.special = {i for i, t in enumerate(tokens) if t.startswith("[") and t.endswith("]")}
        self.continuation = np.array([t.startswith(CONTINUATION_PREFIX) for t in tokens])
        allowed = np.array([bool(t) and i not in self.special and not self.continuation[i] for i, t in enumerate(tokens)])
        self.allowed = torch.from_numpy(allowed)
        self.mask_id = vocab.get("[MASK]")
        if has_mlm_head and self.mask_id is None:
            raise ConfigError("MLM candidate replacement needs a [MASK] token in the tokenizer")
        emb = teacher.bert.embeddings.word_embeddings.weight.detach().float()
        self.unit_embeddings = F.normalize(emb, dim=-1)

    def words(self, ids: np.ndarray) -> list[tuple[int, int]]:
        """[start, end) of every word: a non-special token and the continuation tokens after it."""
        spans: list[tuple[int, int]] = []
        for i, t in enumerate(ids.tolist()):
            if t in self.special:
                continue
            if self.continuation[t] and spans and spans[-1][1] == i:
                spans[-1] = (spans[-1][0], i + 1)
            else:
                spans.append((i, i + 1))
        return spans

    def _blocked(self, own: list[int]) -> torch.Tensor:
        scores_mask = ~self.allowed.clone()
        scores_mask[own] = True
        return scores_mask

    @torch.no_grad()
    def candidates(self, ids: np.ndarray, segments: np.ndarray) -> list[tuple[tuple[int, int], list[int]]]:
        spans = self.words(ids)
        out: list[tuple[tuple[int, int], list[int]]] = []
        mlm_spans = [s for s in spans if self.has_mlm_head and s[1] - s[0] == 1]
        for start in range(0, len(mlm_spans), self.batch_rows):
            chunk = mlm_spans[start:start + self.batch_rows]
            rows = torch.as_tensor(np.repeat(ids[None], len(chunk), 0))
            positions = torch.tensor([[s] for s, _ in chunk])
            rows[torch.arange(len(chunk)), positions[:, 0]] = self.mask_id
            hidden = self.teacher.bert(rows, torch.as_tensor(np.repeat(segments[None], len(chunk), 0)),
                                       torch.ones_like(rows))
            logits = self.teacher.mlm_head(hidden[torch.arange(len(chunk)), positions[:, 0]],
                                           self.teacher.bert.embeddings.word_embeddings.weight).float()
            for row, (s, e) in enumerate(chunk):
                scores = logits[row].masked_fill(self._blocked([int(ids[s])]), float("-inf"))
                out.append(((s, e), scores.topk(self.n).indices.tolist()))
        for s, e in spans:
            if self.has_mlm_head and e - s == 1:
                continue
            pieces = [int(t) for t in ids[s:e]]
            query = F.normalize(self.teacher.bert.embeddings.word_embeddings.weight[pieces].float().mean(0), dim=-1)
            scores = (self.unit_embeddings @ query).masked_fill(self._blocked(pieces), float("-inf"))
            out.append(((s, e), scores.topk(self.n).indices.tolist()))
        return sorted(out)

    def augment(self, ids: np.ndarray, segments: np.ndarray, example_index: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The M copies of one example (ids, segment ids); deterministic in (seed, example_index)."""
        found = self.candidates(ids, segments)
        rng = np.random.default_rng([self.seed, example_index])
        copies = []
        for _ in range(self.copies):
            new_ids, new_segments, last = [], [], 0
            for (s, e), cands in found:
                new_ids += ids[last:s].tolist()
                new_segments += segments[last:s].tolist()
                if rng.random() < self.p:
                    new_ids.append(cands[int(rng.integers(len(cands)))])
                    new_segments.append(int(segments[s]))
                else:
                    new_ids += ids[s:e].tolist()
                    new_segments += segments[s:e].tolist()
                last = e
            new_ids += ids[last:].tolist()
            new_segments += segments[last:].tolist()
            copies.append((np.asarray(new_ids, dtype=ids.dtype), np.asarray(new_segments, dtype=segments.dtype)))
        return copies


def augment_features(features, augmenter: Augmenter):
    """A sequence-classification Features with the originals followed by every example's M copies (same label)."""
    if features.task_type not in ("classification", "pair-classification", "regression"):
        raise ConfigError(f"augmentation supports sequence tasks, not {features.task_type!r}")
    ids, segments, labels = list(features.ids), list(features.segments), list(features.labels)
    for i, (row, seg) in enumerate(zip(features.ids, features.segments)):
        for new_ids, new_seg in augmenter.augment(row, seg, i):
            ids.append(new_ids)
            segments.append(new_seg)
            labels.append(features.labels[i])
    return dataclasses.replace(features, ids=ids, segments=segments, labels=np.asarray(labels, dtype=features.labels.dtype),
                               num_examples=len(ids))
