"""preprocessing.instances: BERT sentence pairs as create_pretraining_data builds them."""

import random

from preprocessing.instances import build_bucket_instances, truncate_seq_pair

CLS, SEP = 2, 3


def _docs(n_docs=12, seed=0):
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        sentences = [[rng.randrange(10, 500) for _ in range(rng.randint(3, 20))] for _ in range(rng.randint(1, 15))]
        docs.append((1000 + d * 7, sentences))
    return docs


def _build(docs, seed=1, **kw):
    args = dict(max_seq_len=48, short_seq_prob=0.1, nsp_random_prob=0.5, dupe_factor=2, cls_id=CLS, sep_id=SEP)
    args.update(kw)
    return build_bucket_instances(docs, random.Random(seed), **args)


def test_layout_lengths_and_labels():
    docs = _docs()
    instances = _build(docs)
    assert instances
    for inst in instances:
        ids = inst.input_ids
        assert 5 <= len(ids) <= 48
        assert ids[0] == CLS and ids[inst.len_a - 1] == SEP and ids[-1] == SEP
        assert CLS not in ids[1:] and ids.count(SEP) == 2
        assert inst.nsp_label in (0, 1)
    labels = [i.nsp_label for i in instances]
    assert 0.3 < sum(labels) / len(labels) < 0.8
    # instance indices count up per document over both dupe passes
    for doc, _ in docs:
        idx = [i.index for i in instances if i.doc_id == doc]
        assert idx == list(range(len(idx)))


def test_actual_next_keeps_document_order():
    docs = [(1, [[10 + i, 10 + i] for i in range(0, 40, 2)]), (2, [[900, 901]] * 20)]
    for inst in _build(docs, nsp_random_prob=0.0, short_seq_prob=0.0, dupe_factor=1, max_seq_len=64):
        if inst.doc_id == 1 and inst.nsp_label == 0:
            body = inst.input_ids[1:inst.len_a - 1] + inst.input_ids[inst.len_a:-1]
            assert body == sorted(body)  # A then B is a contiguous, in-order stretch (up to truncation)


def test_random_next_comes_from_another_document():
    docs = [(1, [[11] * 5] * 10), (2, [[22] * 5] * 10), (3, [[33] * 5] * 10)]
    for inst in _build(docs, nsp_random_prob=1.0):
        a = set(inst.input_ids[1:inst.len_a - 1])
        b = set(inst.input_ids[inst.len_a:-1])
        assert inst.nsp_label == 1 and a != b


def test_deterministic_and_independent_of_input_order():
    docs = _docs()
    shuffled = list(docs)
    random.Random(5).shuffle(shuffled)
    assert _build(docs) == _build(shuffled)
    assert _build(docs) != _build(docs, seed=2)


def test_truncate_seq_pair_removes_from_the_longer():
    a, b = list(range(30)), list(range(100, 110))
    truncate_seq_pair(a, b, 25, random.Random(0))
    assert len(a) + len(b) == 25 and len(b) == 10 and len(a) == 15
    assert a == list(range(a[0], a[0] + 15))  # still a contiguous stretch of A


def _token_at_a_time(len_a, len_b, max_num_tokens, rng):
    """google's truncate_seq_pair loop, on lengths: (kept a from, a to, kept b from, b to)."""
    a_lo, a_hi, b_lo, b_hi = 0, len_a, 0, len_b
    while a_hi - a_lo + b_hi - b_lo > max_num_tokens:
        front = rng.random() < 0.5
        if a_hi - a_lo > b_hi - b_lo:
            a_lo, a_hi = (a_lo + 1, a_hi) if front else (a_lo, a_hi - 1)
        else:
            b_lo, b_hi = (b_lo + 1, b_hi) if front else (b_lo, b_hi - 1)
    return a_lo, a_hi, b_lo, b_hi


def test_truncate_seq_pair_matches_the_token_at_a_time_loop_in_law():
    # the sides lose the same number of tokens as in google's loop, for every pair of lengths; how many go from
    # the front has the loop's distribution (Binomial(removed, 1/2)): compared by mean and variance over draws
    rng_ours, rng_ref = random.Random(3), random.Random(4)
    for len_a in range(0, 30, 3):
        for len_b in range(0, 30, 4):
            for max_num_tokens in (5, 17, 40):
                ref = _token_at_a_time(len_a, len_b, max_num_tokens, rng_ref)
                a, b = list(range(len_a)), list(range(100, 100 + len_b))
                truncate_seq_pair(a, b, max_num_tokens, rng_ours)
                assert (len(a), len(b)) == (ref[1] - ref[0], ref[3] - ref[2])
                assert a == list(range(a[0], a[0] + len(a))) if a else True  # a contiguous stretch
    fronts_ours, fronts_ref = [], []
    for _ in range(4000):
        a, b = list(range(60)), list(range(100, 140))
        truncate_seq_pair(a, b, 50, rng_ours)  # 50 removed: 20 from a until level, then 15 each
        fronts_ours.append(a[0])
        fronts_ref.append(_token_at_a_time(60, 40, 50, rng_ref)[0])
    mean = lambda xs: sum(xs) / len(xs)
    var = lambda xs: mean([(x - mean(xs)) ** 2 for x in xs])
    assert abs(mean(fronts_ours) - 17.5) < 0.2 and abs(mean(fronts_ref) - 17.5) < 0.2  # 35 removed from a
    assert abs(var(fronts_ours) - 35 / 4) < 0.8 and abs(var(fronts_ref) - 35 / 4) < 0.8


def test_single_document_bucket_never_claims_a_random_next():
    docs = [(1, [[10 + i] * 6 for i in range(30)])]
    instances = _build(docs, nsp_random_prob=1.0)
    assert instances and all(i.nsp_label == 0 for i in instances)
