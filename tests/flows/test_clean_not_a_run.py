"""`bertfactory clean DIR` on a local directory that is not a run directory (a corpus folder, a typo'd path) is
refused in one `error:` line with exit code 2, before any lock is taken: nothing is written there (a
`.bertfactory/lock` left in a corpus folder would be read as a run directory's, and as corpus). A directory that does
not exist is refused the same way. Real run directories, even ones holding only stage outputs (a run written by
run_preprocess alone) or only a replaced folder, are still cleaned.

Run: `.venv/bin/python -m pytest -q -p no:cacheprovider tests/flows/test_clean_not_a_run.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.clean import is_run_directory
from flows.cli import main
from tests.flows.test_lock_lease import error_line

ASIDE = "pretrain.replaced-20260101T000000Z-3f2a9c0d1e2b"


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in root.rglob("*")}


@pytest.mark.parametrize("yes", [True, False])
def test_a_directory_that_is_not_a_run_is_refused_and_nothing_is_written(tmp_path, capsys, yes):
    notarun = tmp_path / "notarun"
    (notarun / "sub").mkdir(parents=True)
    (notarun / "a.txt").write_text("hi\n")
    (notarun / "sub" / "b.txt").write_text("there\n")
    before = _listing(notarun)
    assert main(["clean", str(notarun)] + (["--yes"] if yes else [])) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: {notarun}: not a run directory ("), line
    assert "docs/run-directory.md" in line
    assert _listing(notarun) == before and not (notarun / ".bertfactory").exists()
    assert capsys.readouterr().out == ""


def test_a_missing_directory_is_refused_and_not_created(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["clean", str(missing), "--yes"]) == 2
    assert error_line(capsys) == f"error: {missing}: no such run directory"
    assert not missing.exists()


@pytest.mark.parametrize("entries", [[".bertfactory/lock"], ["shards/manifest.json"], ["tokenizer/tokenizer.json"],
                                     ["eval/results.json"], [f"{ASIDE}/final/model.safetensors"]])
def test_run_directories_are_recognised_and_cleaned(tmp_path, capsys, entries):
    run = tmp_path / "run"
    for entry in entries:
        (run / entry).parent.mkdir(parents=True, exist_ok=True)
        (run / entry).write_bytes(b"x")
    assert is_run_directory(run)
    assert main(["clean", str(run), "--yes"]) == 0, capsys.readouterr().err
    assert not (run / ASIDE).exists()
    out = capsys.readouterr().out
    assert ("deleted 1 replaced output folder(s)" in out) if ASIDE in entries[0] else "no replaced outputs" in out


def test_a_folder_with_folders_named_like_a_runs_is_no_run_directory(tmp_path, capsys):
    """A home or project folder holding its own corpora/, shards/, eval/ (no stamps, no stage's files) and other runs
    below it: before, `bertfactory clean ~ --yes` took it for a run directory, deleted the replaced outputs of every
    run under it (without their locks) and left a .bertfactory/lock in it."""
    home = tmp_path / "home"
    for name in ("corpora/news/a.txt", "shards/part-0.txt", "eval/notes.md", "tokenizer/vocab.txt",
                 "pretrain/notes.md", "continued/x.txt", f"projects/run/{ASIDE}/final/model.safetensors",
                 "projects/run/.bertfactory/lock"):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text("x\n")
    before = _listing(home)
    assert not is_run_directory(home)
    assert main(["clean", str(home), "--yes"]) == 2
    assert error_line(capsys).startswith(f"error: {home}: not a run directory (")
    assert _listing(home) == before  # the other run's replaced folder kept, no lock left behind
    assert is_run_directory(home / "projects" / "run")
