"""Whether the Prefect API a command would use answers, checked before anything runs.

With PREFECT_API_URL (or a profile's api.url) pointing at a server that is down, every flow call fails deep inside
Prefect's client after its retries, with a long traceback; so does one pointing at a server's base address instead of
its API (http://127.0.0.1:4200, without /api: Prefect's client reads 404s). A command checks first and stops with
one line instead; `bertfactory doctor` and `bertfactory deploy` make the same check.

    problem = api_problem()        # None: no API set (a temporary local server is started) or it answers
    require_api()                  # the same, raised as the one-line ConfigError a command stops with
"""

from __future__ import annotations


def configured_api_url() -> str | None:
    """PREFECT_API_URL, else the active profile's api.url (the environment variable wins in Prefect too; read
    first because Prefect's settings are fixed when it is imported)."""
    import os

    if url := os.environ.get("PREFECT_API_URL"):
        return url
    from prefect.settings import get_current_settings

    return get_current_settings().api.url or None


def unreachable(url: str, timeout: float = 10.0) -> str | None:
    """Why the API at `url` does not answer, or None when it does. Any HTTP answer counts (its status is Prefect's
    client's to judge); only no connection at all is a problem."""
    answer = _health(url, timeout)
    return answer if isinstance(answer, str) else None


def _health(url: str, timeout: float):
    """GET `url`/health: the response, or why there was none (a string)."""
    import httpx

    try:
        return httpx.get(f"{url.rstrip('/')}/health", timeout=timeout)
    except httpx.HTTPError as err:
        return str(err) or type(err).__name__


def _is_prefect_health(response) -> bool:
    """The answer of a Prefect API's /health: 200 and the JSON `true`."""
    try:
        return response.status_code == 200 and response.json() is True
    except ValueError:
        return False


def misplaced_api(url: str, timeout: float = 10.0) -> str | None:
    """The API URL a server's base address `url` was meant to be (`url`/api), when `url` itself does not answer as a
    Prefect API and `url`/api does: PREFECT_API_URL=http://127.0.0.1:4200, the UI's address, instead of
    http://127.0.0.1:4200/api. None otherwise (anything else is Prefect's client's to judge)."""
    base = url.rstrip("/")
    if base.endswith("/api"):
        return None
    answer = _health(f"{base}/api", timeout)
    return f"{base}/api" if not isinstance(answer, str) and _is_prefect_health(answer) else None


def url_problem(url: str, timeout: float = 10.0) -> tuple[str, str] | None:
    """What is wrong with the Prefect API at `url` (None: it answers): ("down", why there was no connection), or
    ("misplaced", the API URL) when `url` is a server's base address instead of its API."""
    answer = _health(url, timeout)
    if isinstance(answer, str):
        return "down", answer
    if not _is_prefect_health(answer) and (api := misplaced_api(url, timeout)):
        return "misplaced", api
    return None


def misplaced_message(url: str, api: str) -> str:
    return (f"PREFECT_API_URL={url} is the address of a Prefect server, not of its API: set PREFECT_API_URL={api} "
            "(a Prefect server's API URL ends in /api)")


def api_problem() -> str | None:
    """The one line that refuses a command whose configured API does not answer (or is a server's address instead
    of its API); None when none is configured (a temporary local server is started) or it answers."""
    url = configured_api_url()
    problem = url_problem(url) if url else None
    if problem is None:
        return None
    kind, detail = problem
    if kind == "misplaced":
        return misplaced_message(url, detail)
    return (f"the Prefect API at {url} (PREFECT_API_URL) does not answer ({detail}): start that server "
            "(`prefect server start`), unset PREFECT_API_URL to use a temporary local server, or pass --no-prefect")


def require_api() -> None:
    """Refuse (ConfigError, one line) a command whose configured API does not answer."""
    if problem := api_problem():
        from bertfactory.errors import ConfigError

        raise ConfigError(problem)
