"""preprocessing.inputs: corpus.inputs entries -> files (directories and globs expanded and sorted, companion
files left out, fsspec URLs listed), each with its sha256 and size; clear errors for what matches nothing."""

import hashlib
import re

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


def test_a_moses_target_side_listed_beside_its_source_is_left_out_and_said(tmp_path, caplog, monkeypatch):
    """Both sides given (`--input x.de-en.de --input x.de-en.en`) read every pair twice, once in each direction,
    the two directions on either side of the held-out split. The target side alone is the other direction."""
    for name in ("europarl.de-en.de", "europarl.de-en.en", "other.de-en.en"):
        (tmp_path / name).write_text("x\n")
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        files = expand_inputs(_corpus("parallel", tmp_path / "europarl.de-en.de", tmp_path / "europarl.de-en.en",
                                      tmp_path / "other.de-en.en"))
    assert [f.location for f in files] == [str(tmp_path / "europarl.de-en.de"), str(tmp_path / "other.de-en.en")]
    assert f"{tmp_path / 'europarl.de-en.en'}: left out: the target side of {tmp_path / 'europarl.de-en.de'}" \
        in caplog.text
    monkeypatch.chdir(tmp_path)  # relative names too
    assert [f.location for f in expand_inputs(_corpus("parallel", "europarl.de-en.en", "europarl.de-en.de"))] \
        == ["europarl.de-en.de"]


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


def test_one_file_spelt_two_ways_is_listed_twice(tmp_path, monkeypatch):
    # a relative and an absolute path (or one through ..) to one file were two inputs: every record read twice and
    # the second copy quarantined as duplicate_key (jsonl, warc, wikipedia), or a text corpus refused with "has the
    # same file name as ...: give the files distinct names"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.jsonl").write_text('{"text": "x"}\n')
    for fmt, other in (("jsonl", str(tmp_path / "corpus")), ("warc", str(tmp_path / "corpus" / "*.jsonl")),
                       ("text", "corpus/../corpus/a.jsonl")):
        with pytest.raises(InputError, match=r"listed twice in corpus.inputs .*\(also as corpus/a\.jsonl\)$"):
            expand_inputs(_corpus(fmt, "corpus/a.jsonl", other))


def _tree(root, *names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name}\n")


def test_a_directory_leaves_out_every_path_under_a_hidden_folder(tmp_path, caplog):
    """docs/sources.md: hidden files are left out, at any depth below the directory (a git checkout's hooks and
    objects are not corpus); a hidden folder above the directory given does not count."""
    d = tmp_path / ".work" / "good3"
    _tree(d, "a.txt", ".git/hooks/x.sample", ".git/objects/ab/cdef", ".hidden/a.txt", ".DS_Store",
          "sub/b.txt", "sub/.cache/c.txt")
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        files = expand_inputs(_corpus("text", d))
    assert [f.location for f in files] == [str(d / "a.txt"), str(d / "sub/b.txt")]
    [line] = [r.getMessage() for r in caplog.records if r.name == "preprocessing.inputs"]  # one line says it
    assert line.startswith(f"{d}: left out 4 hidden path(s) (.DS_Store, .git/, .hidden/, ...)"), line
    # only the hidden ones: nothing logged for a directory without any
    caplog.clear()
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        assert [f.location for f in expand_inputs(_corpus("text", d / "sub"))] == [str(d / "sub/b.txt")]
        assert [f.location for f in expand_inputs(_corpus("text", d / "sub/b.txt"))] == [str(d / "sub/b.txt")]
    assert len(caplog.records) == 1 and "1 hidden path(s) (.cache/)" in caplog.records[0].getMessage()
    # a hidden file named explicitly is read as given
    assert [f.name for f in expand_inputs(_corpus("text", d / ".hidden/a.txt"))] == [str(d / ".hidden/a.txt")]
    # what counts is the path below the directory given: a hidden directory named as the input is read
    assert [f.location for f in expand_inputs(_corpus("text", d / ".hidden"))] == [str(d / ".hidden/a.txt")]
    # a directory of hidden paths only holds no input
    with pytest.raises(InputError, match="input directory holds no files"):
        _tree(tmp_path / "dots", ".a", ".b/c.txt")
        expand_inputs(_corpus("text", tmp_path / "dots"))


def test_a_url_directory_leaves_out_hidden_paths_and_run_directories():
    fs = fsspec.filesystem("memory")
    for name in ("a.txt", ".git/hooks/x.sample", ".hidden/a.txt", "sub/.cache/c.txt", "sub/b.txt",
                 "run/.bertfactory/lock", "run/shards/manifest.json"):
        fs.pipe(f"/hiddenurl/{name}", name.encode())
    files = expand_inputs(_corpus("text", "memory://hiddenurl/"))
    assert [f.location for f in files] == ["memory:///hiddenurl/a.txt", "memory:///hiddenurl/sub/b.txt"]


def test_a_run_directory_inside_the_input_directory_is_not_read(tmp_path, monkeypatch, caplog):
    """`cd corpus && bertfactory preprocess --input . --out run`: the run's lock, stamps and outputs are no corpus,
    so a rerun finds the same inputs (and the same stage key) as the first run."""
    _tree(tmp_path, "a.txt", "b/c.txt")
    before = [f.location for f in expand_inputs(_corpus("text", tmp_path))]
    _tree(tmp_path, "run/.bertfactory/lock", "run/.bertfactory/preprocess.started.json", "run/shards/manifest.json",
          "run/tokenizer/tokenizer.json", "run/pretrain.replaced-20260101T000000Z-3f2a9c0d1e2b/x.txt",
          "b/old-run/.bertfactory/preprocess.json", "b/old-run/shards/train/part-00000.arrow")
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        assert [f.location for f in expand_inputs(_corpus("text", tmp_path))] == before
    [line] = [r.getMessage() for r in caplog.records]
    assert line == f"{tmp_path}: left out 2 run directories (b/old-run/, run/): not corpus"
    monkeypatch.chdir(tmp_path)
    assert [f.location for f in expand_inputs(_corpus("text", "."))] == ["a.txt", "b/c.txt"]


def test_a_url_glob_leaves_out_hidden_names_and_folders_as_a_local_glob_does(tmp_path, caplog):
    """`memory://b/*` (gs://, s3:// alike): fsspec's glob matches dot names and folders, Python's does not; a URL
    glob gives what the same glob gives on a local copy (before: `.git`, `.DS_Store` and the folder `dir` were inputs,
    and the job failed on `…/.git: no such file`)."""
    names = ("a.txt", ".DS_Store", ".git/config", ".hidden/x.txt", "dir/b.txt", "dir/.cache/c.txt", ".d/e.txt")
    fs = fsspec.filesystem("memory")
    for name in names:
        fs.pipe(f"/globurl/{name}", name.encode())
    _tree(tmp_path, *names)
    for pattern, want in [("*", ["a.txt"]), ("**", ["a.txt", "dir/b.txt"]), ("*/*.txt", ["dir/b.txt"]),
                          ("dir/*", ["dir/b.txt"]), (".d/*", [".d/e.txt"]), (".*/*.txt", [".d/e.txt", ".hidden/x.txt"])]:
        local = [f.location[len(str(tmp_path)) + 1:] for f in expand_inputs(_corpus("text", tmp_path / pattern))]
        assert local == want, pattern
        url = [f.location for f in expand_inputs(_corpus("text", f"memory://globurl/{pattern}"))]
        assert url == [f"memory:///globurl/{w}" for w in want], pattern
    caplog.clear()
    with caplog.at_level("DEBUG", logger="preprocessing.inputs"):  # said at INFO once a process, then at DEBUG
        expand_inputs(_corpus("text", "memory://globurl/**"))
    assert [r.getMessage() for r in caplog.records] == [
        "memory://globurl/**: left out 5 hidden path(s) (.DS_Store, .d/, .git/, ...): not corpus"]
    with pytest.raises(InputError, match=r"memory://globurl/\.git\*: no input file at this URL"):
        expand_inputs(_corpus("text", "memory://globurl/.git*"))  # a folder, not a file: nothing to read


def _stamped_run(root, *outputs):
    _tree(root, ".bertfactory/lock", ".bertfactory/preprocess.json", "shards/manifest.json",
          "shards/quarantine.jsonl", "tokenizer/tokenizer.json", *outputs)


def test_a_run_directory_given_as_the_input_is_refused(tmp_path):
    """`--input . --out .` (or a recipe's `corpus.inputs: [.]` run in `.`): on the rerun the run directory's own
    shards, tokenizer and replaced outputs were inputs (before: `its inputs changed`, the outputs moved aside, then
    `shards.replaced-…/duplicates.jsonl: empty file (0 bytes)`). Refused naming it, before anything is moved; a
    bare lock (a run refused before it wrote anything) marks no run directory."""
    corpus = tmp_path / "corpus"
    _tree(corpus, "a.txt", "b/c.txt", ".bertfactory/lock")
    assert [f.location for f in expand_inputs(_corpus("text", corpus))] == [str(corpus / "a.txt"),
                                                                            str(corpus / "b/c.txt")]
    _stamped_run(corpus, "shards.replaced-20260101T000000Z-3f2a9c0d1e2b/quarantine.jsonl")
    for spec in (corpus, f"{corpus}/**/*.jsonl", f"{corpus}/**"):
        with pytest.raises(InputError, match=rf"^{re.escape(str(corpus))}[^:]*: this input is a run directory \(its .bertfactory/ "
                                             r"holds stamps\): its shards/, tokenizer/ and replaced outputs would "
                                             r"be read as corpus; .* \(--out DIR/run\)"):
            expand_inputs(_corpus("jsonl", spec))
    # a glob that matches no output of the run reads its files
    assert [f.name for f in expand_inputs(_corpus("text", f"{corpus}/*.txt"))] == [str(corpus / "a.txt")]
    fs = fsspec.filesystem("memory")
    for name in ("a.txt", ".bertfactory/preprocess.json", "shards/quarantine.jsonl"):
        fs.pipe(f"/runasinput/{name}", name.encode())
    for url in ("memory://runasinput/", "memory://runasinput/**"):
        with pytest.raises(InputError, match=f"{re.escape(url)}: this input is a run directory"):
            expand_inputs(_corpus("text", url))


def test_a_glob_leaves_out_a_run_directory_below_its_folder(tmp_path, caplog):
    """`corpus/**/*.jsonl` with `--out corpus/run`: a rerun read the run's shards/quarantine.jsonl (and the replaced
    outputs) as corpus; left out as a directory's expansion leaves it out, so the rerun is up to date."""
    corpus = tmp_path / "corpus"
    _tree(corpus, "a.jsonl", "sub/b.jsonl")
    before = [f.location for f in expand_inputs(_corpus("jsonl", f"{corpus}/**/*.jsonl"))]
    _stamped_run(corpus / "run", "shards.replaced-20260101T000000Z-3f2a9c0d1e2b/quarantine.jsonl")
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        assert [f.location for f in expand_inputs(_corpus("jsonl", f"{corpus}/**/*.jsonl"))] == before
    assert [r.getMessage() for r in caplog.records] == [
        f"{corpus}/**/*.jsonl: left out 1 run directory ({corpus}/run/): not corpus"]
    fs = fsspec.filesystem("memory")
    for name in ("a.jsonl", "sub/b.jsonl", "run/.bertfactory/preprocess.json", "run/shards/quarantine.jsonl"):
        fs.pipe(f"/globruns/{name}", name.encode())
    assert [f.location for f in expand_inputs(_corpus("jsonl", "memory://globruns/**"))] == [
        "memory:///globruns/a.jsonl", "memory:///globruns/sub/b.jsonl"]


def test_links_in_an_input_directory_are_followed_and_loops_and_dangling_links_are_said(tmp_path, caplog):
    """A folder linked into the corpus (`corpus/cc -> /mnt/disk/cc`) is read as a file link is (before: left out
    without a word); a link back to a folder listed already (`loop -> .`) and a FIFO are left out in the one INFO
    line; a link to nothing is refused naming it (before: left out without a word)."""
    import os

    corpus, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    _tree(corpus, "a.txt")
    _tree(elsewhere, "b.txt", "sub/c.txt")
    (corpus / "cc").symlink_to(elsewhere)
    (corpus / "loop").symlink_to(corpus)
    (corpus / "sub").mkdir()
    (corpus / "sub" / "up").symlink_to("..")
    os.mkfifo(corpus / "pipe")
    with caplog.at_level("INFO", logger="preprocessing.inputs"):
        files = expand_inputs(_corpus("text", corpus))
    assert [f.location for f in files] == [str(corpus / "a.txt"), str(corpus / "cc/b.txt"), str(corpus / "cc/sub/c.txt")]
    assert [r.getMessage() for r in caplog.records] == [
        f"{corpus}: left out 2 link(s) to a folder listed already (loop/, sub/up/) and 1 special file(s), no regular "
        "file (pipe): not corpus"]
    (corpus / "gone.txt").symlink_to(tmp_path / "nothing.txt")
    _two_ways_to_one_folder_keep_the_first_by_name(tmp_path)
    with pytest.raises(InputError, match=rf"^{re.escape(str(corpus / 'gone.txt'))}: a symbolic link to "
                                         rf"{re.escape(str(tmp_path / 'nothing.txt'))}, which does not exist"):
        expand_inputs(_corpus("text", corpus))


def _two_ways_to_one_folder_keep_the_first_by_name(tmp_path):
    """Two links to one folder: the one kept (the other is a loop) is the first by name, not by the file system's
    listing order, so the manifest's paths are the same on every machine."""
    corpus, shared = tmp_path / "two", tmp_path / "shared"
    _tree(shared, "d.txt")
    corpus.mkdir()
    for name in ("zz", "mm", "aa"):  # made in reverse name order: a listing in creation order would keep zz
        (corpus / name).symlink_to(shared)
    assert [f.location for f in expand_inputs(_corpus("text", corpus))] == [str(corpus / "aa/d.txt")]
