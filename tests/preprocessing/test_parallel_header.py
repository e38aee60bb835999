"""A parallel TSV whose first row names its languages (`ar<TAB>en`) is read as such through the installed CLI, run
from a directory outside the repository: the languages
come from it (the file name says none), it is not a sentence pair (also when `--set` gives the languages), and a
file that names its languages nowhere is refused in one line that says how to name them (issue 21 item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.samples import sample_path
from preprocessing.sources.parallel import ParallelOptions, header_languages
from preprocessing.sources.parallel_udhr import read_declaration

BERTFACTORY = Path(sys.executable).with_name("bertfactory")


def _udhr_pairs(path: Path, header: str | None) -> int:
    """The UDHR's Arabic and English segments (preamble + articles) as `ar<TAB>en` lines -> pairs written."""
    ar = read_declaration(sample_path("udhr", "arb.html"), "arb").segments
    en = read_declaration(sample_path("udhr", "eng.html"), "eng").segments
    keys = [k for k in ar if k in en]
    clean = lambda text: " ".join(text.split())  # noqa: E731  (no tab or line break inside a side)
    lines = ([header] if header is not None else []) + [f"{clean(ar[k])}\t{clean(en[k])}" for k in keys]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(keys)


def _preprocess(tsv: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(  # from the file's directory (outside the repository), the file by its relative name
        [str(BERTFACTORY), "preprocess", "--input", tsv.name, "--format", "parallel", "--instances", "tlm-pairs",
         "--vocab-size", "400", "--out", str(out), "--no-prefect", "--set", "preprocess.runner.preset=in_process",
         *extra], cwd=tsv.parent, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("languages_set", [False, True], ids=["from-header", "header-with-set-languages"])
def test_a_header_row_names_the_languages_and_is_not_a_pair(tmp_path, languages_set):
    tsv = tmp_path / "corpus.tsv"  # no language pair in the name: only the header row says them
    pairs = _udhr_pairs(tsv, "ar\ten")
    extra = ["--set", "corpus.parallel.src_lang=ar", "--set", "corpus.parallel.tgt_lang=en"] if languages_set else []
    done = _preprocess(tsv, tmp_path / "out", *extra)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    manifest = json.loads((tmp_path / "out/shards/manifest.json").read_text(encoding="utf-8"))
    assert manifest["instance_format"]["languages"] == ["ar", "en"]
    counts = manifest["counts"]
    assert counts["pairs"] == counts["docs_read"] == pairs == 31  # the header row is not one of them
    assert counts["languages"] == {"ar-en": {"docs": 31, "train_docs": counts["docs"]["train"]}}
    assert counts["quarantined"] == {} and counts["docs_dropped"] == {}


def test_a_file_naming_no_languages_is_one_error_line(tmp_path):
    tsv = tmp_path / "corpus.tsv"
    _udhr_pairs(tsv, None)
    done = _preprocess(tsv, tmp_path / "out")
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and tsv.name in errors[0] and "header row of the two language codes" in errors[0], output


@pytest.mark.parametrize(("line", "options", "expected"), [
    ("ar\ten", {}, ("ar", "en")),
    ("eng\tzh_Hans", {}, ("en", "zh")),
    (" FR \t de ", {}, ("fr", "de")),
    ("Oui\tYes", {}, None),  # 2-3 letters, but not listed language codes: a pair
    ("Ok\tOk", {}, None),
    ("en\ten", {}, None),  # one language twice is not a pair of languages
    ("yue\ten", {}, None),  # no ISO 639-1 code: only a header when the options say these languages
    ("yue\ten", {"src_lang": "yue", "tgt_lang": "en"}, ("yue", "en")),
    ("ar\ten\tfr", {}, None),
])
def test_header_languages(line, options, expected):
    assert header_languages(line, ParallelOptions(**options)) == expected
