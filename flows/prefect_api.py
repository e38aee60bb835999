"""Whether the Prefect API a command would use answers, checked before anything runs.

With PREFECT_API_URL (or a profile's api.url) pointing at a server that is down, every flow call fails deep inside
Prefect's client after its retries, with a long traceback. A command checks first and stops with one line instead;
`bertfactory doctor` shows the same check.

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
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=timeout)
    except httpx.HTTPError as err:
        return str(err) or type(err).__name__
    return None


def api_problem() -> str | None:
    """The one line that refuses a command whose configured API does not answer; None when none is configured (a
    temporary local server is started) or it answers."""
    url = configured_api_url()
    reason = unreachable(url) if url else None
    if reason is None:
        return None
    return (f"the Prefect API at {url} (PREFECT_API_URL) does not answer ({reason}): start that server "
            "(`prefect server start`), unset PREFECT_API_URL to use a temporary local server, or pass --no-prefect")


def require_api() -> None:
    """Refuse (ConfigError, one line) a command whose configured API does not answer."""
    if problem := api_problem():
        from bertfactory.errors import ConfigError

        raise ConfigError(problem)
