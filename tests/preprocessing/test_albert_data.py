"""ALBERT's data: sentence-order pairs (preprocessing.instances, sentence_order=True) and n-gram masking
(preprocessing.masking, policy ngram), checked by their statistics over many instances, plus the real pipeline
writing sop-pairs shards with n-gram masks and naming the instance format in the manifest."""

import random
from collections import Counter

import pytest

from preprocessing.config import MaskingConfig, PreprocessConfig
from preprocessing.instances import build_bucket_instances
from preprocessing.masking import Masker, variant_seeds
from preprocessing.masking_policies import MAX_NGRAM, Candidates, ngram_units
from preprocessing.masking_vocab import continuation_ids

CLS, SEP = 2, 3
SPECIALS = frozenset({0, 1, 2, 3, 4})
CONTINUATION = frozenset(range(700, 1000))  # ids 700..999 play the '##' pieces


def _docs(n_docs=12, seed=0):
    """Documents whose sentences are runs of consecutive ids, each sentence starting where the previous ended, so
    the document order of any two segments is visible in the ids."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        start, sentences = 10 + 1000 * d, []
        for _ in range(rng.randint(1, 15)):
            length = rng.randint(3, 20)
            sentences.append(list(range(start, start + length)))
            start += length
        docs.append((1000 + d * 7, sentences))
    return docs


def _sop(docs, seed=1, **kw):
    args = dict(max_seq_len=48, short_seq_prob=0.1, nsp_random_prob=0.5, dupe_factor=3, cls_id=CLS, sep_id=SEP,
                sentence_order=True)
    args.update(kw)
    return build_bucket_instances(docs, random.Random(seed), **args)


def test_sop_pairs_are_consecutive_segments_of_one_document_swapped_half_the_time():
    instances = _sop(_docs(n_docs=40), dupe_factor=5)
    assert len(instances) > 400
    for inst in instances:
        ids = inst.input_ids
        first, second = ids[1:inst.len_a - 1], ids[inst.len_a:-1]
        assert ids[0] == CLS and ids[inst.len_a - 1] == SEP and ids[-1] == SEP and first and second
        assert len(ids) <= 48
        # both segments from the instance's own document (ids d*1000 + ...), never another one
        assert {t // 1000 for t in first + second} == {(inst.doc_id - 1000) // 7}
        if inst.nsp_label == 0:  # in order: the first segment comes before the second in the document
            assert max(first) < min(second)
        else:  # swapped
            assert max(second) < min(first)
        # each segment is one stretch of consecutive sentences (truncation removes tokens at segment ends only)
        assert first == list(range(first[0], first[0] + len(first)))
        assert second == list(range(second[0], second[0] + len(second)))
    swapped = sum(i.nsp_label for i in instances) / len(instances)
    assert 0.42 < swapped < 0.58, swapped


def test_sop_pairs_are_deterministic_and_leave_nsp_pairs_unchanged():
    docs = _docs(seed=3)
    assert _sop(docs) == _sop(list(reversed(docs)))
    assert _sop(docs, seed=1) != _sop(docs, seed=2)
    nsp = _sop(docs, sentence_order=False)
    assert nsp == build_bucket_instances(docs, random.Random(1), max_seq_len=48, short_seq_prob=0.1,
                                         nsp_random_prob=0.5, dupe_factor=3, cls_id=CLS, sep_id=SEP)
    assert any(inst.nsp_label == 1 and len({t // 1000 for t in inst.input_ids[1:-1] if t != SEP}) == 2 for inst in nsp)


def test_a_single_sentence_document_yields_no_sop_pair():
    # with only one sentence there is nothing to order (NSP would pair it with a random document)
    assert _sop([(1, [[10, 11, 12]]), (2, [[20, 21, 22]])]) == []


def _instance(rng: random.Random, length: int) -> list[int]:
    """[CLS] A [SEP] B [SEP] of words of 1-3 pieces (a start id < 700, then '##' ids >= 700)."""
    def segment(n):
        out = []
        while len(out) < n:
            out.append(rng.randrange(5, 700))
            out.extend(rng.randrange(700, 1000) for _ in range(rng.choice((0, 0, 0, 1, 2))))
        return out[:n]
    a = segment(rng.randint(10, length - 13))
    return [CLS, *a, SEP, *segment(length - len(a) - 3), SEP]


def _words(ids):
    candidates = Candidates([t in SPECIALS for t in ids], [t in CONTINUATION for t in ids])
    return [word for run in candidates.word_runs() for word in run]


def test_ngram_lengths_are_drawn_with_probability_proportional_to_one_over_n():
    rng = random.Random(0)
    drawn, near_end = Counter(), Counter()
    for _ in range(300):
        ids = _instance(rng, 128)
        candidates = Candidates([t in SPECIALS for t in ids], [t in CONTINUATION for t in ids])
        place = {word[0]: (run, i) for run in candidates.word_runs() for i, word in enumerate(run)}
        units = ngram_units(candidates, rng)
        assert len(units) == len(place)  # one n-gram per word
        for unit in units:
            run, i = place[unit[0]]
            n = next(k for k in range(1, MAX_NGRAM + 1) if [p for w in run[i:i + k] for p in w] == unit)
            (drawn if len(run) - i >= MAX_NGRAM else near_end)[n] += 1
    shares = _shares(drawn)
    harmonic = sum(1 / n for n in range(1, MAX_NGRAM + 1))
    expected = {n: (1 / n) / harmonic for n in range(1, MAX_NGRAM + 1)}  # 6/11, 3/11, 2/11
    print("drawn n-gram shares", {n: round(v, 4) for n, v in shares.items()}, "of", sum(drawn.values()))
    assert all(abs(shares[n] - expected[n]) < 0.01 for n in expected), shares
    # the last two words of a run can only start n-grams that end inside it (renormalised: 2/3, 1/3 and 1)
    assert near_end[3] == 0 and near_end[1] > near_end[2] > 0


def _albert_reference_choice(runs, budget: int, rng: random.Random) -> Counter:
    """google-research/albert create_masked_lm_predictions' n-gram selection, ported (n-grams within a run of
    words, as ours): shuffle the word starts, draw n ~ 1/n per start, shorten n while it exceeds the budget, skip
    it if it overlaps what is taken. Returns how many n-grams of each n it took."""
    ngram_indexes = [[run[i:i + n] for n in range(1, MAX_NGRAM + 1) if i + n <= len(run)]
                     for run in runs for i in range(len(run))]
    rng.shuffle(ngram_indexes)
    covered, chosen = set(), Counter()
    for grams in ngram_indexes:
        if len(covered) >= budget:
            break
        sizes = range(1, len(grams) + 1)
        n = rng.choices(sizes, weights=[1 / k for k in sizes])[0]
        positions = [p for word in grams[n - 1] for p in word]
        while len(covered) + len(positions) > budget and n > 1:
            n -= 1
            positions = [p for word in grams[n - 1] for p in word]
        if len(covered) + len(positions) > budget or not covered.isdisjoint(positions):
            continue
        covered.update(positions)
        chosen[n] += 1
    return chosen


def _shares(counts: Counter) -> dict[int, float]:
    total = sum(counts.values())
    return {n: counts[n] / total for n in sorted(counts)}


def test_ngram_masking_respects_the_budget_never_splits_a_word_and_chooses_as_albert():
    masker = Masker(MaskingConfig(policy="ngram", variants=1), seed=5, vocab_size=1000, mask_id=4,
                    special_ids=SPECIALS, continuation_ids=CONTINUATION)
    rng = random.Random(1)
    chosen_n, reference_n, exact, instances = Counter(), Counter(), 0, 1000
    for index in range(instances):
        ids = _instance(rng, rng.choice((40, 96, 128)))
        budget = masker.num_to_predict(len(ids))
        (positions,), (tokens,) = masker.variants(ids, doc_id=3, index=index)
        assert len(positions) <= budget and positions == sorted(set(positions))
        exact += len(positions) == budget
        assert not any(ids[p] in SPECIALS for p in positions)
        masked = set(positions)
        for word in _words(ids):  # a word is masked whole or not at all
            assert masked.issuperset(word) or masked.isdisjoint(word), (word, positions)
        # the units behind the masks: n-grams of whole words, counted by their number of words
        units = masker.choose_units(ids, int(variant_seeds(5, [3], [index], 1)[0, 0]))  # variant 0's seed
        assert sorted(p for u in units for p in u) == positions
        starts = {word[0] for word in _words(ids)}
        chosen_n.update(sum(p in starts for p in unit) for unit in units)
        runs = Candidates([t in SPECIALS for t in ids], [t in CONTINUATION for t in ids]).word_runs()
        reference_n += _albert_reference_choice(runs, budget, random.Random(index))
    ours, reference = _shares(chosen_n), _shares(reference_n)
    print("chosen n-gram shares: ours", {n: round(v, 4) for n, v in ours.items()}, "ALBERT's algorithm",
          {n: round(v, 4) for n, v in reference.items()}, "; budget filled exactly in", exact, "/", instances)
    # Drawn ∝ 1/n (6/11, 3/11, 2/11), the n-grams *taken* under a fixed budget are shorter: long ones stop fitting
    # near the end and overlap taken ones more often. ALBERT's own selection has the same shape; ours (skip
    # instead of shorten) takes the same mix.
    assert set(ours) == {1, 2, 3} and ours[1] > ours[2] > ours[3]
    assert all(abs(ours[n] - reference[n]) < 0.02 for n in (1, 2, 3)), (ours, reference)
    assert exact >= 0.9 * instances  # single words nearly always fill the last places


def test_continuation_ids_of_a_wordpiece_vocabulary():
    vocab = {"[PAD]": 0, "##": 1, "play": 2, "##ing": 3, "##s": 4, "#": 5}
    assert continuation_ids(vocab) == frozenset({3, 4})


@pytest.mark.parametrize("fmt, policy, meanings", [
    ("sop-pairs", "ngram", {"0": "in order", "1": "swapped"}),
    ("nsp-pairs", "token", {"0": "IsNext", "1": "NotNext"}),
])
def test_pipeline_names_the_instance_format_and_writes_its_rows(tmp_path, wiki, no_prism, fmt, policy, meanings):
    from tokenizers import Tokenizer

    from preprocessing.pipeline import run_preprocess
    from preprocessing.shards import ShardSet, read_manifest

    dump = wiki.write_dump(tmp_path / "tiny-pages-articles.xml.bz2", wiki.standard_pages())
    cfg = wiki.config().model_dump(mode="json")
    cfg["instances"]["format"], cfg["masking"]["policy"] = fmt, policy
    run_preprocess(wiki.corpus(dump), PreprocessConfig.model_validate(cfg), tmp_path / "run")
    manifest = read_manifest(tmp_path / "run" / "shards")
    assert manifest.instance_format["name"] == fmt and manifest.instance_format["nsp_label"] == meanings
    assert manifest.masking["policy"] == policy
    rows = list(ShardSet.open(tmp_path / "run" / "shards", "train"))
    labels = [r.nsp_label for r in rows]
    assert rows and 0.25 < sum(labels) / len(labels) < 0.75
    if policy != "ngram":
        return
    tokenizer = Tokenizer.from_file(str(tmp_path / "run" / "tokenizer" / "tokenizer.json"))
    pieces = continuation_ids(tokenizer.get_vocab())
    assert pieces  # the tiny WordPiece has '##' pieces, so whole-word masking is exercised
    split_words = 0
    multi_piece_masked = 0
    for row in rows:
        ids = [int(t) for t in row.input_ids]
        candidates = Candidates([t in range(5) for t in ids], [t in pieces for t in ids])
        words = [word for run in candidates.word_runs() for word in run]
        masked = {int(p) for p in row.mask_positions}
        split_words += sum(not (masked.issuperset(w) or masked.isdisjoint(w)) for w in words)
        multi_piece_masked += sum(len(w) > 1 and masked.issuperset(w) for w in words)
    assert split_words == 0 and multi_piece_masked > 0


def test_instance_format_config_choices():
    assert PreprocessConfig().instances.format == "nsp-pairs"
    with pytest.raises(ValueError, match="sop-pairs"):
        PreprocessConfig.model_validate({"instances": {"format": "full-docs"}})
