"""Metrics against hand-worked examples (the expected values are computed by hand in the comments) and, for
macro F1, MCC, Pearson and Spearman, against scikit-learn / scipy on seeded random inputs (test dependencies;
those tests skip when the packages are missing)."""

import math

import pytest

from evaluation.metrics import accuracy, binary_f1, binary_precision_recall_f1, majority_label


def test_accuracy_hand_worked():
    # 4 of 6 equal
    assert accuracy([1, 0, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]) == pytest.approx(4 / 6)
    assert accuracy([0], [0]) == 1.0
    assert accuracy([0, 1], [1, 0]) == 0.0


def test_binary_precision_recall_f1_hand_worked():
    y_true = [1, 1, 1, 0, 0, 1, 0, 0]
    y_pred = [1, 0, 1, 1, 0, 1, 0, 1]
    # tp = 3 (positions 0, 2, 5), fp = 2 (3, 7), fn = 1 (1): precision 3/5, recall 3/4, F1 = 2*.6*.75/1.35 = 2/3
    p, r, f1 = binary_precision_recall_f1(y_true, y_pred)
    assert (p, r) == (pytest.approx(0.6), pytest.approx(0.75))
    assert f1 == pytest.approx(2 / 3)
    # the negative class as positive: tp = 2 (4, 6), fp = 1 (1), fn = 2 (3, 7): p 2/3, r 1/2, F1 = 4/7
    assert binary_f1(y_true, y_pred, positive=0) == pytest.approx(4 / 7)


def test_f1_is_zero_when_the_positive_class_is_never_predicted():
    assert binary_precision_recall_f1([1, 0, 1], [0, 0, 0]) == (0.0, 0.0, 0.0)


def test_length_mismatch_and_empty_are_errors():
    with pytest.raises(ValueError, match="3 labels but y_pred has 2"):
        accuracy([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        binary_f1([], [])


def test_majority_label_and_ties():
    assert majority_label([0, 1, 1, 0, 1]) == 1
    assert majority_label([1, 0, 1, 0]) == 0  # a tie goes to the smallest label, whatever the order
    assert majority_label([0, 1, 0, 1]) == 0
    with pytest.raises(ValueError):
        majority_label([])


def test_wilson_interval_known_values_and_bounds():
    from evaluation.metrics import wilson_interval

    lo, hi = wilson_interval(81, 263)  # Newcombe (1998) example 1: 0.2553 - 0.3662... for 81/263
    assert lo == pytest.approx(0.2553, abs=1e-4) and hi == pytest.approx(0.3662, abs=1e-4)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_mcnemar_counts_discordant_pairs_and_exact_p():
    from evaluation.metrics import mcnemar

    y = [1] * 12
    a = [1] * 10 + [0, 0]          # right on 0..9
    b = [0, 0] + [1] * 8 + [1, 1]  # right on 2..11
    out = mcnemar(y, a, b)
    assert out["a_only"] == 2 and out["b_only"] == 2 and out["p_value"] == 1.0
    # 9 vs 1 discordant: two-sided exact binomial p = 2 * (1 + 10) / 1024
    y = [1] * 10
    out = mcnemar(y, [1] * 9 + [0], [0] * 9 + [1])
    assert (out["a_only"], out["b_only"]) == (9, 1)
    assert out["p_value"] == pytest.approx(22 / 1024)
    assert mcnemar([1, 0], [1, 0], [1, 0])["p_value"] == 1.0


def test_mcnemar_large_samples_use_the_chi_square_approximation():
    from evaluation.metrics import mcnemar

    n_a, n_b = 1300, 1200  # 2,500 discordant pairs
    y = [1] * (n_a + n_b)
    out = mcnemar(y, [1] * n_a + [0] * n_b, [0] * n_a + [1] * n_b)
    statistic = (abs(n_a - n_b) - 1) ** 2 / (n_a + n_b)
    assert out["p_value"] == pytest.approx(math.erfc(math.sqrt(statistic / 2)))
    assert 0.04 < out["p_value"] < 0.06


def test_mcnemar_large_samples_with_equal_discordant_counts_give_p_one():
    from evaluation.metrics import mcnemar

    n = 1500  # 3,000 discordant pairs, split evenly: no evidence either way, as the exact test says
    out = mcnemar([1] * 2 * n, [1] * n + [0] * n, [0] * n + [1] * n)
    assert (out["a_only"], out["b_only"]) == (n, n) and out["p_value"] == 1.0



# ---------------------------------------------------------------------------------- benchmark metrics, by hand


def test_multiple_choice_accuracy_is_accuracy():
    from evaluation.metrics import multiple_choice_accuracy

    # gold option indices vs chosen ones: 2 of 4 right
    assert multiple_choice_accuracy([0, 3, 1, 2], [0, 1, 1, 3]) == 0.5


def test_macro_f1_hand_worked():
    from evaluation.metrics import macro_f1

    y_true = [0, 0, 1, 1, 2, 2]
    y_pred = [0, 1, 1, 1, 0, 2]
    # class 0: tp 1 (pos 0), fp 1 (pos 4), fn 1 (pos 1) -> 2/(2+1+1) = 1/2
    # class 1: tp 2 (2, 3), fp 1 (1), fn 0 -> 4/5;  class 2: tp 1 (5), fp 0, fn 1 (4) -> 2/3
    # mean = (15/30 + 24/30 + 20/30) / 3 = 59/90
    assert macro_f1(y_true, y_pred) == pytest.approx(59 / 90)
    # a class that is only predicted counts with F1 0: class 0 -> 2/(2+0+1) = 2/3, class 1 -> 0; mean 1/3
    assert macro_f1([0, 0], [0, 1]) == pytest.approx(1 / 3)
    assert macro_f1([4, 4], [4, 4]) == 1.0
    with pytest.raises(ValueError, match="empty"):
        macro_f1([], [])


def test_matthews_corrcoef_hand_worked_and_degenerate():
    from evaluation.metrics import matthews_corrcoef

    # binary: tp 3, fp 2, fn 1, tn 2 -> (3*2 - 2*1) / sqrt(5*4*4*3) = 4/sqrt(240)
    assert matthews_corrcoef([1, 1, 1, 0, 0, 1, 0, 0], [1, 0, 1, 1, 0, 1, 0, 1]) == pytest.approx(4 / math.sqrt(240))
    # three classes: n 6, correct 4, true counts (2, 2, 2), predicted counts (2, 3, 1)
    # (4*6 - (2*2 + 2*3 + 2*1)) / sqrt((36 - (4+9+1)) * (36 - 12)) = 12 / sqrt(22*24)
    assert matthews_corrcoef([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 2]) == pytest.approx(12 / math.sqrt(528))
    assert matthews_corrcoef([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    # undefined (a constant prediction or a constant truth): 0.0, as scikit-learn
    assert matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0
    assert matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0


def test_pearson_and_spearman_hand_worked():
    from evaluation.metrics import average_ranks, pearson, spearman

    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    # deviations from the means (3, 4): dx = -2 -1 0 1 2, dy = -2 0 1 0 1; sum dx*dy = 6, sum dx^2 = 10,
    # sum dy^2 = 6 -> r = 6 / sqrt(60)
    assert pearson(x, y) == pytest.approx(6 / math.sqrt(60))
    # ranks of y with ties averaged: 2 -> 1, the 4s -> 2.5, the 5s -> 4.5
    assert average_ranks(y) == [1.0, 2.5, 4.5, 2.5, 4.5]
    # rank deviations (mean 3): dx = -2 -1 0 1 2, dy = -2 -.5 1.5 -.5 1.5; sum dx*dy = 4+.5+0-.5+3 = 7,
    # sum dy^2 = 4+.25+2.25+.25+2.25 = 9 -> rho = 7 / sqrt(10*9)
    assert spearman(x, y) == pytest.approx(7 / math.sqrt(90))
    # monotone but not linear: rho 1, r < 1
    assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [1, 8, 27, 64]) < 0.99
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # a constant input: undefined -> nan, as scipy (0.1 * 3 is not representable, the check is on equality)
    assert math.isnan(pearson([0.1, 0.1, 0.1], [1, 2, 3]))
    assert math.isnan(spearman([1, 2, 3], [5, 5, 5]))
    with pytest.raises(ValueError, match="at least 2"):
        pearson([1.0], [2.0])
    with pytest.raises(ValueError, match="3 values but y has 2"):
        spearman([1, 2, 3], [1, 2])


def test_squad_normalize_answer():
    from evaluation.metrics import normalize_answer

    # lowercase, punctuation out ("cat's" -> "cats"), article "the" out, whitespace collapsed
    assert normalize_answer("The  Cat's hat!") == "cats hat"
    assert normalize_answer("An apple, a day") == "apple day"
    assert normalize_answer("theater anthem") == "theater anthem"  # articles only as whole words
    assert normalize_answer("the-end") == "theend"  # punctuation goes first, so "the" is no longer a word
    assert normalize_answer(" A ") == ""


def test_squad_exact_match_and_token_f1():
    from evaluation.metrics import squad_exact_match, squad_token_f1

    assert squad_exact_match("the Eiffel Tower.", "eiffel tower") == 1.0
    assert squad_exact_match("Eiffel", "eiffel tower") == 0.0
    # tokens [big, red, dog] vs [red, dog, barked]: 2 shared, precision 2/3, recall 2/3 -> F1 2/3
    assert squad_token_f1("the big red dog", "a red dog barked") == pytest.approx(2 / 3)
    # multiset overlap: [dog, dog, dog] vs [dog] shares 1: precision 1/3, recall 1 -> 2*(1/3)/(4/3) = 1/2
    assert squad_token_f1("dog dog dog", "dog") == pytest.approx(0.5)
    assert squad_token_f1("cat", "dog") == 0.0
    assert squad_token_f1("", "") == 0.0  # v1.1: no overlap, no credit


def test_squad_v1_corpus_scores_in_percent():
    from evaluation.metrics import squad_v1

    golds = {"q1": ["Denver Broncos", "The Denver Broncos"], "q2": ["Santa Clara, California"], "q3": ["1990"]}
    predictions = {"q1": "denver broncos!", "q2": "Santa Clara", "extra": "ignored"}  # q3 unanswered
    # q1: EM 1, F1 1.  q2: "santa clara" vs "santa clara california": EM 0, precision 1, recall 2/3, F1 0.8.
    # q3: no prediction -> 0 and still counted. EM = 100 * 1/3, F1 = 100 * 1.8/3 = 60
    out = squad_v1(predictions, golds)
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(60.0)
    with pytest.raises(ValueError, match="list of strings"):
        squad_v1({"q": "x"}, {"q": "x"})
    with pytest.raises(ValueError, match="no gold"):
        squad_v1({}, {})


def test_squad_v2_no_answer_handling_and_best_thresholds():
    from evaluation.metrics import squad_v2

    golds = {"a": ["Paris"], "b": [], "c": ["the Loire", "Loire River"], "d": []}
    predictions = {"a": "Paris", "b": "", "c": "river", "d": "London"}
    # a: EM 1, F1 1.  b (no answer, gold ""): empty prediction -> EM 1, F1 1.
    # c: "river" vs "loire" -> 0, vs "loire river" -> precision 1, recall 1/2, F1 2/3; EM 0.
    # d (no answer): a non-empty prediction -> EM 0, F1 0.
    out = squad_v2(predictions, golds)
    assert out["exact"] == pytest.approx(50.0) and out["total"] == 4
    assert out["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 0) / 4)
    assert out["HasAns_exact"] == pytest.approx(50.0) and out["HasAns_f1"] == pytest.approx(100 * (5 / 3) / 2)
    assert out["NoAns_exact"] == pytest.approx(50.0) and out["NoAns_f1"] == pytest.approx(50.0)
    assert (out["HasAns_total"], out["NoAns_total"]) == (2, 2)
    assert "best_exact" not in out

    na_probs = {"a": 0.1, "b": 0.9, "c": 0.4, "d": 0.6}
    # find_best_thresh: start at #no-answer questions = 2 (abstain everywhere); answer in order of na_prob:
    # exact: a +1 -> 3 (best, thresh 0.1); c +0 -> 3; d (no answer, answered) -1 -> 2; b (empty) +0 -> 2
    #   best_exact = 100 * 3/4 at 0.1
    # F1: a +1 -> 3 (0.1); c +2/3 -> 11/3 (best, 0.4); d -1; b 0.  best_f1 = 100 * (11/3)/4 at 0.4
    out = squad_v2(predictions, golds, na_probs)
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.1
    assert out["best_f1"] == pytest.approx(100 * (11 / 3) / 4) and out["best_f1_thresh"] == 0.4
    assert out["exact"] == pytest.approx(50.0)  # default na_prob_thresh 1.0: nothing abstains
    # na_prob_thresh 0.5: d (0.6) and b (0.9) abstain, both no-answer questions -> 1 each
    # exact (1 + 1 + 0 + 1)/4 = 75 %, F1 (1 + 1 + 2/3 + 1)/4
    out = squad_v2(predictions, golds, na_probs, na_prob_thresh=0.5)
    assert out["exact"] == pytest.approx(75.0) and out["f1"] == pytest.approx(100 * (11 / 3) / 4)
    assert out["NoAns_exact"] == pytest.approx(100.0)


def test_squad_v2_edge_cases():
    from evaluation.metrics import squad_v2

    # only answerable questions: no NoAns_ keys, as the official script
    out = squad_v2({"a": "x"}, {"a": ["x"]})
    assert out["exact"] == 100.0 and "NoAns_total" not in out and out["HasAns_total"] == 1
    # a gold that normalises to nothing ("The") is still an answerable question, but scored against "":
    # the empty prediction gets EM 1 and F1 1 (both token lists empty)
    out = squad_v2({"a": ""}, {"a": ["The"]})
    assert out["HasAns_exact"] == 100.0 and out["HasAns_f1"] == 100.0
    with pytest.raises(ValueError, match="no prediction"):
        squad_v2({}, {"a": ["x"]})
    with pytest.raises(ValueError, match="no-answer probability"):
        squad_v2({"a": "x"}, {"a": ["x"]}, na_probs={})


def test_bio_entities_conlleval_semantics():
    from evaluation.metrics import bio_entities

    assert bio_entities(["B-LOC", "I-LOC", "O"]) == [("LOC", 0, 1)]
    assert bio_entities(["B-LOC", "I-LOC"]) == [("LOC", 0, 1)]  # the end of the sentence closes it
    assert bio_entities(["O", "I-PER", "I-PER", "O"]) == [("PER", 1, 2)]  # I- after O starts an entity
    assert bio_entities(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]  # I- of another type: new one
    assert bio_entities(["B-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert bio_entities(["B-FOO-BAR", "I-FOO-BAR"]) == [("FOO-BAR", 0, 1)]
    with pytest.raises(ValueError, match="not O, B-TYPE or I-TYPE"):
        bio_entities(["B-PER", "X"])


def test_entity_f1_hand_worked():
    from evaluation.metrics import entity_f1

    # seqeval's README example: gold MISC(3..5), PER(0..1); predicted MISC(2..5), PER(0..1): 1 of 2 each way
    out = entity_f1([["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]],
                    [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]])
    assert (out["precision"], out["recall"], out["f1"]) == (0.5, 0.5, 0.5)
    true = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-ORG"], ["B-MISC", "O"]]
    pred = [["B-PER", "O", "O", "I-LOC", "O", "B-ORG"], ["B-LOC", "B-MISC"]]
    # gold: PER 0-1, LOC 3, ORG 5, MISC (s1) 0 -> 4.  predicted: PER 0 (wrong end), LOC 3 (I- after O starts
    # one: right), ORG 5 (right), LOC (s1) 0, MISC (s1) 1 (wrong start) -> 5; correct 2
    # precision 2/5, recall 2/4, F1 = 2 * .4 * .5 / .9 = 4/9
    out = entity_f1(true, pred)
    assert (out["n_correct"], out["n_pred"], out["n_true"]) == (2, 5, 4)
    assert out["precision"] == pytest.approx(0.4) and out["recall"] == pytest.approx(0.5)
    assert out["f1"] == pytest.approx(4 / 9)
    # entities never cross sentences: B-X at the end of one and I-X at the start of the next are two
    assert entity_f1([["B-X"], ["I-X"]], [["B-X"], ["I-X"]])["n_true"] == 2
    assert entity_f1([["O"]], [["O"]])["f1"] == 0.0  # nothing to find, nothing found: 0, as seqeval
    with pytest.raises(ValueError, match="sentence 0 has 2 true tags but 1"):
        entity_f1([["O", "O"]], [["O"]])
    with pytest.raises(ValueError, match="list of sentences"):
        entity_f1(["B-X", "O"], ["B-X", "O"])


# ---------------------------------------------------------------------------------- against sklearn / scipy


def _random_label_pairs(rng):
    """Seeded random (y_true, y_pred) pairs, with the degenerate ones included: constant truth or prediction,
    a single example, labels absent from one side, perfect and inverted predictions."""
    cases = [([0], [0]), ([0], [1]), ([1, 1, 1], [1, 1, 1]), ([0, 1, 0], [1, 1, 1]), ([2, 2, 2], [0, 1, 2]),
             ([0, 1, 0, 1], [1, 0, 1, 0]), ([0, 1, 2, 3], [0, 1, 2, 3]), ([5, 7], [7, 9])]
    for _ in range(200):
        n = rng.randint(1, 40)
        k = rng.randint(1, 5)
        y_true = [rng.randrange(k) for _ in range(n)]
        mode = rng.random()
        if mode < 0.3:  # mostly right
            y_pred = [t if rng.random() < 0.8 else rng.randrange(k + 1) for t in y_true]
        elif mode < 0.4:  # constant prediction
            y_pred = [rng.randrange(k)] * n
        else:
            y_pred = [rng.randrange(k + 1) for _ in range(n)]
        cases.append((y_true, y_pred))
    return cases


def test_macro_f1_and_mcc_match_sklearn_on_random_inputs():
    metrics = pytest.importorskip("sklearn.metrics")
    import random
    import warnings

    from evaluation.metrics import macro_f1, matthews_corrcoef

    for y_true, y_pred in _random_label_pairs(random.Random(1234)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f1 = metrics.f1_score(y_true, y_pred, average="macro", zero_division=0)
            mcc = metrics.matthews_corrcoef(y_true, y_pred)
        assert macro_f1(y_true, y_pred) == pytest.approx(float(f1), abs=1e-12), (y_true, y_pred)
        assert matthews_corrcoef(y_true, y_pred) == pytest.approx(float(mcc), abs=1e-12), (y_true, y_pred)


def _random_xy(rng):
    cases = [([1, 2], [3, 4]), ([1, 2], [4, 3]), ([1, 1, 1], [1, 2, 3]), ([1, 2, 3], [7, 7, 7]),
             ([0.1, 0.1, 0.1], [0.2, 0.3, 0.1]), ([1, 2, 2, 3], [4, 4, 4, 5]), ([3, 3, 1, 1], [2, 2, 9, 9])]
    for _ in range(200):
        n = rng.randint(2, 50)
        mode = rng.random()
        if mode < 0.4:  # small integer ranges: many ties
            x = [rng.randint(0, 4) for _ in range(n)]
            y = [v + rng.randint(-2, 2) if rng.random() < 0.7 else rng.randint(0, 4) for v in x]
        elif mode < 0.5:  # one side constant
            x = [rng.gauss(0, 1) for _ in range(n)]
            y = [2.5] * n
        else:  # continuous, correlated to a random degree
            rho = rng.uniform(-1, 1)
            x = [rng.gauss(0, 1) for _ in range(n)]
            y = [rho * v + rng.gauss(0, 1) * rng.random() for v in x]
        cases.append((x, y))
    return cases


def test_pearson_and_spearman_match_scipy_on_random_inputs():
    stats = pytest.importorskip("scipy.stats")
    import random
    import warnings

    from evaluation.metrics import pearson, spearman

    for x, y in _random_xy(random.Random(99)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns about constant inputs
            expected_r = float(stats.pearsonr(x, y)[0])
            expected_rho = float(stats.spearmanr(x, y)[0])
        for ours, expected in ((pearson(x, y), expected_r), (spearman(x, y), expected_rho)):
            if math.isnan(expected):
                assert math.isnan(ours), (x, y)
            else:
                assert ours == pytest.approx(expected, abs=1e-9), (x, y)


def test_a_regression_split_of_one_example_scores_without_correlations():
    """`--set evaluate.finetune.max_eval_examples=1` on a regression task: was a ValueError traceback (`a correlation
    needs at least 2 pairs, got 1`) after the first fine-tuning epoch; the correlations are undefined, so absent (as for
    a constant prediction), and the mean squared error is kept."""
    from evaluation.scoring import TaskSpec, score
    from evaluation.tasks.base import RegressionExample

    spec = TaskSpec("regression")
    assert score(spec, [RegressionExample("a", "one", 1.5)], [1.0]) == {"mse": 0.25}
    two = [RegressionExample("a", "one", 1.5), RegressionExample("b", "two", 0.5)]
    assert set(score(spec, two, [1.0, 0.0])) == {"pearson", "spearman", "mse"}
