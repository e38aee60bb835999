"""Test-wide settings. Prefect runs against a temporary home with an ephemeral API, analytics off."""

import os
import tempfile

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bertfactory-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_UI_ENABLED", "false")
# stage code run outside a flow (unit tests, --no-prefect) logs locally only, without a warning per line
os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "preprocessing,training,evaluation,bertfactory,flows")
