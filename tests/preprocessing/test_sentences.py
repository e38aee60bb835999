"""preprocessing.sentences: rule-based English sentence splitting."""

from preprocessing.sentences import split_sentences


def test_splits_on_final_punctuation():
    assert split_sentences("It rained. Then it snowed! Did it stop? Yes.") == [
        "It rained.", "Then it snowed!", "Did it stop?", "Yes."]


def test_abbreviations_initials_and_acronyms_do_not_split():
    text = ("Dr. Smith met J. R. R. Tolkien in the U.S. in 1950. He paid approx. 5 dollars, e.g. for tea. "
            "The price was 3.5 dollars.")
    assert split_sentences(text) == [
        "Dr. Smith met J. R. R. Tolkien in the U.S. in 1950.",
        "He paid approx. 5 dollars, e.g. for tea.",
        "The price was 3.5 dollars.",
    ]


def test_quotes_and_lowercase_continuations():
    assert split_sentences('He said "stop." Then he left. and so on') == ['He said "stop."', "Then he left. and so on"]
    assert split_sentences("   ") == []
    assert split_sentences("no final punctuation") == ["no final punctuation"]
