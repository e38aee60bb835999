"""Beam's Python local job service (`apache_beam.runners.portability.local_job_service_main`, same flags) with the
dead-worker watch of preprocessing.dead_workers installed, so that a portable job whose SDK worker dies fails with
`WorkerDied` instead of waiting forever. preprocessing.portable_local starts the job service this way.

    python -m preprocessing.portable_job_service --port 8099 --staging_dir /tmp/staging
"""

from __future__ import annotations

import logging
import signal
import sys

from apache_beam.runners.portability import local_job_service_main

from .dead_workers import install


def main(argv: list[str]) -> None:
    """`argv`: the job service's flags (without the program name)."""
    install(external=True)  # the job service runs the FnApiRunner that waits on the pools' workers
    local_job_service_main.run(argv)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))  # as Beam's own main: a clean exit on SIGTERM
    logging.basicConfig()
    logging.getLogger().setLevel(logging.INFO)
    main(sys.argv[1:])
