"""The movie-review task reader: labels from the valence sign, zero valence dropped and counted, a deterministic
≈80/10/10 split by id, and errors that name the file and line."""

from pathlib import Path

import pytest

from bertfactory.errors import InputError
from bertfactory.samples import sample_path
from evaluation.tasks.base import split_of
from evaluation.tasks.movie_sentiment import load_movie_sentiment


@pytest.fixture(scope="module")
def real():
    return load_movie_sentiment(sample_path("movie_reviews"))


def test_real_file_sizes_split_fractions_and_zero_valence(real):
    sizes = real.sizes()
    assert real.source["lines"] == 10605
    assert real.dropped == {"zero_valence": 37}
    assert sum(sizes.values()) == 10605 - 37
    total = sum(sizes.values())
    assert 0.77 < sizes["train"] / total < 0.83
    assert 0.08 < sizes["dev"] / total < 0.12
    assert 0.08 < sizes["test"] / total < 0.12
    ids = [e.id for split in (real.train, real.dev, real.test) for e in split]
    assert len(ids) == len(set(ids))
    for split in ("train", "dev", "test"):  # both classes in every split
        assert {e.label for e in getattr(real, split)} == {0, 1}


def test_labels_follow_the_sign_of_the_valence(real):
    raw = {}
    for line in sample_path("movie_reviews").read_text(encoding="utf-8").splitlines():
        sid, valence, _ = line.split("\t", 2)
        raw[sid] = float(valence)
    for e in real.train + real.dev + real.test:
        assert raw[e.id] != 0.0
        assert e.label == (1 if raw[e.id] > 0 else 0)
        assert not e.text.endswith("\r")
    kept = {e.id for e in real.train + real.dev + real.test}
    assert {sid for sid, v in raw.items() if v == 0.0}.isdisjoint(kept)


def test_split_depends_only_on_the_id(tmp_path, real):
    # The same lines in reverse order, LF line ends and no final newline: every id lands in the same split.
    lines = sample_path("movie_reviews").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "reversed.txt"
    path.write_text("\n".join(reversed(lines)), encoding="utf-8")
    shuffled = load_movie_sentiment(path)
    for split in ("train", "dev", "test"):
        assert sorted(e.id for e in getattr(shuffled, split)) == sorted(e.id for e in getattr(real, split))
        assert all(split_of(e.id) == split for e in getattr(real, split))
    assert load_movie_sentiment(sample_path("movie_reviews")) == real  # and it is the same on every load


def _write(tmp_path: Path, lines: list[str]) -> Path:
    # enough well-formed lines that every split gets examples, then the lines under test
    good = [f"g{i}\t{(-1) ** i * 1.5}\tsentence number {i}" for i in range(60)]
    path = tmp_path / "reviews.txt"
    path.write_bytes("\r\n".join(good + lines).encode("utf-8") + b"\r\n")
    return path


@pytest.mark.parametrize(
    "bad, message",
    [
        ("b1\t2.5", "expected 3 tab-separated fields"),
        ("b1\tvery good\ta film", "valence 'very good' is not a number"),
        ("b1\t7.0\ta film", "outside -4..4"),
        ("b1\tnan\ta film", "outside -4..4"),
        ("\t1.0\ta film", "empty sentence id"),
        ("b1\t1.0\t   ", "empty text"),
        ("g3\t1.0\ta film", "already used on line 4"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, message):
    path = _write(tmp_path, [bad])
    with pytest.raises(InputError, match=message) as err:
        load_movie_sentiment(path)
    assert f"{path}:61" in str(err.value)


def test_invalid_utf8_names_the_line(tmp_path):
    path = _write(tmp_path, [])
    path.write_bytes(path.read_bytes() + b"x1\t1.0\tbad \xff byte\r\n")
    with pytest.raises(InputError, match=r":61: not valid UTF-8"):
        load_movie_sentiment(path)


def test_missing_file_and_too_few_lines(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_movie_sentiment(tmp_path / "nope.txt")
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("a\t1.0\tgood\nb\t-1.0\tbad\n", encoding="utf-8")
    with pytest.raises(InputError, match="too few usable lines"):
        load_movie_sentiment(tiny)
