"""Model inputs and decoding per task type, on hand-made cases: pair truncation, first-sub-token tag alignment,
SQuAD windows / max context / n-best decoding / no-answer, multiple-choice batching."""

import numpy as np
import pytest
import torch

from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder, truncate_pair
from evaluation.heads import TaskModel, decode_squad, decode_tagging
from evaluation.inputs import IGNORE_INDEX, build_features, collate, window_offsets
from evaluation.tasks.base import Answer, ChoiceExample, Example, SquadExample, TaggingExample
from training.models.bert.model import BertConfig, BertModel


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from tests.evaluation.conftest import write_wordpiece_tokenizer, movie_sentences

    path = write_wordpiece_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json", movie_sentences(1500), 400)
    return TextEncoder.from_file(path)


def test_pairs_are_cut_longest_first_with_segments(encoder):
    assert truncate_pair([1] * 7, [2] * 3, 6) == ([1] * 3, [2] * 3)
    assert truncate_pair([1] * 2, [2] * 9, 6) == ([1] * 2, [2] * 4)
    (ids, seg), = encoder.encode_pairs(["a fine film"], ["the worst movie of the year"], max_seq_len=64)
    a, b = encoder.tokenize(["a fine film", "the worst movie of the year"])
    assert ids.tolist() == [encoder.cls_id, *a, encoder.sep_id, *b, encoder.sep_id]
    assert seg.tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    (ids, seg), = encoder.encode_pairs(["a fine film " * 20], ["bad " * 2], max_seq_len=16)
    b_len = len(encoder.tokenize(["bad " * 2])[0])
    assert b_len <= 6 and len(ids) == 16 and seg.tolist().count(1) == b_len + 1  # the shorter b is kept whole
    features = build_features("pair-classification", [Example("1", "a fine film " * 20, 1, text_b="bad")],
                               encoder, FinetuneConfig(max_seq_len=16))
    assert features.truncated == 1
    batch = collate(features, [0], encoder.pad_id)
    assert batch["token_type_ids"][0].tolist() == features.segments[0].tolist()


def test_tagging_labels_only_the_first_sub_token_of_each_word(encoder):
    words = ("unbelievably", "good", "", "cinematography")
    example = TaggingExample("s1", words, (1, 0, 2, 3))
    features = build_features("tagging", [example], encoder, FinetuneConfig(max_seq_len=64))
    (tokens, word_of), = encoder.tokenize_words([words])
    starts = features.word_starts[0]
    assert starts[2] == -1  # the empty word has no token: no prediction, tagged O by the decoder
    labels = features.token_labels[0]
    for w, s in enumerate(starts):
        if s >= 0:
            assert labels[s] == example.tags[w] and word_of[s - 1] == w and (s == 1 or word_of[s - 2] != w)
    assert (labels != IGNORE_INDEX).sum() == 3 and len(labels) == len(tokens) + 2
    assert features.truncated == 1
    # decoding: the first sub-token's prediction per word, O (index 0) where there is none
    row_tags = np.arange(len(labels)) % 4
    assert decode_tagging(features, [row_tags], outside=0) == [[int(row_tags[s]) if s >= 0 else 0 for s in starts]]
    # truncation: words past max_seq_len get no start
    short = build_features("tagging", [example], encoder, FinetuneConfig(max_seq_len=4))
    assert (short.word_starts[0] >= 0).sum() <= 2 and short.truncated >= 2


def test_squad_windows_cover_the_context_and_target_the_window_holding_the_answer(encoder):
    context = " ".join(f"word{i}" for i in range(40)) + " the answer is here and then more words follow"
    start = context.index("answer is here")
    example = SquadExample("q1", "what is here?", context, (Answer("answer is here", start),))
    cfg = FinetuneConfig(max_seq_len=32, max_query_len=8, doc_stride=10)
    f = build_features("squad", [example], encoder, cfg)
    q_len = len(encoder.tokenize(["what is here?"])[0])
    window = 32 - q_len - 3
    ctx_tokens = len(encoder.tokenize([context])[0])
    offsets = window_offsets(ctx_tokens, window, 10)
    assert offsets == list(range(0, offsets[-1] + 1, 10)) and offsets[-1] + window >= ctx_tokens > offsets[-2] + window
    assert len(f.ids) == len(offsets) >= 3 and all(len(r) <= 32 for r in f.ids) and set(f.row_example.tolist()) == {0}
    # every context token is the max-context token of exactly one window
    covered = {}
    for spans, best in zip(f.token_spans, f.max_context):
        for (s, e), b in zip(spans, best):
            if s >= 0 and b:
                covered[(s, e)] = covered.get((s, e), 0) + 1
    assert len(covered) == ctx_tokens and set(covered.values()) == {1}
    hits = [r for r in range(len(f.ids)) if f.start_positions[r] > 0]
    assert hits, "some window holds the whole answer"
    for r in range(len(f.ids)):
        if r in hits:
            s, e = f.token_spans[r][f.start_positions[r]][0], f.token_spans[r][f.end_positions[r]][1]
            assert context[s:e] == "answer is here"
        else:
            assert f.end_positions[r] == 0  # [CLS]: no answer in this window

    # decoding: put the logits' peak on the gold span in its window -> the exact text back, low na_prob
    logits = [np.zeros((len(ids), 2), dtype=np.float32) for ids in f.ids]
    r = hits[0]
    logits[r][f.start_positions[r], 0] = 10.0
    logits[r][f.end_positions[r], 1] = 10.0
    texts, probs = decode_squad(f, logits, [context], n_best=5, max_answer_len=10)
    assert texts == ["answer is here"] and probs[0] < 0.01
    # a stronger [CLS] score in every window makes "no answer" likely
    for x in logits:
        x[0] = 30.0
    _, probs = decode_squad(f, logits, [context], n_best=5, max_answer_len=10)
    assert probs[0] > 0.99
    # a span longer than max_answer_len is not allowed
    texts, _ = decode_squad(f, logits, [context], n_best=5, max_answer_len=1)
    assert texts[0] != "answer is here"


def test_multiple_choice_scores_each_option_and_masks_missing_ones(encoder):
    examples = [ChoiceExample("1", "a passage about films", "which?", ("good", "bad", "ugly"), 2),
                ChoiceExample("2", "", "which?", ("yes", "no"), 0)]
    f = build_features("multiple-choice", examples, encoder, FinetuneConfig(max_seq_len=32))
    assert [len(r) for r in f.feature_rows] == [3, 2] and len(f) == 2
    batch = collate(f, [0, 1], encoder.pad_id)
    assert batch["input_ids"].shape[0] == 5 and batch["choice_index"].tolist() == [[0, 1, 2], [3, 4, -1]]
    torch.manual_seed(0)
    model = TaskModel(BertModel(BertConfig(vocab_size=encoder.tokenizer.get_vocab_size(), hidden_size=16,
                                           num_layers=1, num_heads=2, intermediate_size=32,
                                           max_position_embeddings=64)), "multiple-choice", 0, 0.0)
    model.eval()
    logits = model(batch)["logits"]
    assert logits.shape == (2, 3) and torch.isinf(logits[1, 2]) and torch.isfinite(logits[0]).all()
    loss = model.loss({"logits": logits}, batch)
    assert torch.isfinite(loss)
    # each option is scored alone: the first example's scores do not depend on the second example's rows
    alone = model(collate(f, [0], encoder.pad_id))["logits"]
    assert torch.allclose(alone[0], logits[0], atol=1e-5)
