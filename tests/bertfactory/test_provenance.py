"""bertfactory.provenance.result_provenance: what a benchmark's result file records so that
scripts/readme_quality.py can quote it (a short commit, whether the tree was dirty, the UTC date)."""

from datetime import datetime

from bertfactory.provenance import code_revision, result_provenance


def test_result_provenance_names_the_commit_the_tree_state_and_the_date():
    revision, found = code_revision(), result_provenance()
    assert set(found) == {"commit", "dirty", "changed", "date"}
    if revision["commit"] is None:  # an installed wheel: nothing to trace, and readme_quality refuses it
        assert found["commit"] is None and found["dirty"] is None and found["changed"] is None
    else:
        assert revision["commit"].startswith(found["commit"]) and len(found["commit"]) == 7
        assert found["dirty"] is revision["dirty"] and found["changed"] == revision["changed"]
        assert found["dirty"] is (found["changed"] != [])
    assert datetime.fromisoformat(found["date"]).utcoffset().total_seconds() == 0


def test_the_files_that_differ_from_the_commit_are_named(tmp_path, monkeypatch):
    """A checkout with an edited tracked file (a copy of this repository's provenance module in a fresh repository):
    `changed` names it, path intact (git's porcelain lines start with a space for an unstaged change)."""
    import importlib.util
    import shutil
    import subprocess

    from bertfactory import provenance

    repo = tmp_path / "checkout"
    (repo / "bertfactory").mkdir(parents=True)
    shutil.copy(provenance.__file__, repo / "bertfactory" / "provenance.py")
    (repo / "bertfactory" / "__init__.py").write_text('__version__ = "0.0.0"\n')
    (repo / "tests").mkdir()
    (repo / "tests" / "test_x.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    spec = importlib.util.spec_from_file_location("copied_provenance", repo / "bertfactory" / "provenance.py")
    copied = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copied)
    assert copied.code_revision()["dirty"] is False and copied.code_revision()["changed"] == []
    (repo / "tests" / "test_x.py").write_text("x = 2\n")
    copied.code_revision.cache_clear()
    revision = copied.code_revision()
    assert revision["dirty"] is True and revision["changed"] == ["tests/test_x.py"]
