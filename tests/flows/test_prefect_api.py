"""A configured Prefect API that does not answer, or a server's base address given instead of its API (no /api): every
flow command stops before anything runs, in one line naming it and the way out, instead of Prefect's client failing
with a long traceback; `doctor` shows it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from flows.cli import main
from flows.prefect_api import api_problem, misplaced_api, unreachable
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


class ServerRoot(BaseHTTPRequestHandler):
    """A Prefect server's base address (no UI): /api/health answers `true`, everything else 404, as Prefect 3.8's does;
    with `ui`, the rest answers 200 with the UI's HTML page, as the server with its UI does."""

    ui = False

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/api/health":
            status, body, kind = 200, b"true", "application/json"
        elif self.ui:
            status, body, kind = 200, b"<!doctype html><html><body>Prefect</body></html>", "text/html"
        else:
            status, body, kind = 404, b'{"detail":"Not Found"}', "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(params=[False, True], ids=["no-ui", "ui"])
def server_root(request, monkeypatch):
    handler = type("Handler", (ServerRoot,), {"ui": request.param})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("PREFECT_API_URL", url)
    yield url
    server.shutdown()


def test_a_servers_address_without_api_is_refused_in_one_line_naming_the_api_url(server_root, tmp_path, capsys):
    # PREFECT_API_URL=http://127.0.0.1:4200 (the UI's address): a flow command crashed in Prefect's client with a
    # 64-line traceback ("Failed to reach API"), and doctor said the API answers
    assert misplaced_api(server_root) == f"{server_root}/api"
    assert misplaced_api(f"{server_root}/api") is None
    assert main(["pretrain", "local", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: PREFECT_API_URL={server_root} is the address of a Prefect server, not of its API: set "
                   f"PREFECT_API_URL={server_root}/api (a Prefect server's API URL ends in /api)"), err
    assert not (tmp_path / "run").exists()
    main(["doctor"])
    api = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("API"))
    assert f"{server_root} (not the API but a Prefect server's address: set PREFECT_API_URL={server_root}/api)" in api


def test_its_api_url_is_not_refused(server_root, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", f"{server_root}/api")
    assert api_problem() is None
