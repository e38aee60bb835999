"""User errors end a command with one `error:` line and exit code 2 through the installed CLI with Prefect on (each
kind: a recipe key, a malformed input, a missing input file, a missing sample, a stage before its upstream, a
shard contract), without Prefect's traceback of the flow crash; a bug keeps its traceback; --debug shows all."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.errors import ContractError, InputError
from flows.user_errors import PrefectUserErrorFilter, is_user_error, user_error_line

CLI = str(Path(sys.executable).parent / "bertfactory")  # the installed console script
PREFECT_CRASH_REPORT = ("Traceback", "Encountered exception during execution", "Finished in state Failed")


def bertfactory(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600)


def assert_one_error_line(run: subprocess.CompletedProcess, *expected: str) -> str:
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, run.stderr
    for text in expected:
        assert text in errors[0], run.stderr
    for text in PREFECT_CRASH_REPORT:
        assert text not in run.stderr, run.stderr
    return errors[0]


def write_manifest_run(run: Path, text: str) -> Path:
    (run / "shards").mkdir(parents=True)
    (run / "tokenizer").mkdir()
    (run / "shards" / "manifest.json").write_text(text, encoding="utf-8")
    (run / "tokenizer" / "tokenizer.json").write_text("{}", encoding="utf-8")
    return run


@pytest.mark.usefixtures("cli_on_shared_prefect")
@pytest.mark.parametrize("kind", ["recipe key", "malformed input", "missing input file", "missing sample",
                                  "stage before its upstream", "shard contract"])
def test_each_user_error_is_one_line_and_exit_2_with_prefect(kind, tmp_path):
    if kind == "recipe key":
        run = bertfactory("preprocess", "local", "--run-dir", "r", "--set", "preprocess.masking.polcy=token",
                          cwd=tmp_path)
        assert_one_error_line(run, "local.yaml", "preprocess.masking.polcy", "policy")
    elif kind == "malformed input":
        (tmp_path / "empty.txt").write_text("", encoding="utf-8")
        run = bertfactory("preprocess", "--input", "empty.txt", "--format", "text", "--out", "r", cwd=tmp_path)
        assert "Beginning flow run" in run.stderr  # the error happened inside the Prefect flow
        assert_one_error_line(run, "empty.txt", "empty file")
    elif kind == "missing input file":
        (tmp_path / "a.txt").write_text("Some text. More text.\n", encoding="utf-8")
        run = bertfactory("preprocess", "--input", "a.txt", "--format", "text", "--tokenizer", "gone.json",
                          "--out", "r", cwd=tmp_path)
        assert "Beginning flow run" in run.stderr
        assert_one_error_line(run, "gone.json", "does not exist")
    elif kind == "missing sample":
        run = bertfactory("preprocess", "local", "--run-dir", "r", cwd=tmp_path,
                          BERTFACTORY_CACHE=str(tmp_path / "empty-cache"))
        assert "Beginning flow run" in run.stderr
        assert_one_error_line(run, "enwiki", "bertfactory samples fetch enwiki")
    elif kind == "stage before its upstream":
        run = bertfactory("pretrain", "local", "--run-dir", "r", cwd=tmp_path)
        assert "Beginning flow run" in run.stderr
        assert_one_error_line(run, "shards/manifest.json", "bertfactory preprocess")
    else:
        write_manifest_run(tmp_path / "r", '{"schema": 99}')
        run = bertfactory("pretrain", "local", "--run-dir", "r", cwd=tmp_path)
        assert "Beginning flow run" in run.stderr
        assert_one_error_line(run, "manifest.json", "schema version")


@pytest.mark.usefixtures("cli_on_shared_prefect")
def test_debug_shows_the_traceback_and_prefects_report_of_a_user_error(tmp_path):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    run = bertfactory("preprocess", "--input", "empty.txt", "--format", "text", "--out", "r", "--debug", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" in run.stderr and "Encountered exception during execution" in run.stderr
    assert run.stderr.count("bertfactory.errors.InputError: empty.txt: empty file") >= 1
    assert [line for line in run.stderr.splitlines() if line.startswith("error: ")] == [
        "error: empty.txt: empty file (0 bytes)"]


# `bertfactory preprocess ...` in a fresh process whose stage code has a bug (the entry point replaced by one that
# divides by zero): the CLI's main, Prefect on, real stderr
BUGGY_CLI = """
import sys
import flows.stage_runner
from flows.cli import main

def broken(stage):
    def run(recipe, run_dir):
        return 1 / 0
    return run

flows.stage_runner._entry_point = broken
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.usefixtures("cli_on_shared_prefect")
def test_a_bug_inside_a_prefect_flow_keeps_its_traceback(tmp_path):
    (tmp_path / "a.txt").write_text("Some text. More text.\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-c", BUGGY_CLI, "preprocess", "--input", "a.txt", "--format", "text",
                          "--out", "r"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stderr
    assert "Encountered exception during execution" in run.stderr  # Prefect's report of the crash is kept
    assert "Traceback" in run.stderr and "\nZeroDivisionError: division by zero\n" in run.stderr
    assert not any(line.startswith("error: ") for line in run.stderr.splitlines())


def test_what_counts_as_a_user_error_and_its_one_line():
    assert is_user_error(InputError("x")) and is_user_error(FileNotFoundError(2, "No such file", "a.tsv"))
    assert not is_user_error(ZeroDivisionError()) and not is_user_error(KeyError("k"))
    assert user_error_line(FileNotFoundError(2, "No such file or directory", "a.tsv")) == \
        "a.tsv: No such file or directory"
    assert user_error_line(ContractError("invalid configuration in r.yaml:\n  - unknown key 'a.b'\n  - 'c': bad")) \
        == "invalid configuration in r.yaml: unknown key 'a.b'; 'c': bad"


def test_the_filter_keeps_prefects_reports_of_user_errors_for_the_api_only():
    def record(name, msg, exc=None):
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None,
                                 (type(exc), exc, None) if exc else None)

    class Collect(logging.Handler):  # stands for Prefect's API handler on the run logger
        def __init__(self):
            super().__init__()
            self.records = []

        def emit(self, r):
            self.records.append(r)

    quiet = PrefectUserErrorFilter()
    api = Collect()
    logging.getLogger("prefect.flow_runs").addHandler(api)
    try:
        crash = record("prefect.flow_runs", "Encountered exception during execution", InputError("x"))
        assert not quiet.filter(crash) and api.records == [crash]  # not propagated; the API handler has it
        assert not quiet.filter(record("prefect.flow_runs", "Finished in state Failed('Flow run encountered an "
                                       "exception: SampleMissingError: y')"))
        assert quiet.filter(record("prefect.flow_runs", "Encountered exception during execution",
                                   ZeroDivisionError()))
        assert quiet.filter(record("prefect.flow_runs", "Finished in state Failed('Flow run encountered an "
                                   "exception: ZeroDivisionError: z')"))
    finally:
        logging.getLogger("prefect.flow_runs").removeHandler(api)
    assert not quiet.filter(record("prefect.task_runs", "Finished in state Failed('Task run encountered an "
                                   "exception InputError: x')"))
