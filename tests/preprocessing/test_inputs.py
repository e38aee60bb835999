"""preprocessing.inputs: corpus.inputs entries -> files (directories and globs expanded and sorted, companion
files left out, fsspec URLs listed), each with its sha256 and size; clear errors for what matches nothing."""

import hashlib

import fsspec
import pytest

from bertfactory.errors import InputError
from preprocessing.config import CorpusConfig
from preprocessing.inputs import expand_inputs


def _corpus(fmt, *inputs):
    return CorpusConfig(inputs=[str(i) for i in inputs], format=fmt)


def test_directories_and_globs_expand_sorted_without_companions(tmp_path):
    d = tmp_path / "dumps"
    (d / "sub").mkdir(parents=True)
    for name in ("b-pages-articles-multistream.xml.bz2", "b-pages-articles-multistream-index.txt.bz2",
                 "a.xml.bz2", ".hidden", "sub/c.xml"):
        (d / name).write_bytes(name.encode())
    files = expand_inputs(_corpus("wikipedia", d))
    assert [f.location for f in files] == [str(d / "a.xml.bz2"), str(d / "b-pages-articles-multistream.xml.bz2"),
                                           str(d / "sub/c.xml")]
    assert files[0].sha256() == hashlib.sha256(b"a.xml.bz2").hexdigest() and files[0].size() == len("a.xml.bz2")
    globbed = expand_inputs(_corpus("wikipedia", d / "*.bz2"))
    assert [f.location for f in globbed] == [str(d / "a.xml.bz2"), str(d / "b-pages-articles-multistream.xml.bz2")]
    # a single file keeps the name it was given (what the manifest lists)
    assert expand_inputs(_corpus("wikipedia", d / "a.xml.bz2"))[0].name == str(d / "a.xml.bz2")


def test_moses_target_side_is_read_through_the_source_side(tmp_path):
    for name in ("europarl.de-en.de", "europarl.de-en.en", "pairs.tsv"):
        (tmp_path / name).write_text("x\n")
    files = expand_inputs(_corpus("parallel", tmp_path))
    assert [f.location.rsplit("/", 1)[1] for f in files] == ["europarl.de-en.de", "pairs.tsv"]


def test_fsspec_urls_are_listed_and_hashed():
    fs = fsspec.filesystem("memory")
    fs.pipe("/corpus/b.jsonl", b'{"text": "b"}\n')
    fs.pipe("/corpus/a.jsonl", b'{"text": "a"}\n')
    files = expand_inputs(_corpus("jsonl", "memory://corpus/*.jsonl"))
    assert [f.location for f in files] == ["memory:///corpus/a.jsonl", "memory:///corpus/b.jsonl"]
    assert all(f.is_url and f.local_path is None for f in files)
    assert files[0].sha256() == hashlib.sha256(b'{"text": "a"}\n').hexdigest() and files[1].size() == 14
    with pytest.raises(InputError, match="memory://nothing/here.jsonl: no input file at this URL"):
        expand_inputs(_corpus("jsonl", "memory://nothing/here.jsonl"))


def test_what_matches_nothing_or_twice_is_named(tmp_path):
    with pytest.raises(InputError, match="missing.xml: input file not found"):
        expand_inputs(_corpus("wikipedia", tmp_path / "missing.xml"))
    with pytest.raises(InputError, match=r"\*.warc: no input file matches this pattern"):
        expand_inputs(_corpus("warc", tmp_path / "*.warc"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="input directory holds no files"):
        expand_inputs(_corpus("text", tmp_path / "empty"))
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(InputError, match="listed twice"):
        expand_inputs(_corpus("text", tmp_path / "a.txt", tmp_path))
