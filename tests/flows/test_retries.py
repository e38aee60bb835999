"""Retries of the stage tasks (flows/stages.py:_is_transient) through a real corpus_refresh flow run: an I/O
failure is retried and the run completes; a missing file, a bad config or a broken contract fails at the first
attempt. The refresh itself is replaced by a function that fails as told, so that only the retry policy is
under test (the delay is set to 0 for the test)."""

from __future__ import annotations

import errno

import pytest

import flows.refresh as refresh
from bertfactory.errors import ConfigError, ContractError


@pytest.fixture
def failing_refresh(monkeypatch, tmp_path, tiny_recipe):
    """-> (run(failures) -> (state, attempts)): a corpus_refresh flow run whose refresh raises each of `failures`
    in turn, then finds nothing new."""
    monkeypatch.setattr(refresh, "corpus_version_task", refresh.corpus_version_task.with_options(retry_delay_seconds=0))
    config = tiny_recipe(tmp_path / "recipe.yaml", [tmp_path])

    def run(failures: list[Exception]):
        attempts = []

        def flaky(recipe, run_dir, sources):
            attempts.append(1)
            if len(attempts) <= len(failures):
                raise failures[len(attempts) - 1]
            return refresh._nothing_new(run_dir, 0, "nothing new: test")

        monkeypatch.setattr(refresh, "refresh_corpus", flaky)
        state = refresh.corpus_refresh(str(config), str(tmp_path / "run"), return_state=True)
        return state, len(attempts)

    return run


def test_transient_io_failures_are_retried(failing_refresh):
    state, attempts = failing_refresh([OSError(errno.ESTALE, "Stale file handle"), ConnectionError("reset by peer")])
    assert state.is_completed() and attempts == 3  # two retries, the third attempt succeeds
    assert state.result()["status"] == "nothing_new"


@pytest.mark.parametrize("error", [FileNotFoundError(2, "No such file", "x.xml"), ConfigError("bad value"),
                                   ContractError("manifest altered"), ValueError("a bug")],
                         ids=["missing-file", "config", "contract", "bug"])
def test_permanent_failures_are_not_retried(failing_refresh, error):
    state, attempts = failing_refresh([error, error, error])
    assert state.is_failed() and attempts == 1
    with pytest.raises(type(error)):
        state.result()
