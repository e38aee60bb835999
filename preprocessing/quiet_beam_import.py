"""Keep Beam's import-time "apitools not found" warning off every command's output.

`import apache_beam` imports its BigQuery client stubs, which log `WARNING root: apitools not found, and bigquery
client libraries are not available ...` whenever google-apitools (part of Beam's `gcp` extra, needed only for
Dataflow and BigQuery) is not installed: on every run of the local presets, where it means nothing. The record is
dropped by a filter on the root logger (the logger Beam's module-level `logging.warning` uses) that matches only
that message from that Beam module, so every other root warning still shows. `bertfactory doctor` reports the
missing Dataflow extras instead. The preprocessing package installs it on import, before any of its modules
imports Beam; the `local` preset's SDK worker processes start from preprocessing/sdk_worker_main.py, which imports
the package before Beam.
"""

from __future__ import annotations

import logging
from pathlib import Path

_SOURCE = Path("apache_beam", "io", "gcp", "internal", "clients", "bigquery", "__init__.py")
_MESSAGE = "apitools not found"


class _BeamApitoolsWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.pathname.endswith(str(_SOURCE)) and str(record.msg).startswith(_MESSAGE))


def install() -> None:
    """Idempotent: one filter on the root logger per process."""
    root = logging.getLogger()
    if not any(isinstance(f, _BeamApitoolsWarning) for f in root.filters):
        root.addFilter(_BeamApitoolsWarning())
