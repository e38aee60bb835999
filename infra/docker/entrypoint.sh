#!/usr/bin/env bash
# Entrypoint of the bertfactory images (infra/docker/Dockerfile.*). Usage:
#   worker [ARGS]  a Prefect worker on $PREFECT_WORK_POOL (type $PREFECT_WORKER_TYPE, default process); ARGS go
#                  to `prefect worker start` (e.g. --run-once, --limit 1)
#   server [ARGS]  `prefect server start` on $PREFECT_SERVER_API_HOST (default 0.0.0.0: reachable from outside the
#                  container) port ${PREFECT_SERVER_PORT:-4200} (the compose file's server)
#   anything else  run as given: what Prefect's Docker/Kubernetes workers send (`prefect flow-run execute`),
#                  `bertfactory ...`, `torchrun ...`, a shell
set -euo pipefail

case "${1:-worker}" in
  worker)
    [ "$#" -gt 0 ] && shift
    : "${PREFECT_WORK_POOL:?set PREFECT_WORK_POOL to the work pool this worker polls}"
    : "${PREFECT_API_URL:?set PREFECT_API_URL to the Prefect server API, e.g. http://prefect-server:4200/api}"
    exec prefect worker start --pool "$PREFECT_WORK_POOL" --type "${PREFECT_WORKER_TYPE:-process}" "$@"
    ;;
  server)
    shift
    exec prefect server start --host "${PREFECT_SERVER_API_HOST:-0.0.0.0}" --port "${PREFECT_SERVER_PORT:-4200}" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
