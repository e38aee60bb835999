"""A configured Prefect API that does not answer: every flow command stops before anything runs, in one line naming
it and the ways out, instead of Prefect's client failing after its retries with a long traceback; `doctor` shows it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from flows.cli import main
from flows.prefect_api import api_problem, unreachable
from tests.storage_servers import free_port


@pytest.fixture
def dead_api(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    monkeypatch.setenv("PREFECT_API_URL", url)
    return url


def test_a_flow_command_is_refused_in_one_line_before_anything_runs(dead_api, tmp_path, capsys):
    assert main(["pretrain", "local", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: the Prefect API at {dead_api} (PREFECT_API_URL) does not answer (")
    assert "unset PREFECT_API_URL" in err and "--no-prefect" in err
    assert not (tmp_path / "run").exists()


def test_doctor_says_the_api_does_not_answer(dead_api, capsys):
    main(["doctor"])
    api = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("API"))
    assert f"{dead_api} (does not answer: " in api, api


def test_an_api_that_answers_any_status_is_left_to_prefect(monkeypatch):
    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/api"
        assert unreachable(url) is None
        monkeypatch.setenv("PREFECT_API_URL", url)
        assert api_problem() is None
    finally:
        server.shutdown()
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setattr("flows.prefect_api.configured_api_url", lambda: None)
    assert api_problem() is None  # none configured: a temporary local server is started
