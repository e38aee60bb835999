"""Two text files with one name in different folders (2019/speech.txt, 2020/speech.txt): a text corpus knows its
documents by file name and position, so the second file's documents got the first's ids and were quarantined as
duplicate keys (`no training documents left ... quarantined duplicate_key: 2`, or fewer documents without a word
of why). The job is now refused before it reads anything, in one line naming both files."""

from __future__ import annotations

import json
import random

import pytest

from bertfactory.errors import InputError
from flows.cli import main
from preprocessing.inputs import InputFile, refuse_shared_names

WORDS = ("river town stone bridge market morning harbour valley garden letter winter summer council school "
         "station library museum farmer teacher doctor painter sailor miller baker window ladder orchard meadow "
         "the the the and and of of to to a a in in with that it was for on is by").split()


def _text(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(12))


def _preprocess(inputs: str, out, fmt: str, capsys) -> tuple[int, str]:
    code = main(["preprocess", "--no-prefect", "--input", inputs, "--format", fmt, "--vocab-size", "200",
                 "--out", str(out), "--set", "preprocess.runner.preset=in_process",
                 "--set", "preprocess.instances.dupe_factor=1"])
    return code, capsys.readouterr().err


def test_text_files_sharing_a_name_in_different_folders_are_refused_naming_both(tmp_path, capsys):
    for year in ("2019", "2020", "2021"):
        (tmp_path / "corpus" / year).mkdir(parents=True)
        (tmp_path / "corpus" / year / "speech.txt").write_text(_text(int(year)))
    code, err = _preprocess(str(tmp_path / "corpus"), tmp_path / "run", "text", capsys)
    assert code == 2, err
    first, second = (tmp_path / "corpus" / y / "speech.txt" for y in ("2019", "2020"))
    assert err.splitlines() == [
        f"error: {second}: has the same file name as {first}: a text corpus knows its documents by file name and "
        "position, so this file's would be quarantined as duplicates of the other's; give the files distinct names "
        "(e.g. 2020-speech.txt) or write them as JSONL records with an \"id\""]
    assert not (tmp_path / "run" / "shards").exists()


def test_distinct_names_and_formats_with_their_own_ids_pass():
    refuse_shared_names("text", [InputFile(p, p) for p in ("a/x.txt", "b/y.txt", "s3://b/c/z.txt")])
    same = [InputFile(p, p) for p in ("a/x.jsonl", "b/x.jsonl")]
    refuse_shared_names("jsonl", same)  # records with an "id" are known by it; those without: quarantined, named
    refuse_shared_names("wikipedia", same)
    refuse_shared_names("warc", same)
    with pytest.raises(InputError, match="^s3://b/2/x.txt: has the same file name as a/1/x.txt: a text corpus"):
        refuse_shared_names("text", [InputFile(p, p) for p in ("a/1/x.txt", "s3://b/2/x.txt")])


def test_jsonl_files_sharing_a_name_whose_records_have_ids_still_run(tmp_path, capsys):
    for year in ("2019", "2020"):
        (tmp_path / "corpus" / year).mkdir(parents=True)
        (tmp_path / "corpus" / year / "news.jsonl").write_text("".join(
            json.dumps({"id": f"{year}-{i}", "text": _text(int(year) * 10 + i)}) + "\n"
            for i in range(4)))
    code, err = _preprocess(str(tmp_path / "corpus"), tmp_path / "run", "jsonl", capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "run" / "shards" / "manifest.json").read_text())
    assert (manifest["counts"]["docs_kept"], manifest["counts"]["quarantined"]) == (8, {})  # every record of both


def test_parallel_files_sharing_a_name_are_refused_only_where_the_name_holds_their_languages():
    # a pair's id holds its languages: the gettext layout (every catalogue named django.po, its language from
    # locale/<lang>/ or its header) gives distinct ids and was read whole before the refusal; so does a header-row TSV
    refuse_shared_names("parallel", [InputFile(p, p) for p in (
        "locale/de/LC_MESSAGES/django.po", "locale/fr/LC_MESSAGES/django.po", "en-ar/pairs.tsv", "en-fr/pairs.tsv")])
    with pytest.raises(InputError, match="b/news.en-fr.tsv: has the same file name as a/news.en-fr.tsv"):
        refuse_shared_names("parallel", [InputFile(p, p) for p in ("a/news.en-fr.tsv", "b/news.en-fr.tsv")])
    with pytest.raises(InputError, match="b/x.en-fr.en: has the same file name as a/x.en-fr.en"):
        refuse_shared_names("parallel", [InputFile(p, p) for p in ("a/x.en-fr.en", "b/x.en-fr.en")])
