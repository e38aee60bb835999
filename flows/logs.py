"""The stages' own progress lines (preprocessing, training, evaluation, distillation loggers) in the Prefect flow-run logs.

Prefect forwards a non-Prefect logger to the API only when it is named in PREFECT_LOGGING_EXTRA_LOGGERS at the
moment Prefect configures logging. The `bertfactory` CLI sets that variable, but a deployment run started by a
worker (`python -m prefect.engine`) configures logging before any of our code is imported. Every flow therefore
calls `forward_stage_logs()` first: it attaches Prefect's API handler to the stage loggers that lack one, so the
Prefect UI shows e.g. "documents: 106 pages read, 98 kept" and each pretraining log step, whoever started the run.
"""

from __future__ import annotations

import logging

STAGE_LOGGERS = ("preprocessing", "training", "evaluation", "distillation", "bertfactory", "flows")


def forward_stage_logs() -> None:
    from prefect.logging.handlers import APILogHandler

    for name in STAGE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, APILogHandler) for h in logger.handlers):
            logger.addHandler(APILogHandler())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
