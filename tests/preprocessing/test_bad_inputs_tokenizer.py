"""A foreign tokenizer is refused before the job runs (issue 23, item 4: a 633-token Bulgarian tokenizer on English
text gave 37.7 % [UNK] and exit 0). Here a small WordPiece trained on the Arabic and Thai newspaper4k articles is
given to `bertfactory preprocess` on the English ones: refused above preprocess.tokenizer.max_unk_rate, naming the
rate and the flag, unless --allow-high-unk; a tokenizer trained on English passes the same check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from preprocessing.config import CorpusConfig, TokenizerConfig
from preprocessing.tokenizer import save_tokenizer, train_tokenizer
from preprocessing.tokenizer_check import check_unk_rate

from .news_texts import news_paragraphs

ROOT = Path(__file__).resolve().parents[2]
BERTFACTORY = Path(sys.executable).with_name("bertfactory")


@pytest.fixture(scope="module")
def english(tmp_path_factory) -> Path:
    """The English articles as a `text` corpus (documents separated by blank lines, one paragraph a line)."""
    path = tmp_path_factory.mktemp("english") / "news-en.txt"
    path.write_text("\n".join(news_paragraphs("en")) + "\n", encoding="utf-8")
    return path


def _tokenizer(directory: Path, name: str, paragraphs: list[str]) -> Path:
    cfg = TokenizerConfig(vocab_size=400, min_frequency=2, limit_alphabet=200)
    path = directory / f"{name}.json"
    save_tokenizer(train_tokenizer(lambda: iter(paragraphs), cfg), path)
    return path


def _preprocess(corpus: Path, tokenizer: Path, run_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BERTFACTORY), "preprocess", "--input", str(corpus), "--format", "text", "--lang", "en",
                           "--tokenizer", str(tokenizer), "--out", str(run_dir), "--no-prefect", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_a_foreign_tokenizer_is_refused_unless_allowed(tmp_path, english):
    foreign = _tokenizer(tmp_path, "ar-th", news_paragraphs("ar") + news_paragraphs("th"))

    refused = _preprocess(english, foreign, tmp_path / "refused")
    output = refused.stdout + refused.stderr
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert refused.returncode == 2 and len(errors) == 1, output[-3000:]
    assert errors[0].startswith(f"error: {foreign}: this tokenizer makes ") and "% of the tokens unknown" in errors[0]
    assert "above preprocess.tokenizer.max_unk_rate=0.05" in errors[0] and "--allow-high-unk" in errors[0]
    rate = float(errors[0].split("makes ", 1)[1].split("%", 1)[0])
    assert rate > 20  # Latin letters are rare in Arabic and Thai news: most English words become [UNK]
    assert "Traceback" not in output and "documents+instances: running" not in output  # refused before the job
    assert not (tmp_path / "refused" / "shards").exists()

    allowed = _preprocess(english, foreign, tmp_path / "allowed", "--allow-high-unk")
    output = allowed.stdout + allowed.stderr
    assert allowed.returncode == 0, output[-3000:]
    assert "going on as preprocess.tokenizer.allow_high_unk says" in output
    manifest = json.loads((tmp_path / "allowed" / "shards" / "manifest.json").read_text())
    assert manifest["counts"]["docs_kept"] > 0


def test_a_tokenizer_of_the_corpus_language_passes(tmp_path, english):
    own = _tokenizer(tmp_path, "en", news_paragraphs("en"))
    from tokenizers import Tokenizer

    corpus = CorpusConfig(inputs=[str(english)], format="text", lang="en")
    measured = check_unk_rate(Tokenizer.from_file(str(own)), corpus, [str(english)], TokenizerConfig(), str(own))
    assert measured.tokens > 1000 and measured.rate < 0.01, measured


def test_the_rate_of_a_padding_tokenizer_counts_no_pad_ids(tmp_path, english):
    """measure_unk_rate (and `python -m preprocessing.tokenizer_check`) on a tokenizer.json that pads to a fixed
    length, as a Hugging Face model's does: the pad ids were counted as tokens, diluting the rate."""
    from tokenizers import Tokenizer

    from preprocessing.tokenizer_check import measure_unk_rate

    path = _tokenizer(tmp_path, "arabic-thai", news_paragraphs("ar") + news_paragraphs("th"))
    texts = news_paragraphs("en")[:20]
    plain = measure_unk_rate(Tokenizer.from_file(str(path)), iter(texts))
    padded = Tokenizer.from_file(str(path))
    padded.enable_padding(length=256, pad_id=0, pad_token="[PAD]")
    padded.enable_truncation(max_length=256)
    assert plain.rate > 0.05 and plain.unknown > 0
    assert measure_unk_rate(padded, iter(texts)) == plain
    assert padded.padding is not None  # the caller's tokenizer is left as it was
