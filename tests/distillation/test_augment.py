"""TinyBERT augmentation: valid token sequences, labels kept, MLM candidates for single-piece words, embedding
nearest neighbours for multi-piece words, deterministic."""

import numpy as np
import pytest
import torch

from bertfactory.errors import ConfigError
from evaluation.inputs import Features
from distillation.augment import Augmenter, augment_features
from training.models.bert.model import BertConfig, BertForPreTraining

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["good", "bad", "film", "movie", "plot", "great", "play", "##ing", "##ed", "act"]


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(SPECIALS + WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok


def _teacher(favourite: int | None = None):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=len(SPECIALS + WORDS), hidden_size=16, num_layers=1, num_heads=2,
                                          intermediate_size=32, max_position_embeddings=16))
    if favourite is not None:
        with torch.no_grad():
            model.mlm_head.bias[favourite] = 100.0
    return model


def _ids(tok, text):
    return np.array([2, *tok.encode(text, add_special_tokens=False).ids, 3], dtype=np.int64)


def test_words_group_continuations():
    tok = _tokenizer()
    aug = Augmenter(_teacher(), tok, has_mlm_head=True)
    ids = _ids(tok, "good playing film acted")
    assert [tok.id_to_token(int(i)) for i in ids] == ["[CLS]", "good", "play", "##ing", "film", "act", "##ed", "[SEP]"]
    assert aug.words(ids) == [(1, 2), (2, 4), (4, 5), (5, 7)]


def test_mlm_candidates_for_single_pieces_embedding_neighbours_for_multi_pieces():
    tok = _tokenizer()
    movie = tok.token_to_id("movie")
    teacher = _teacher(favourite=movie)
    aug = Augmenter(teacher, tok, has_mlm_head=True, p=1.0, n_candidates=1, copies=2, seed=0)
    ids = _ids(tok, "good playing film")
    cands = dict(aug.candidates(ids, np.zeros_like(ids)))
    assert cands[(1, 2)] == [movie] and cands[(4, 5)] == [movie]  # the teacher's MLM top-1
    emb = torch.nn.functional.normalize(teacher.bert.embeddings.word_embeddings.weight.detach(), dim=-1)
    raw = teacher.bert.embeddings.word_embeddings.weight.detach()
    query = torch.nn.functional.normalize(raw[[tok.token_to_id("play"), tok.token_to_id("##ing")]].mean(0), dim=-1)
    allowed = [tok.token_to_id(w) for w in WORDS if not w.startswith("##") and w != "play"]
    want = max(allowed, key=lambda t: float(emb[t] @ query))
    assert cands[(2, 4)] == [want]
    copy_ids, copy_seg = aug.augment(ids, np.zeros_like(ids), 0)[0]
    # p = 1: every word replaced by one whole-word token; the multi-piece word shrinks to one token
    assert copy_ids.tolist() == [2, movie, want, movie, 3] and len(copy_seg) == len(copy_ids)


def test_augmented_features_are_valid_and_keep_labels():
    tok = _tokenizer()
    aug = Augmenter(_teacher(), tok, has_mlm_head=True, p=0.4, n_candidates=3, copies=4, seed=1)
    rows = [_ids(tok, t) for t in ("good film", "bad movie acted", "great plot playing play")]
    feats = Features("classification", rows, [np.zeros_like(r) for r in rows], np.array([1, 0, 1]), 3)
    out = augment_features(feats, aug)
    assert len(out.ids) == 3 + 3 * 4 and out.num_examples == 15
    assert out.labels.tolist() == [1, 0, 1] + [1] * 4 + [0] * 4 + [1] * 4
    vocab = len(SPECIALS + WORDS)
    changed = 0
    for ids, seg in zip(out.ids[3:], out.segments[3:]):
        assert ids[0] == 2 and ids[-1] == 3 and len(seg) == len(ids)
        assert all(4 < t < vocab for t in ids[1:-1])  # no special token inside
        assert not any(tok.id_to_token(int(t)).startswith("##") and tok.id_to_token(int(p)) in SPECIALS
                       for p, t in zip(ids[:-1], ids[1:]))  # no orphan continuation after [CLS]
    for i, ids in enumerate(out.ids[3:]):
        changed += not np.array_equal(ids, rows[i // 4])
    assert changed > 0
    again = augment_features(feats, Augmenter(_teacher(), tok, has_mlm_head=True, p=0.4, n_candidates=3, copies=4, seed=1))
    assert all(np.array_equal(a, b) for a, b in zip(out.ids, again.ids))


def test_no_mlm_head_uses_embedding_neighbours_and_bad_settings_refused():
    tok = _tokenizer()
    aug = Augmenter(_teacher(favourite=tok.token_to_id("movie")), tok, has_mlm_head=False, n_candidates=2)
    ids = _ids(tok, "good film")
    found = aug.candidates(ids, np.zeros_like(ids))
    # the MLM head's favourite is ignored: every candidate is an embedding neighbour, never the word itself
    assert [span for span, _ in found] == [(1, 2), (2, 3)] and all(len(c) == 2 for _, c in found)
    assert all(int(ids[s]) not in c for (s, _), c in found)
    with pytest.raises(ConfigError, match="p"):
        Augmenter(_teacher(), tok, has_mlm_head=True, p=1.5)
