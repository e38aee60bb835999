"""Source watchers (flows/watch.py): a Wikipedia dumps directory counts only finished jobs' files (checked against
their recorded size), a CC-News warc.paths.gz month listing resolves against the crawl root, fsspec URLs are listed
with retries on transient failures and then fail naming the URL (and an fsspec source refreshes end to end), and a
dumps-layout refresh builds a version from a finished job and ignores an unfinished one."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from xml.sax.saxutils import escape

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from bertfactory.errors import ConfigError, InputError
from bertfactory.samples import sample_path
from flows.recipe import RefreshConfig, load_recipe
from flows.refresh import refresh_corpus
from flows.watch import discover, discover_all
from preprocessing.config import CorpusConfig

FAST = RefreshConfig(list_attempts=3, list_backoff_s=0.0)


def mediawiki_dump(path: Path, titles: list[str]) -> Path:
    """A bz2 MediaWiki export whose pages are real State of the Union addresses (the `sotu` sample)."""
    import bz2

    sotu = sorted(sample_path("sotu").glob("*.txt"))
    pages = "".join(
        f"<page><title>{escape(t)}</title><ns>0</ns><id>{i + 1}</id><revision><id>{i + 100}</id>"
        f"<model>wikitext</model><text xml:space=\"preserve\">{escape(sotu[i].read_text(encoding='utf-8'))}</text>"
        "</revision></page>\n" for i, t in enumerate(titles))
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
           f"<siteinfo><sitename>Testwiki</sitename></siteinfo>\n{pages}</mediawiki>\n")
    path.write_bytes(bz2.compress(xml.encode("utf-8")))
    return path


def dump_dir(root: Path, date: str, jobs: dict[str, tuple[str, list[Path]]]) -> Path:
    """<root>/<date>/ with a dumpstatus.json as dumps.wikimedia.org writes it: job -> status and files."""
    d = root / date
    d.mkdir(parents=True, exist_ok=True)
    status = {"jobs": {job: {"status": state, "updated": f"{date} 10:00:00", "files": {
        f.name: {"size": f.stat().st_size, "url": f"/testwiki/{date}/{f.name}", "sha1": "0" * 40}
        for f in files}} for job, (state, files) in jobs.items()}, "version": "0.8"}
    (d / "dumpstatus.json").write_text(json.dumps(status), encoding="utf-8")
    return d


WIKI = CorpusConfig(format="wikipedia")


def test_wikipedia_dumps_layout_counts_only_finished_jobs(tmp_path):
    root = tmp_path / "testwiki"
    (root / "20240601").mkdir(parents=True)
    done = mediawiki_dump(root / "20240601/testwiki-20240601-pages-articles1.xml.bz2", ["A", "B"])
    running = mediawiki_dump(root / "20240601/testwiki-20240601-pages-articles-multistream.xml.bz2", ["A"])
    dump_dir(root, "20240601", {"articlesdump": ("done", [done]), "articlesmultistreamdump": ("in-progress", [running])})
    (root / "20240701").mkdir()
    later = mediawiki_dump(root / "20240701/testwiki-20240701-pages-articles1.xml.bz2", ["C"])
    dump_dir(root, "20240701", {"articlesdump": ("waiting", [later])})
    (root / "latest").mkdir()  # not a dated dump: ignored

    assert [f.location for f in discover(str(root), WIKI, FAST)] == [f"{root}/20240601/{done.name}"]
    # one dump directory on its own; another job list
    jobs = FAST.model_copy(update={"wikipedia_jobs": ["articlesmultistreamdump"]})
    assert discover(str(root / "20240601"), WIKI, jobs) == []
    index = root / "20240601/testwiki-20240601-pages-articles-multistream-index.txt.bz2"
    index.write_bytes(b"")
    dump_dir(root, "20240601", {"articlesdump": ("done", [done]), "articlesmultistreamdump": ("done", [running, index])})
    assert [Path(f.location).name for f in discover(str(root / "20240601"), WIKI, jobs)] == [running.name]  # no index
    dump_dir(root, "20240701", {"articlesdump": ("done", [later])})
    assert [Path(f.location).name for f in discover(str(root), WIKI, FAST)] == [done.name, later.name]

    later.write_bytes(later.read_bytes()[:-10])  # a partial download
    with pytest.raises(InputError, match=rf"{later.name}: \d+ bytes, but .*dumpstatus.json records \d+ .*partial"):
        discover(str(root), WIKI, FAST)
    later.unlink()
    with pytest.raises(InputError, match=rf"{later.name}: listed by the finished job 'articlesdump'"):
        discover(str(root), WIKI, FAST)
    (root / "20240701/dumpstatus.json").write_text("<html>503</html>")
    with pytest.raises(InputError, match=r"20240701/dumpstatus.json: not a Wikipedia dumpstatus.json"):
        discover(str(root), WIKI, FAST)
    with pytest.raises(ConfigError, match="needs corpus.format wikipedia"):
        discover(str(root), CorpusConfig(format="text"), FAST)


def test_a_dumps_layout_refresh_reads_a_finished_dump_and_waits_for_an_unfinished_one(tmp_path, tiny_recipe):
    root = tmp_path / "testwiki"
    (root / "20240601").mkdir(parents=True)
    done = mediawiki_dump(root / "20240601/testwiki-20240601-pages-articles1.xml.bz2", ["Alpha", "Beta", "Gamma"])
    dump_dir(root, "20240601", {"articlesdump": ("done", [done])})
    (root / "20240701").mkdir()
    later = mediawiki_dump(root / "20240701/testwiki-20240701-pages-articles1.xml.bz2", ["Delta"])
    dump_dir(root, "20240701", {"articlesdump": ("in-progress", [later])})
    config = tiny_recipe(tmp_path / "recipe.yaml", [root], fmt="wikipedia")
    recipe = load_recipe(config)
    first = refresh_corpus(recipe, tmp_path / "run")
    assert first["status"] == "new_version" and first["new_inputs"] == [f"{root}/20240601/{done.name}"]
    assert first["counts"]["docs_kept"] == 3
    second = refresh_corpus(recipe, tmp_path / "run")  # the July dump is still running
    assert second["status"] == "nothing_new" and second["version"] == 1


def test_cc_news_month_listing_resolves_against_the_crawl_root(tmp_path):
    month = tmp_path / "mirror/crawl-data/CC-NEWS/2024/06"
    month.mkdir(parents=True)
    warc = sample_path("cc_warc")  # a real Common Crawl WARC
    names = ["CC-NEWS-20240601000000-00001.warc", "CC-NEWS-20240602000000-00002.warc"]
    for name in names:
        shutil.copy(warc, month / name)
    listing = month / "warc.paths.gz"
    listing.write_bytes(gzip.compress("".join(f"crawl-data/CC-NEWS/2024/06/{n}\n" for n in names).encode()))
    found = discover(str(listing), CorpusConfig(format="warc"), FAST)
    assert [f.location for f in found] == [f"{tmp_path}/mirror/crawl-data/CC-NEWS/2024/06/{n}" for n in names]

    listing.write_bytes(gzip.compress(b"crawl-data/CC-NEWS/2024/06/CC-NEWS-20240603000000-00003.warc.gz\n"))
    with pytest.raises(InputError, match=r"00003.warc.gz: listed in .*warc.paths.gz \(line 1\) but not there"):
        discover(str(listing), CorpusConfig(format="warc"), FAST)
    listing.write_bytes(b"not gzip")
    with pytest.raises(InputError, match="warc.paths.gz: not a gzip file"):
        discover(str(listing), CorpusConfig(format="warc"), FAST)
    with pytest.raises(ConfigError, match="needs corpus.format warc"):
        discover(str(listing), CorpusConfig(format="text"), FAST)


class FlakyFileSystem(MemoryFileSystem):
    """fsspec's in-memory file system whose listing calls fail with ConnectionError while `failures` > 0 (a
    network blip), or always when `failures` is negative (an unreachable service)."""

    protocol = "flaky"
    failures = 0
    calls = 0

    @classmethod
    def _strip_protocol(cls, path):
        return MemoryFileSystem._strip_protocol(path[len("flaky://"):] if path.startswith("flaky://") else path)

    def _maybe_fail(self):
        type(self).calls += 1
        if type(self).failures:
            type(self).failures -= 1 if type(self).failures > 0 else 0
            raise ConnectionError("connection reset by peer")

    def isdir(self, path):
        self._maybe_fail()
        return super().isdir(path)


@pytest.fixture
def flaky():
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
    fs = FlakyFileSystem()
    for name in ("a.txt", "b.txt"):
        fs.pipe(f"/watch-{id(fs)}/{name}", b"One sentence here. Another one there.\n")
    yield f"flaky:///watch-{id(fs)}", FlakyFileSystem
    FlakyFileSystem.failures = 0


def test_fsspec_urls_are_listed_with_retries_then_fail_naming_the_url(flaky, caplog):
    url, fs_class = flaky
    text = CorpusConfig(format="text")
    fs_class.failures, fs_class.calls = 2, 0
    found = discover_all([url], text, FAST)
    assert [Path(f.location).name for f in found] == ["a.txt", "b.txt"] and found[0].location.startswith("flaky://")
    assert "attempt 3 of 3" in caplog.text

    fs_class.failures = -1  # never comes back
    with pytest.raises(InputError, match=rf"{url}: cannot list after 3 attempt\(s\): ConnectionError"):
        discover_all([url], text, FAST)
    fs_class.failures, fs_class.calls = 0, 0
    with pytest.raises(InputError, match="no input file at this URL"):  # lists fine, holds nothing: not retried
        discover_all([url + "-nothing"], text, FAST)


def test_an_fsspec_url_source_is_refreshed_end_to_end(tmp_path, tiny_recipe):
    """Objects under a memory:// prefix (fsspec's in-process store, standing in for s3:// or gs://): version 1 from
    two objects, version 2 from the one written since, then nothing new."""
    fs = fsspec.filesystem("memory")
    prefix = f"/bucket-{tmp_path.name}/news"
    sotu = sample_path("sotu")
    for name in ("1790_george_washington_n.txt", "1791_george_washington_n.txt"):
        fs.pipe(f"{prefix}/{name}", (sotu / name).read_bytes())
    recipe = load_recipe(tiny_recipe(tmp_path / "recipe.yaml", [f"memory://{prefix}/"]))
    try:
        assert refresh_corpus(recipe, tmp_path / "run")["counts"]["docs_kept"] == 2
        fs.pipe(f"{prefix}/1792_george_washington_n.txt", (sotu / "1792_george_washington_n.txt").read_bytes())
        second = refresh_corpus(recipe, tmp_path / "run")
        assert second["version"] == 2 and second["new_inputs"] == [f"memory://{prefix}/1792_george_washington_n.txt"]
        assert refresh_corpus(recipe, tmp_path / "run")["status"] == "nothing_new"
    finally:
        fs.rm(f"/bucket-{tmp_path.name}", recursive=True)


def test_the_watch_command_prints_each_file_or_one_error_line(tmp_path, capsys):
    # `python -m flows.watch RECIPE SOURCE...` (docs/orchestration.md): a missing source was a traceback, no
    # arguments an IndexError, and a bundled recipe's name (local) was not accepted
    from flows.watch import main

    (tmp_path / "news").mkdir()
    for name in ("a.txt", "b.txt"):
        (tmp_path / "news" / name).write_text("Some text.\n", encoding="utf-8")
    assert main(["local", str(tmp_path / "news")]) == 0
    assert capsys.readouterr().out.splitlines() == [str(tmp_path / "news" / n) for n in ("a.txt", "b.txt")]
    assert main(["local", str(tmp_path / "news"), str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {tmp_path / 'missing'}: input file not found (watched sources entry " \
                           f"'{tmp_path / 'missing'}')\n" and captured.out == ""
    with pytest.raises(SystemExit) as usage:
        main([])
    assert usage.value.code == 2


def test_the_watch_command_prints_a_recipe_error_in_one_line(tmp_path, capsys):
    from flows.watch import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text("corpus:\n  inputz: [a]\n  format: txt\n")
    assert main([str(recipe)]) == 2  # was the config error's header and one line per problem
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: invalid configuration in {recipe}: 'corpus.format': ")
    assert "; unknown key 'corpus.inputz' (did you mean 'inputs'?)" in err


def test_a_refresh_source_that_is_not_there_is_named_as_one_not_as_the_recipes_corpus_inputs(tmp_path, capsys):
    # `bertfactory refresh local --source /nonexistent` said '(corpus.inputs entry ...)': the recipe's inputs were not
    # what the user had mistyped
    from flows.cli import main

    missing = tmp_path / "nonexistent"
    assert main(["refresh", "local", "--run-dir", str(tmp_path / "run"), "--source", str(missing),
                 "--no-prefect"]) != 0
    assert f"{missing}: input file not found (refresh sources entry '{missing}')" in capsys.readouterr().err
